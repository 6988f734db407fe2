"""Patch 0.9.1/0007: rotation starts from the disk, and the V1 trainer rotates once the tracker names the save.

Unpatched 0.9.1: ``BaseCheckpointManager.previous_saved_paths`` starts empty in every process
(``verl/utils/checkpoint/checkpoint_manager.py:59``), so after a restart the earlier run's checkpoints are never
removed and ``max_ckpt_to_keep`` stops holding (verl issue #7395). And the V1 trainer hands
``trainer.max_actor_ckpt_to_keep`` to the workers, whose manager removes the old ``global_step_K/actor`` as soon as
the actor's save returns, before data.pt and the tracker (``trainer_base.py:972-1024``): with 1 to keep, a crash in
between leaves a tracker naming a step whose actor is gone. The checks drive 0.9.1's real ``FSDPCheckpointManager``
(directly, and under the V1 trainer's ``_save_checkpoint``), crash or restart, and resume a fresh trainer with
``_load_checkpoint`` (fault scenarios b and d).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from kit_testing import gloo_world_of_one, needs_verl_09, tiny_checkpoint_manager

# kit: UnpatchedVerl.run (tests/kit_testing.py) runs this file with runpy, which does not put its folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from v1_checkpoint_testing import ACTOR_FILES, complete_actors, resume, save_steps, v1_checkpoint_trainer  # noqa: E402

pytestmark = [needs_verl_09(), pytest.mark.faults]


def _crash(trainer: object, step: int) -> None:
    trainer.global_steps = step
    try:
        trainer._save_checkpoint()
    except RuntimeError as crash:
        assert "simulated crash" in str(crash), crash
    else:
        raise AssertionError("the save did not crash")


def check_crashed_save_keeps_the_previous_checkpoint() -> None:
    """max_actor_ckpt_to_keep=1: a save that dies (after the actor's save, or in it) leaves global_step_1 to resume."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trainer = save_steps(root, (1,), ["trainer.max_actor_ckpt_to_keep=1"])
        trainer.train_dataloader.fail = True  # the actor's save completes, data.pt and the tracker are never written
        _crash(trainer, 2)
        assert complete_actors(root) == ["global_step_1", "global_step_2"], (
            f"the crashed save of global_step_2 left the actor checkpoints {complete_actors(root)}: "
            "global_step_1's is gone"
        )
        trainer.train_dataloader.fail = False
        trainer.actor_rollout_wg.manager.optimizer.fail = True  # now the actor's own save dies midway
        _crash(trainer, 3)
        resumed = resume(root)
        assert resumed.global_steps == 1, f"resumed at step {resumed.global_steps}"
        assert resumed.actor_rollout_wg.loaded == [str(root / "global_step_1" / "actor")]


def check_trainer_rotation_holds_across_a_restart() -> None:
    """A run saved global_step_1..3 keeping all; restarted with max_actor_ckpt_to_keep=2, its next save keeps 3, 4."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1, 2, 3))
        restarted = resume(root, ["trainer.max_actor_ckpt_to_keep=2"])
        restarted.global_steps = 4
        restarted._save_checkpoint()
        assert complete_actors(root) == ["global_step_3", "global_step_4"], (
            f"max_actor_ckpt_to_keep=2 after a restart left the actor checkpoints {complete_actors(root)}"
        )
        assert (root / "global_step_1" / "data.pt").is_file(), "rotation removes the role folders only"


def check_manager_rotation_holds_across_a_restart() -> None:
    """The manager alone (the SFT trainer's layout global_step_N, the PPO one's global_step_N/actor): a fresh manager
    saving global_step_4 with max_ckpt_to_keep=2 leaves 3 and 4."""
    for sub in ("", "actor"):
        with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            first_run = tiny_checkpoint_manager()
            for step in (1, 2, 3):
                first_run.save_checkpoint(str(root / f"global_step_{step}" / sub), global_step=step)
            restarted = tiny_checkpoint_manager()
            restarted.save_checkpoint(str(root / "global_step_4" / sub), global_step=4, max_ckpt_to_keep=2)
            saved = sorted(
                p.name for p in root.glob("global_step_*") if all((p / sub / f).is_file() for f in ACTOR_FILES)
            )
            assert saved == ["global_step_3", "global_step_4"], (
                f"max_ckpt_to_keep=2 after a restart left {saved} (layout global_step_N/{sub})"
            )


def test_patched_crashed_save_keeps_the_previous_checkpoint() -> None:
    check_crashed_save_keeps_the_previous_checkpoint()


def test_patched_trainer_rotation_across_restart() -> None:
    check_trainer_rotation_holds_across_a_restart()


def test_patched_manager_rotation_across_restart() -> None:
    check_manager_rotation_holds_across_a_restart()


def test_patched_workers_keep_everything(tmp_path: Path) -> None:
    """The trainer no longer hands the keep count to the workers: only it rotates, after the tracker."""
    with gloo_world_of_one():
        trainer = v1_checkpoint_trainer(tmp_path, ["trainer.max_actor_ckpt_to_keep=1"])
        for step in (1, 2):
            trainer.global_steps = step
            trainer._save_checkpoint()
    assert trainer.actor_rollout_wg.saved_keep == [None, None]
    assert complete_actors(tmp_path) == ["global_step_2"]


def test_unpatched_crashed_save_leaves_the_tracker_without_its_actor(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_crashed_save_keeps_the_previous_checkpoint", match="global_step_1's is gone"
    )


def test_unpatched_trainer_rotation_forgets_checkpoints_after_restart(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_trainer_rotation_holds_across_a_restart",
        match="after a restart left the actor checkpoints ['global_step_1', 'global_step_2', 'global_step_3', 'global",
    )


def test_unpatched_manager_rotation_forgets_checkpoints_after_restart(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_manager_rotation_holds_across_a_restart",
        match="after a restart left ['global_step_1', 'global_step_2', 'global_step_3', 'global_step_4']",
    )
