"""Patch 0021: a checkpoint that does not fit on its disk fails with a clear error, and the previous one still loads.

Unpatched 0.6.1 (and the series up to 0019) dies deep inside ``torch.save`` on a full disk: "PytorchStreamWriter
failed writing file data/0: file write failed" (torch drops the errno), naming neither the checkpoint nor the space,
and leaves the partial ``global_step_N`` folder behind, still filling the disk. The fault is real: each check runs in
a child that mounts a fresh 1 MiB tmpfs (``unshare -rm``: a user and mount namespace, no root needed) and saves real
checkpoints there through ``RayPPOTrainer._save_checkpoint`` (the actor's files by verl's ``FSDPCheckpointManager``);
a ballast file takes the free space, as another writer on a shared disk does. Success is judged by loading: a fresh
trainer resumes (``_load_checkpoint``, resume_mode=auto) from global_step_1 and gets its weights back.
"""

from __future__ import annotations

from pathlib import Path

from disk_full_testing import StackTrainer, clean_up_a_save_the_disk_filled_during, refuse_a_checkpoint_that_cannot_fit
from kit_testing import checkpoint_trainer
from tmpfs_testing import on_tmpfs, require_tmpfs


def _save_step_1(root: Path) -> object:
    trainer = checkpoint_trainer(root)
    trainer.global_steps = 1
    trainer._save_checkpoint()
    return trainer


def _resume(root: Path) -> object:
    trainer = checkpoint_trainer(root)
    trainer._load_checkpoint()
    return trainer


#: 0.6.1's RayPPOTrainer with real FSDPCheckpointManager files (kit_testing.checkpoint_trainer)
STACK = StackTrainer(save_step_1=_save_step_1, resume=_resume)


def _on_tmpfs(func: str) -> None:
    on_tmpfs(__file__, func)


def _refuse_a_checkpoint_that_cannot_fit(mountpoint: str) -> None:
    refuse_a_checkpoint_that_cannot_fit(mountpoint, STACK)


def _clean_up_a_save_the_disk_filled_during(mountpoint: str) -> None:
    clean_up_a_save_the_disk_filled_during(mountpoint, STACK)


def check_checkpoint_that_cannot_fit_is_refused() -> None:
    _on_tmpfs("_refuse_a_checkpoint_that_cannot_fit")


def check_disk_filling_during_the_save_is_cleaned_up() -> None:
    _on_tmpfs("_clean_up_a_save_the_disk_filled_during")


def test_patched_checkpoint_that_cannot_fit() -> None:
    require_tmpfs()
    check_checkpoint_that_cannot_fit_is_refused()


def test_patched_disk_fills_during_the_save() -> None:
    require_tmpfs()
    check_disk_filling_during_the_save_is_cleaned_up()


UNCLEAR = "the error does not name the path"


def test_unpatched_dies_in_torch_save_on_a_full_disk(unpatched_verl) -> None:
    require_tmpfs()
    out = unpatched_verl.expect_failure(__file__, "check_checkpoint_that_cannot_fit_is_refused", match=UNCLEAR)
    assert "[enforce fail at inline_container.cc" in out, out[-4000:]  # torch's stream writer, no path, no errno


def test_unpatched_leaves_a_partial_checkpoint_on_a_full_disk(unpatched_verl) -> None:
    require_tmpfs()
    check = "check_disk_filling_during_the_save_is_cleaned_up"
    unpatched_verl.expect_failure(__file__, check, match="the failed save left its partial checkpoint on the full disk")
