"""How long a planned run is and what it leaves on disk: steps per epoch, total steps, checkpoint sizes.

Numbers in, numbers out: :func:`recipes.launch.planning.facts.derive` reads the config once and calls these.

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
(``model_dtype`` fp32) and of AdamW's two fp32 moments, i.e. ~12 bytes per parameter; no Hugging Face export. verl
0.9.1's trainers save the same (actor/actor.yaml:135, sft_trainer_engine.yaml:54; engine/fsdp.yaml:33 model_dtype fp32,
optim/fsdp.yaml:5 AdamW): the main job's engine SFT checkpoint (FSDP2, 2 ranks, the 39.2M-parameter tiny Qwen3) held
470.4 MB of shards for the 470.3 MB planned, plus 18.7 MB of tokenizer in huggingface/
(tests/stack091/test_launcher_checkpoints_091.py holds a 0.9.1 save to the estimate).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from recipes.launch.run_inputs.catalog import ModelFacts

#: Bytes a verl FSDP checkpoint takes per model parameter: fp32 weights (4) + AdamW exp_avg and exp_avg_sq (4 + 4).
CKPT_BYTES_PER_PARAM = 12


@dataclass(frozen=True)
class Steps:
    """How long the run is: steps per epoch from the training rows, the epochs, the cap, and what the trainer runs."""

    rows: int | None  # training rows, None when the dataset size is not readable here
    per_epoch: int | None
    how: str  # how per_epoch came about, or why it is unknown
    epochs: int
    cap: int | None  # trainer.total_training_steps
    planned: int | None  # what the trainer will run; None when the dataset size is unknown and no cap is set


def steps(rows: int | None, *, limit: object, batch: int, dp: int | None, epochs: int, cap: object) -> Steps:
    """The run's steps. ``limit``: ``data.train_max_samples``; ``dp``: SFT's data-parallel size (None for RL)."""
    per_epoch, how = _per_epoch(rows, limit, batch, dp)
    by_epochs = None if per_epoch is None else per_epoch * epochs
    fixed = None if cap is None else int(cap)  # type: ignore[call-overload]
    if fixed is not None:  # 0 is a cap too (bad_counts refuses it first), not "unset"
        planned = fixed if by_epochs is None else min(fixed, by_epochs)
    else:
        planned = by_epochs
    return Steps(rows, per_epoch, how, epochs, fixed, planned)


def _per_epoch(rows: int | None, limit: object, batch: int, dp: int | None) -> tuple[int | None, str]:
    if rows is None:
        return None, "dataset size not readable here"
    most = int(limit or -1)  # type: ignore[call-overload]
    if 0 < most < rows:
        rows = most
    if dp is not None:
        return (rows // dp) // max(1, batch // dp), f"{rows:,} rows / batch {batch}"
    return rows // batch, f"{rows:,} rows / batch {batch}, before overlong prompts are dropped"


@dataclass(frozen=True)
class CheckpointBudget:
    per_checkpoint: int  # bytes
    count: int | None  # checkpoints on disk at the end; None: unknown (steps unknown)
    keep: int | None  # trainer's keep limit; None: all
    source: str  # where the parameter count came from

    @property
    def total(self) -> int | None:
        return None if self.count is None else self.per_checkpoint * self.count


def checkpoint_budget(
    phase: str, steps: int | None, save_freq: int, keep: object, model: ModelFacts, source: str
) -> CheckpointBudget:
    """Size of one checkpoint and how many the run leaves on disk; ``keep``: the trainer's keep limit (None: all).

    Both trainers save every ``save_freq`` steps and at the last step; the SFT trainer saves the last step even
    with ``save_freq <= 0`` (verl/trainer/fsdp_sft_trainer.py:802), the PPO trainer only with ``save_freq > 0``
    (verl/trainer/ppo/ray_trainer.py, the ``save_freq > 0 and (is_last_step or ...)`` test). Older ones beyond the
    keep limit are deleted. The size comes from the model's shape, never the bytes on disk: issue 33 finding 1, a 7B
    folder with 1 of its 4 shards downloaded planned "~6.0 KB" per checkpoint; whether the folder is complete is the
    path check's question (recipes/launch/run_inputs/paths.py)."""
    kept = int(keep) if keep else None  # type: ignore[call-overload]
    count: int | None
    if steps is None:
        count = kept if save_freq > 0 or phase == "sft" else 0
    elif save_freq > 0:
        count = math.ceil(steps / save_freq)
    else:
        count = 1 if phase == "sft" and steps > 0 else 0
    if count is not None and kept is not None:
        count = min(count, kept)
    return CheckpointBudget(model.parameters * CKPT_BYTES_PER_PARAM, count, kept, source)


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
