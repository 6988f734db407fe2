"""Patch 0019: the PPO trainer rotates its checkpoints once the tracker names the new one, starting from the disk.

Unpatched 0.6.1 hands ``trainer.max_actor_ckpt_to_keep`` to the actor's checkpoint manager, which removes the old
checkpoints before it writes the new one: with 1 to keep, a crash during the save leaves nothing to resume from. With
the manager fixed alone (patch 0018) the old actor folder still goes as soon as the actor's own save is done, before
data.pt and the tracker complete the checkpoint. The checks run ``RayPPOTrainer._save_checkpoint`` with the actor's
files written by verl's real ``FSDPCheckpointManager``, crash it, and resume a fresh trainer with
``_load_checkpoint``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kit_testing import checkpoint_trainer, gloo_world_of_one

ACTOR_FILES = ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt")


def _actors(root: Path) -> list[str]:
    """The global_step_N folders in ``root`` whose actor checkpoint is complete."""
    return sorted(p.name for p in root.glob("global_step_*") if all((p / "actor" / f).is_file() for f in ACTOR_FILES))


def _crash(trainer: object, step: int) -> None:
    trainer.global_steps = step
    try:
        trainer._save_checkpoint()
    except RuntimeError as crash:
        assert "simulated crash" in str(crash), crash
    else:
        raise AssertionError("the save did not crash")


def check_crashed_save_keeps_the_previous_checkpoint() -> None:
    """max_actor_ckpt_to_keep=1: a save that dies (in the actor's save, or after it) leaves global_step_1 to resume."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trainer = checkpoint_trainer(root, ["trainer.max_actor_ckpt_to_keep=1"])
        trainer.global_steps = 1
        trainer._save_checkpoint()
        trainer.train_dataloader.fail = True  # the actor's save completes, data.pt is never written
        _crash(trainer, 2)
        assert _actors(root) == ["global_step_1", "global_step_2"], (
            f"the crashed save of global_step_2 left the actor checkpoints {_actors(root)}: global_step_1's is gone"
        )
        trainer.train_dataloader.fail = False
        trainer.actor_rollout_wg.manager.optimizer.fail = True  # now the actor's own save dies midway
        _crash(trainer, 3)
        resumed = checkpoint_trainer(root)
        resumed._load_checkpoint()
        assert resumed.global_steps == 1, f"resumed at step {resumed.global_steps}"
        assert resumed.actor_rollout_wg.loaded == [str(root / "global_step_1" / "actor")]


def check_rotation_holds_across_a_restart() -> None:
    """A run saved global_step_1..3 keeping all; restarted with max_actor_ckpt_to_keep=2, its next save keeps 3, 4."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first_run = checkpoint_trainer(root)
        for step in (1, 2, 3):
            first_run.global_steps = step
            first_run._save_checkpoint()
        restarted = checkpoint_trainer(root, ["trainer.max_actor_ckpt_to_keep=2"])
        restarted._load_checkpoint()
        restarted.global_steps = 4
        restarted._save_checkpoint()
        assert _actors(root) == ["global_step_3", "global_step_4"], (
            f"max_actor_ckpt_to_keep=2 after a restart left the actor checkpoints {_actors(root)}"
        )
        assert not (root / "global_step_1" / "actor").exists()


def test_patched_crashed_save() -> None:
    check_crashed_save_keeps_the_previous_checkpoint()


def test_patched_rotation_across_restart() -> None:
    check_rotation_holds_across_a_restart()


def test_unpatched_crashed_save_leaves_no_checkpoint(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_crashed_save_keeps_the_previous_checkpoint", match="global_step_1's is gone"
    )


def test_unpatched_rotation_forgets_checkpoints_after_restart(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_rotation_holds_across_a_restart",
        match="after a restart left the actor checkpoints ['global_step_1', 'global_step_2', 'global_step_3', 'global",
    )
