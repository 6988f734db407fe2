"""Patch 0017: the PPO trainer writes its checkpoint tracker atomically and resumes from the newest complete checkpoint.

Unpatched 0.6.1 follows ``latest_checkpointed_iteration.txt`` blindly: a tracker naming a missing ``global_step_N``
gives "Training from scratch" (step 0, every checkpoint of the run ignored), an incomplete one is loaded and dies in
the worker, and the tracker is rewritten in place, so a kill during that write leaves an empty file that the next
start reads with ``int(b"")``. The checks save real checkpoints through ``RayPPOTrainer._save_checkpoint`` (the
actor's files by verl's own ``FSDPCheckpointManager``), damage them as a crash or a lost file would, and resume a
fresh trainer with ``RayPPOTrainer._load_checkpoint``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from kit_testing import checkpoint_trainer, gloo_world_of_one

MODEL = "model_world_size_1_rank_0.pt"
OPTIM = "optim_world_size_1_rank_0.pt"


def _save_steps(root: Path, steps: range) -> None:
    trainer = checkpoint_trainer(root)
    for step in steps:
        trainer.global_steps = step
        trainer._save_checkpoint()


def _resume(root: Path, overrides: tuple[str, ...] = ()) -> object:
    trainer = checkpoint_trainer(root, overrides)
    trainer._load_checkpoint()
    return trainer


def _assert_resumed_at(trainer: object, root: Path, step: int) -> None:
    assert trainer.global_steps == step, f"resumed at step {trainer.global_steps}, not at global_step_{step}"
    assert trainer.actor_rollout_wg.loaded == [str(root / f"global_step_{step}" / "actor")]
    assert trainer.train_dataloader.loaded == {"step": step}


def check_missing_newest_checkpoint() -> None:
    """The tracker names global_step_3, which is gone: resume from global_step_2, not from step 0."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _save_steps(root, range(1, 4))
        shutil.rmtree(root / "global_step_3")
        _assert_resumed_at(_resume(root), root, 2)


def check_incomplete_newest_checkpoint() -> None:
    """global_step_3 lost its optimizer shard: skip it (a line names it), resume from global_step_2."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _save_steps(root, range(1, 4))
        (root / "global_step_3" / "actor" / OPTIM).unlink()
        _assert_resumed_at(_resume(root), root, 2)


def check_tracker_survives_a_kill_during_its_write() -> None:
    """A save killed while it writes the tracker leaves the old tracker, and the next start resumes from it."""

    class Killed(BaseException):
        """Stands for SIGKILL: nothing after it in the save runs."""

    def kill_at_tracker_write(frame: object, event: str, arg: object) -> None:
        if event != "c_call" or getattr(arg, "__name__", "") != "write":
            return
        fileno = getattr(getattr(arg, "__self__", None), "fileno", None)
        try:
            path = os.readlink(f"/proc/self/fd/{fileno()}")
        except (TypeError, OSError, ValueError):
            return
        if "latest_checkpointed_iteration" in os.path.basename(path):
            raise Killed(path)

    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trainer = checkpoint_trainer(root)
        for step in (1, 2):
            trainer.global_steps = step
            trainer._save_checkpoint()
        trainer.global_steps = 3
        sys.setprofile(kill_at_tracker_write)
        try:
            trainer._save_checkpoint()
        except Killed:
            pass
        finally:
            sys.setprofile(None)
        tracker = (root / "latest_checkpointed_iteration.txt").read_text()
        assert tracker == "2", f"a kill during the tracker's write left it as {tracker!r}"
        # global_step_3 was written, but its save never got as far as the tracker: not resumed from
        _assert_resumed_at(_resume(root), root, 2)


def check_damaged_tracker_falls_back_to_the_folders() -> None:
    """An empty tracker (what a kill left before this patch) does not stop the resume: the newest folder is used."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _save_steps(root, range(1, 4))
        (root / "latest_checkpointed_iteration.txt").write_text("")
        _assert_resumed_at(_resume(root), root, 3)


def check_no_usable_checkpoint_is_an_error() -> None:
    """Checkpoint folders exist but none is complete: raise and name the folder; resume_mode=disable still starts."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _save_steps(root, range(1, 3))
        shutil.rmtree(root / "global_step_2")
        shutil.rmtree(root / "global_step_1" / "actor")  # what rotation leaves: data.pt only
        with pytest.raises(RuntimeError, match="no complete checkpoint") as raised:
            _resume(root)
        assert str(root) in str(raised.value), raised.value
        trainer = _resume(root, ("trainer.resume_mode=disable",))
        assert trainer.global_steps == 0 and trainer.actor_rollout_wg.loaded == [None]


def test_patched_missing_newest_checkpoint() -> None:
    check_missing_newest_checkpoint()


def test_patched_incomplete_newest_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    check_incomplete_newest_checkpoint()
    assert f"global_step_3: missing actor/{OPTIM}" in capsys.readouterr().out


def test_patched_tracker_survives_a_kill() -> None:
    check_tracker_survives_a_kill_during_its_write()


def test_patched_damaged_tracker() -> None:
    check_damaged_tracker_falls_back_to_the_folders()


def test_patched_no_usable_checkpoint() -> None:
    check_no_usable_checkpoint_is_an_error()


def test_unpatched_trains_from_scratch_without_the_newest(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_missing_newest_checkpoint", match="Training from scratch")


def test_unpatched_loads_an_incomplete_checkpoint(unpatched_verl) -> None:
    out = unpatched_verl.expect_failure(__file__, "check_incomplete_newest_checkpoint", match=OPTIM)
    assert "FileNotFoundError" in out, out[-4000:]


def test_unpatched_empties_the_tracker_on_a_kill(unpatched_verl) -> None:
    check = "check_tracker_survives_a_kill_during_its_write"
    unpatched_verl.expect_failure(__file__, check, match="a kill during the tracker's write left it as ''")


def test_unpatched_dies_on_an_empty_tracker(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_damaged_tracker_falls_back_to_the_folders", match="invalid literal for int() with base 10: ''"
    )


def test_unpatched_trains_from_scratch_with_no_usable_checkpoint(unpatched_verl) -> None:
    out = unpatched_verl.expect_failure(__file__, "check_no_usable_checkpoint_is_an_error", match="DID NOT RAISE")
    assert "Training from scratch" in out, out[-4000:]
