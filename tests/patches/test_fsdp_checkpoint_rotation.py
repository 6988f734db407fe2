"""Patch 0018: FSDPCheckpointManager rotates old checkpoints after the new one is saved, starting from the disk.

Unpatched 0.6.1 removes old checkpoints down to ``max_ckpt_to_keep - 1`` before it writes the new one, so with
``max_ckpt_to_keep=1`` a crash during the save leaves no checkpoint at all; and its list of saved paths starts empty in
every process, so after a restart the earlier run's checkpoints are never removed. The checks drive verl's real
``FSDPCheckpointManager.save_checkpoint`` (a one-layer model, a world of one) in the SFT trainers' layout,
``<dir>/global_step_N``, and in the PPO trainer's, ``<dir>/global_step_N/actor``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kit_testing import gloo_world_of_one, tiny_checkpoint_manager

FILES = ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt")


def _complete(path: Path) -> bool:
    return all((path / name).is_file() for name in FILES)


def _saved(root: Path, sub: str) -> list[str]:
    """The complete checkpoints in ``root`` (``global_step_N/sub``), by folder name."""
    return sorted(p.name for p in root.glob("global_step_*") if _complete(p / sub))


def check_crash_during_save_keeps_the_previous_checkpoint() -> None:
    """max_ckpt_to_keep=1, the save of global_step_2 dies midway: global_step_1 must still be there, complete."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manager = tiny_checkpoint_manager()
        manager.save_checkpoint(str(root / "global_step_1"), global_step=1, max_ckpt_to_keep=1)
        manager.optimizer.fail = True
        try:
            manager.save_checkpoint(str(root / "global_step_2"), global_step=2, max_ckpt_to_keep=1)
        except RuntimeError as crash:
            assert "simulated crash" in str(crash), crash
        else:
            raise AssertionError("the save did not crash")
        assert _complete(root / "global_step_1"), (
            f"global_step_1 was removed before global_step_2 was saved: no checkpoint left ({_saved(root, '')})"
        )
        manager.optimizer.fail = False  # the next save works and rotates as before: only the newest is kept
        manager.save_checkpoint(str(root / "global_step_3"), global_step=3, max_ckpt_to_keep=1)
        assert sorted(p.name for p in root.iterdir()) == ["global_step_3"], list(root.iterdir())


def check_rotation_holds_across_a_restart() -> None:
    """A run saved global_step_1..3 (keeping all); after a restart, a save with max_ckpt_to_keep=2 keeps 3 and 4."""
    for sub in ("", "actor"):
        with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            first_run = tiny_checkpoint_manager()
            for step in (1, 2, 3):
                first_run.save_checkpoint(str(root / f"global_step_{step}" / sub), global_step=step)
            restarted = tiny_checkpoint_manager()
            restarted.save_checkpoint(str(root / "global_step_4" / sub), global_step=4, max_ckpt_to_keep=2)
            saved = _saved(root, sub)
            assert saved == ["global_step_3", "global_step_4"], (
                f"max_ckpt_to_keep=2 after a restart left {saved} (layout global_step_N/{sub})"
            )


def test_patched_crash_during_save() -> None:
    check_crash_during_save_keeps_the_previous_checkpoint()


def test_patched_rotation_across_restart() -> None:
    check_rotation_holds_across_a_restart()


def test_unpatched_crash_during_save_leaves_no_checkpoint(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_crash_during_save_keeps_the_previous_checkpoint", match="no checkpoint left"
    )


def test_unpatched_rotation_forgets_checkpoints_after_restart(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_rotation_holds_across_a_restart",
        match="after a restart left ['global_step_1', 'global_step_2', 'global_step_3', 'global_step_4']",
    )
