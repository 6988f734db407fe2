"""How long a planned run is and what it leaves on disk: steps per epoch, total steps, checkpoint sizes.

Why here and not only in the table: a plan that trains 0 steps, stops before the step its reference result was
reported at, or fills the checkpoint disk halfway must fail the dry run, not print a number and "dry run OK".

Step arithmetic follows verl 0.6.1's loaders and loops. RL draws ``train_batch_size`` prompts per step with
``drop_last`` (verl/trainer/main_ppo.py create_rl_sampler + StatefulDataLoader); SFT shards the rows over the
data-parallel ranks (``DistributedSampler(drop_last=True)``) and each rank draws ``train_batch_size / dp`` per step.
Both trainers stop at ``trainer.total_training_steps`` when it is set, and in any case when their
``for epoch in range(total_epochs)`` loop ends (verl/trainer/ppo/ray_trainer.py:420-425 and 1049;
verl/trainer/fsdp_sft_trainer.py:735-740 and 781), so the effective count is the smaller of the two.

Checkpoint size: both trainers save ``['model', 'optimizer', 'extra']`` by default
(verl/trainer/config/actor/actor.yaml:104, sft_trainer.yaml:95): the FSDP shards of the fp32 parameters
(``model_dtype`` fp32) and of AdamW's two fp32 moments, i.e. ~12 bytes per parameter; no Hugging Face export.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from recipes.launch.catalog import Recipe
from recipes.launch.checks import world_size
from recipes.launch.memory import facts_for

#: Bytes a verl FSDP checkpoint takes per model parameter: fp32 weights (4) + AdamW exp_avg and exp_avg_sq (4 + 4).
CKPT_BYTES_PER_PARAM = 12


def steps_per_epoch(cfg: DictConfig, phase: str, rows: int | None) -> tuple[int | None, str]:
    """(steps, how) from the training rows, or (None, why not)."""
    if rows is None:
        return None, "dataset size not readable here"
    limit = int(cfg.data.get("train_max_samples", -1) or -1)
    if 0 < limit < rows:
        rows = limit
    batch = int(cfg.data.train_batch_size)
    if phase == "sft":
        dp = max(1, world_size(cfg) // int(cfg.ulysses_sequence_parallel_size))
        return (rows // dp) // max(1, batch // dp), f"{rows:,} rows / batch {batch}"
    return rows // batch, f"{rows:,} rows / batch {batch}, before overlong prompts are dropped"


def planned_steps(cfg: DictConfig, phase: str, rows: int | None) -> int | None:
    """The steps the trainer will actually run, or None when the dataset size is unknown and no cap is set."""
    fixed = cfg.trainer.get("total_training_steps")
    per_epoch, _ = steps_per_epoch(cfg, phase, rows)
    by_epochs = None if per_epoch is None else per_epoch * int(cfg.trainer.total_epochs)
    if fixed is not None:  # 0 is a cap too (bad_counts refuses it first), not "unset"
        return int(fixed) if by_epochs is None else min(int(fixed), by_epochs)
    return by_epochs


def total_steps_text(cfg: DictConfig, phase: str, rows: int | None) -> str:
    fixed = cfg.trainer.get("total_training_steps")
    per_epoch, _ = steps_per_epoch(cfg, phase, rows)
    epochs = int(cfg.trainer.total_epochs)
    if fixed is not None:
        if per_epoch is not None and per_epoch * epochs < int(fixed):
            capped = f"trainer.total_training_steps={fixed} not reached"
            return f"{per_epoch * epochs} ({epochs} epoch(s) x {per_epoch}; {capped})"
        return f"{fixed} (trainer.total_training_steps)"
    if per_epoch is None:
        return f"{epochs} epoch(s) x steps per epoch"
    return f"{per_epoch * epochs} ({epochs} epoch(s) x {per_epoch})"


def model_parameters(model_path: str | None, recipe: Recipe) -> tuple[int, str]:
    """(parameters, where the count came from): the model's shape, from its config.json when readable (the smoke's
    tiny model is not the recipe's), else the recipe's table; the same facts as the memory estimate.

    Never the bytes on disk: issue 33 finding 1, a 7B folder with 1 of its 4 shards downloaded planned "~6.0 KB"
    per checkpoint; whether the folder is complete is the path check's question (recipes/launch/paths.py)."""
    facts = facts_for(model_path, recipe.model)
    where = f"{model_path}/config.json" if facts is not recipe.model else f"{recipe.model.hf_name}, recipe table"
    return facts.parameters, f"{facts.parameters / 1e9:.2f}B parameters from {where}"


@dataclass(frozen=True)
class CheckpointBudget:
    per_checkpoint: int  # bytes
    count: int | None  # checkpoints on disk at the end; None: unknown (steps unknown)
    keep: int | None  # trainer's keep limit; None: all
    source: str  # where the parameter count came from

    @property
    def total(self) -> int | None:
        return None if self.count is None else self.per_checkpoint * self.count


def checkpoint_budget(cfg: DictConfig, phase: str, steps: int | None, params: int, source: str) -> CheckpointBudget:
    """Size of one checkpoint and how many the run leaves on disk.

    Both trainers save every ``save_freq`` steps and at the last step; the SFT trainer saves the last step even
    with ``save_freq <= 0`` (verl/trainer/fsdp_sft_trainer.py:802), the PPO trainer only with ``save_freq > 0``
    (verl/trainer/ppo/ray_trainer.py, the ``save_freq > 0 and (is_last_step or ...)`` test). Older ones beyond the
    keep limit are deleted."""
    save_freq = int(cfg.trainer.save_freq)
    keep = cfg.trainer.get("max_ckpt_to_keep" if phase == "sft" else "max_actor_ckpt_to_keep")
    keep = int(keep) if keep else None
    count: int | None
    if steps is None:
        count = keep if save_freq > 0 or phase == "sft" else 0
    elif save_freq > 0:
        count = math.ceil(steps / save_freq)
    else:
        count = 1 if phase == "sft" and steps > 0 else 0
    if count is not None and keep is not None:
        count = min(count, keep)
    return CheckpointBudget(params * CKPT_BYTES_PER_PARAM, count, keep, source)


def free_bytes(path: str) -> tuple[int, Path] | None:
    """Free space at the nearest existing parent of ``path`` (the checkpoint dir may not exist yet)."""
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        return shutil.disk_usage(where).free, where
    except OSError:
        return None


def human(num: int | float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(num) < 1000 or unit == "TB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1000
    return f"{num:.1f} TB"
