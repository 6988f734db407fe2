"""The disk-full fault (scenario g) on a real 1 MiB tmpfs, the same two checks on both stacks' trainers.

Each stack's test file (tests/patches/test_ppo_checkpoint_disk_full.py for 0.6.1's patch 0021,
tests/stack091/test_v1_checkpoint_disk_full_091.py for 0.9.1's 0008) hands in how its trainer saves global_step_1 and
how a fresh one resumes; what the checks inject and judge is one code: the save of global_step_2 on a full disk must
fail with an OSError naming the folder, the free and the needed bytes, leave no partial folder, and a fresh trainer
must load global_step_1's weights.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit_testing import gloo_world_of_one
from tmpfs_testing import allocated, fill

TRACKER = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class StackTrainer:
    """How one stack's checkpoint trainer saves global_step_1 under a root and how a fresh one resumes there."""

    save_step_1: Callable[[Path], object]
    resume: Callable[[Path], object]


def _failed_save(trainer: object, step: int) -> Exception:
    trainer.global_steps = step
    try:
        trainer._save_checkpoint()
    except Exception as error:  # noqa: BLE001 (which error, and what it says, is what the checks judge)
        print(f"the save of global_step_{step} failed with {type(error).__name__}: {error}")
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


def _assert_resumes_from_step_1(root: Path, saved: object, stack: StackTrainer) -> None:
    """No partial global_step_2 left; the tracker still names 1 and a fresh trainer loads global_step_1's weights."""
    assert not (root / "global_step_2").exists(), (
        f"the failed save left its partial checkpoint on the full disk: {sorted(os.listdir(root / 'global_step_2'))}"
    )
    assert (root / TRACKER).read_text() == "1"
    resumed = stack.resume(root)
    assert resumed.global_steps == 1, f"resumed at step {resumed.global_steps}, not at global_step_1"
    assert resumed.actor_rollout_wg.loaded == [str(root / "global_step_1" / "actor")]
    saved_weight = saved.actor_rollout_wg.manager.model.weight
    assert bool((resumed.actor_rollout_wg.manager.model.weight == saved_weight).all()), "global_step_1's weights"


def refuse_a_checkpoint_that_cannot_fit(mountpoint: str, stack: StackTrainer) -> None:
    """global_step_1 saved; the disk then has half its size free: the save of global_step_2 is refused up front."""
    mount, root = Path(mountpoint), Path(mountpoint) / "ckpt"
    with gloo_world_of_one():
        trainer = stack.save_step_1(root)
        needed = allocated(root / "global_step_1")
        fill(mount, leave=needed // 2)
        free = shutil.disk_usage(root).free
        error = _failed_save(trainer, 2)
        _assert_clear(error, root / "global_step_2", f"({free} bytes) free", needed)
        _assert_resumes_from_step_1(root, trainer, stack)


def clean_up_a_save_the_disk_filled_during(mountpoint: str, stack: StackTrainer) -> None:
    """The disk fills while global_step_2 is written (inside the actor's torch.save): clear error, partial removed."""
    mount, root = Path(mountpoint), Path(mountpoint) / "ckpt"
    with gloo_world_of_one():
        trainer = stack.save_step_1(root)
        needed = allocated(root / "global_step_1")
        actor = trainer.actor_rollout_wg
        real_save = actor.save_checkpoint

        def save_while_the_disk_fills(*args: object, **kwargs: object) -> None:
            fill(mount, leave=4096)  # after the trainer looked at the free space, before the shards are written
            real_save(*args, **kwargs)

        actor.save_checkpoint = save_while_the_disk_fills
        error = _failed_save(trainer, 2)
        _assert_resumes_from_step_1(root, trainer, stack)
        _assert_clear(error, root / "global_step_2", "bytes) free", needed)
