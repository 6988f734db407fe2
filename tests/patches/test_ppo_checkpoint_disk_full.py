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

import os
import shutil
from pathlib import Path

from kit_testing import checkpoint_trainer, gloo_world_of_one
from tmpfs_testing import allocated as _allocated
from tmpfs_testing import fill as _fill
from tmpfs_testing import on_tmpfs, require_tmpfs


def _on_tmpfs(func: str) -> None:
    on_tmpfs(__file__, func)


def _failed_save(trainer: object, step: int) -> Exception:
    trainer.global_steps = step
    try:
        trainer._save_checkpoint()
    except Exception as error:  # noqa: BLE001 (which error, and what it says, is what the checks judge)
        return error
    raise AssertionError(f"global_step_{step} was saved on a full disk")


def _assert_clear(error: Exception, folder: Path, free: str, needed: int) -> None:
    """The error names the checkpoint's path, the free space and the space it needs (the previous one's size)."""
    text = str(error)
    assert str(folder) in text and free in text and f"({needed} bytes)" in text, (
        f"the save of {folder} on a full disk failed with {type(error).__name__}: {text[:600]!r}; "
        f"the error does not name the path, the free space ({free}) and the space needed ({needed} bytes)"
    )
    assert isinstance(error, OSError), f"{type(error).__name__} is not an OSError: `except OSError` cannot catch it"


def _assert_resumes_from_step_1(root: Path, saved: object) -> None:
    """No partial global_step_2 left; the tracker still names 1 and a fresh trainer loads global_step_1's weights."""
    assert not (root / "global_step_2").exists(), (
        f"the failed save left its partial checkpoint on the full disk: {sorted(os.listdir(root / 'global_step_2'))}"
    )
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "1"
    resumed = checkpoint_trainer(root)
    resumed._load_checkpoint()
    assert resumed.global_steps == 1, f"resumed at step {resumed.global_steps}, not at global_step_1"
    assert resumed.actor_rollout_wg.loaded == [str(root / "global_step_1" / "actor")]
    saved_weight = saved.actor_rollout_wg.manager.model.weight
    assert bool((resumed.actor_rollout_wg.manager.model.weight == saved_weight).all()), "global_step_1's weights"


def _saved_step_1(root: Path) -> tuple[object, int]:
    """A trainer that has saved global_step_1 under ``root``, and the bytes that checkpoint takes on the disk."""
    trainer = checkpoint_trainer(root)
    trainer.global_steps = 1
    trainer._save_checkpoint()
    return trainer, _allocated(root / "global_step_1")


def _refuse_a_checkpoint_that_cannot_fit(mountpoint: str) -> None:
    """global_step_1 saved; the disk then has half its size free: the save of global_step_2 is refused up front."""
    mount, root = Path(mountpoint), Path(mountpoint) / "ckpt"
    with gloo_world_of_one():
        trainer, needed = _saved_step_1(root)
        _fill(mount, leave=needed // 2)
        free = shutil.disk_usage(root).free
        error = _failed_save(trainer, 2)
        _assert_clear(error, root / "global_step_2", f"({free} bytes) free", needed)
        _assert_resumes_from_step_1(root, trainer)


def _clean_up_a_save_the_disk_filled_during(mountpoint: str) -> None:
    """The disk fills while global_step_2 is written (inside the actor's torch.save): clear error, partial removed."""
    mount, root = Path(mountpoint), Path(mountpoint) / "ckpt"
    with gloo_world_of_one():
        trainer, needed = _saved_step_1(root)
        actor = trainer.actor_rollout_wg
        real_save = actor.save_checkpoint

        def save_while_the_disk_fills(*args: object, **kwargs: object) -> None:
            _fill(mount, leave=4096)  # after the trainer looked at the free space, before the shards are written
            real_save(*args, **kwargs)

        actor.save_checkpoint = save_while_the_disk_fills
        error = _failed_save(trainer, 2)
        _assert_resumes_from_step_1(root, trainer)
        _assert_clear(error, root / "global_step_2", "bytes) free", needed)


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
