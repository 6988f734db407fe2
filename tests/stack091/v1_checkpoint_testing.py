"""A verl 0.9.1 V1 PPO trainer for checkpoint tests: its own ``_save_checkpoint``/``_load_checkpoint``, real files.

Why a helper: the V1 trainer (``verl/trainer/ppo/v1/trainer_base.py``) saves and loads checkpoints through its worker
groups, which on a cluster are Ray actors around FSDP engines. The fault tests (patches 0006-0008 of the 0.9.1 series)
need what a crash, a lost file or a full disk does to those checkpoints, so the trainer here is the real registered
``sync`` trainer class, built with ``object.__new__`` (no Ray, no workers), and its actor worker group hands the calls
to verl 0.9.1's own ``FSDPCheckpointManager`` as ``engine_workers.ActorRolloutRefWorker.save_checkpoint`` ->
``FSDPEngine.save_checkpoint`` do (``verl/workers/engine_workers.py:723-725``,
``verl/workers/engine/fsdp/transformer_impl.py:874-897``): a one-layer model in a gloo world of one, so every
checkpoint is real files that load, or fail to, as on a cluster. The 0.6.1 equivalent is
``kit_testing.checkpoint_trainer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kit_testing import StepDataLoader, ppo_config, tiny_checkpoint_manager

#: What 0.9.1's FSDPCheckpointManager writes per rank in a world of one (fsdp_checkpoint_manager.py:316-318).
ACTOR_FILES = ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt")
TRACKER = "latest_checkpointed_iteration.txt"


class EngineWorkerGroup:
    """The checkpoint calls the V1 trainer makes on ``actor_rollout_wg``, done by a real ``FSDPCheckpointManager``.

    Same signatures as ``ActorRolloutRefWorker.save_checkpoint``/``load_checkpoint`` (engine_workers.py:718-725), and
    the same keyword call into the manager as ``FSDPEngine.save_checkpoint``. ``loaded`` records each load's path.
    Set ``manager.optimizer.fail = True`` and the next save dies midway (after the model file), as a crash does.
    """

    def __init__(self) -> None:
        self.manager = tiny_checkpoint_manager()
        self.loaded: list[str | None] = []
        self.saved_keep: list[int | None] = []

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        self.saved_keep.append(max_ckpt_to_keep)
        self.manager.save_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
        )

    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        self.loaded.append(local_path)
        self.manager.load_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
        )


def v1_config(root: Path, overrides: Sequence[str] = ()) -> object:
    """verl 0.9.1's own ``ppo_trainer`` config (from the imported verl) with checkpoints in ``root``."""
    return ppo_config([f"trainer.default_local_dir={root}", *overrides])


def v1_checkpoint_trainer(root: Path, overrides: Sequence[str] = ()) -> object:
    """A V1 ``sync`` trainer with what ``_save_checkpoint``/``_load_checkpoint`` read and nothing else.

    Each call is a fresh trainer, as after a restart. Call it in a process group (``kit_testing.gloo_world_of_one``).
    """
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = object.__new__(get_trainer_cls("sync"))
    trainer.config = v1_config(root, overrides)
    trainer.checkpoint_callback = build_checkpoint_callback(trainer.config)
    trainer.trainer_mode = "sync"
    trainer.actor_rollout_wg = EngineWorkerGroup()
    trainer.use_critic = False
    trainer.global_steps = 0
    trainer.train_dataloader = StepDataLoader(trainer)
    return trainer


def save_steps(root: Path, steps: Sequence[int], overrides: Sequence[str] = ()) -> object:
    """One trainer saves ``steps`` in order under ``root``; returns it."""
    trainer = v1_checkpoint_trainer(root, overrides)
    for step in steps:
        trainer.global_steps = step
        trainer._save_checkpoint()
    return trainer


def resume(root: Path, overrides: Sequence[str] = ()) -> object:
    """A fresh trainer (a restart) that has run ``_load_checkpoint``."""
    trainer = v1_checkpoint_trainer(root, overrides)
    trainer._load_checkpoint()
    return trainer


def assert_resumed_at(trainer: object, root: Path, step: int) -> None:
    """``trainer`` resumed from ``global_step_<step>``: its step, the actor folder loaded, the dataloader state."""
    assert trainer.global_steps == step, f"resumed at step {trainer.global_steps}, not at global_step_{step}"
    assert trainer.actor_rollout_wg.loaded == [str(root / f"global_step_{step}" / "actor")]
    assert trainer.train_dataloader.loaded == {"step": step}


def complete_actors(root: Path) -> list[str]:
    """The global_step_N folders in ``root`` whose actor checkpoint has every file a load needs, by name."""
    return sorted(
        p.name for p in root.glob("global_step_*") if all((p / "actor" / name).is_file() for name in ACTOR_FILES)
    )
