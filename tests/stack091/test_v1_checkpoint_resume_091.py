"""Patch 0.9.1/0006: the V1 trainer writes its tracker atomically and resumes from the newest complete checkpoint.

Unpatched 0.9.1 (``verl/trainer/ppo/v1/trainer_base.py``) rewrites ``latest_checkpointed_iteration.txt`` in place
(``open(..., "w")``, :1024), so a kill during the write leaves it empty and every later start dies on ``int('')``
(``checkpoint_manager.py:245``); a tracker naming a folder that is gone gives "Training from scratch" (:863); an
incomplete newest folder is loaded and dies with FileNotFoundError; an unknown ``trainer.resume_mode`` is logged and
then crashes on an unbound name (:873-876). The checks save real checkpoints through the trainer's own
``_save_checkpoint`` (the actor's files by 0.9.1's ``FSDPCheckpointManager``), damage them as a crash or a lost file
would, and resume a fresh trainer with ``_load_checkpoint`` (fault scenarios b and c).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from kit_testing import gloo_world_of_one, needs_verl_09

# kit: UnpatchedVerl.run (tests/kit_testing.py) runs this file with runpy, which does not put its folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from v1_checkpoint_testing import TRACKER, assert_resumed_at, resume, save_steps, v1_config  # noqa: E402

pytestmark = [needs_verl_09(), pytest.mark.faults]

OPTIM = "optim_world_size_1_rank_0.pt"


def check_missing_newest_checkpoint() -> None:
    """The tracker names global_step_3, which is gone: resume from global_step_2, not from step 0."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1, 2, 3))
        shutil.rmtree(root / "global_step_3")
        assert_resumed_at(resume(root), root, 2)


def check_incomplete_newest_checkpoint() -> None:
    """global_step_3 lost its optimizer shard: skip it (a line names it), resume from global_step_2."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1, 2, 3))
        (root / "global_step_3" / "actor" / OPTIM).unlink()
        assert_resumed_at(resume(root), root, 2)


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it in the save runs."""


def _kill_at_tracker_write(frame: object, event: str, arg: object) -> None:
    """A profile hook that raises Killed at the C-level ``write`` of a file named like the tracker."""
    if event != "c_call" or getattr(arg, "__name__", "") != "write":
        return
    fileno = getattr(getattr(arg, "__self__", None), "fileno", None)
    try:
        path = os.readlink(f"/proc/self/fd/{fileno()}")
    except (TypeError, OSError, ValueError):
        return
    if "latest_checkpointed_iteration" in os.path.basename(path):
        raise Killed(path)


def check_tracker_survives_a_kill_during_its_write() -> None:
    """A save killed while it writes the tracker leaves the old tracker, and the next start resumes from it."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trainer = save_steps(root, (1, 2))
        trainer.global_steps = 3
        sys.setprofile(_kill_at_tracker_write)
        try:
            trainer._save_checkpoint()
        except Killed:
            pass
        finally:
            sys.setprofile(None)
        tracker = (root / TRACKER).read_text()
        assert tracker == "2", f"a kill during the tracker's write left it as {tracker!r}"
        # global_step_3 was written, but its save never got as far as the tracker: not resumed from
        assert_resumed_at(resume(root), root, 2)


def check_damaged_tracker_falls_back_to_the_folders() -> None:
    """An empty tracker (what a kill left before this patch) does not stop the resume: the newest folder is used."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1, 2, 3))
        (root / TRACKER).write_text("")
        assert_resumed_at(resume(root), root, 3)


def check_no_usable_checkpoint_is_an_error() -> None:
    """Checkpoint folders exist but none is complete: raise and name the folder; resume_mode=disable still starts."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1, 2))
        shutil.rmtree(root / "global_step_2")
        shutil.rmtree(root / "global_step_1" / "actor")  # what rotation leaves: data.pt only
        with pytest.raises(RuntimeError, match="no complete checkpoint") as raised:
            resume(root)
        assert str(root) in str(raised.value), raised.value
        trainer = resume(root, ("trainer.resume_mode=disable",))
        assert trainer.global_steps == 0 and trainer.actor_rollout_wg.loaded == []


def check_unknown_resume_mode_is_refused() -> None:
    """trainer.resume_mode=bogus: a clear ValueError naming the valid modes, not a crash on an unbound name."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_steps(root, (1,))
        with pytest.raises(ValueError, match="Unknown trainer.resume_mode='bogus': use one of auto, disable"):
            resume(root, ("trainer.resume_mode=bogus",))


def test_patched_missing_newest_checkpoint() -> None:
    check_missing_newest_checkpoint()


def test_patched_incomplete_newest_checkpoint(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_incomplete_newest_checkpoint()
    assert f"global_step_3: missing actor/{OPTIM}" in caplog.text


def test_patched_tracker_survives_a_kill() -> None:
    check_tracker_survives_a_kill_during_its_write()


def test_patched_damaged_tracker() -> None:
    check_damaged_tracker_falls_back_to_the_folders()


def test_patched_no_usable_checkpoint() -> None:
    check_no_usable_checkpoint_is_an_error()


def test_patched_unknown_resume_mode() -> None:
    check_unknown_resume_mode_is_refused()


def test_patched_unknown_resume_mode_refused_at_construction(tmp_path: Path) -> None:
    """The trainer's constructor refuses it, before ``init()`` creates resource pools and worker groups."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    with pytest.raises(ValueError, match="Unknown trainer.resume_mode='bogus'"):
        get_trainer_cls("sync")(v1_config(tmp_path, ("trainer.resume_mode=bogus",)))


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


def test_unpatched_unknown_resume_mode_crashes_on_an_unbound_name(unpatched_verl) -> None:
    out = unpatched_verl.expect_failure(__file__, "check_unknown_resume_mode_is_refused", match="UnboundLocalError")
    assert "Unknown resume mode bogus" in out, out[-4000:]
