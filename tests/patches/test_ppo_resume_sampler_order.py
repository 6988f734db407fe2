"""Patch 0025: a resumed PPO run serves the prompts of the uninterrupted run, in its order (verl PRs 4156 and 5725).

Unpatched 0.6.1 shuffles with torch's RandomSampler, whose position cannot be restored, and its epoch loop starts at
epoch 0 on every resume (verl/trainer/ppo/ray_trainer.py ``fit``): a resume inside epoch e >= 1 replays the rest of
epoch 0's order, so prompts repeat and others are never seen, and ``training/epoch`` says 0; a resume at the end of
epoch 1 serves epoch 1's order again. (Upstream's fix of the epoch end, PR 5725, skips restoring data.pt there, and
the next epoch gets epoch 0's order: these checks fail on that too.)

The checks build the trainer's real dataloader (``_create_dataloader`` over ``create_rl_sampler``), save real
checkpoints with ``_save_checkpoint`` after every batch of an uninterrupted pass (the loop of ``fit``: every epoch,
every batch), then resume a fresh trainer from each one and run the real ``fit`` until it serves its first batch
(``_get_gen_batch``, the first call on a batch, stops it). End to end with main_ppo: tests/cpu/test_cpu_rl_resume.py.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from kit_testing import checkpoint_trainer, gloo_world_of_one

ROWS, BATCH, EPOCHS = 6, 2, 3
STEPS_PER_EPOCH = ROWS // BATCH


class Served(Exception):
    """Raised by the trainer's first step: (the epoch ``fit`` is in, the prompt indices of the batch it served)."""

    def __init__(self, served: tuple[int, list[int]]) -> None:
        super().__init__(served)
        self.served = served


def _rows() -> list[dict]:
    import torch

    return [{"input_ids": torch.tensor([i]), "index": i} for i in range(ROWS)]


def _trainer(root: Path, workers: int, resume_from: int | None = None, sampler: object = None) -> object:
    """A checkpoint trainer (kit_testing) with the real train dataloader; ``fit`` stops at its first batch."""
    from verl.utils.dataset.rl_dataset import collate_fn

    resume = ["trainer.resume_mode=disable"]
    if resume_from is not None:
        resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={root / f'global_step_{resume_from}'}"]
    overrides = [
        f"data.train_batch_size={BATCH}",
        f"data.dataloader_num_workers={workers}",
        f"trainer.total_epochs={EPOCHS}",
        "trainer.val_before_train=False",
        "trainer.logger=['console']",
        *resume,
    ]
    trainer = checkpoint_trainer(root, overrides)
    trainer._create_dataloader(_rows(), _rows(), collate_fn, sampler)
    trainer.val_reward_fn = None

    def first_step(batch: object) -> None:
        # fit calls this with the batch; its loop variable ``epoch`` is what it logs as training/epoch
        epoch = sys._getframe(1).f_locals["epoch"]
        raise Served((epoch, [int(i) for i in batch.non_tensor_batch["index"]]))

    trainer._get_gen_batch = first_step
    return trainer


def _uninterrupted(root: Path, workers: int, sampler: object = None) -> list[tuple[int, list[int]]]:
    """(epoch, batch) of an uninterrupted run, in order; a checkpoint saved after each batch (``global_step_<n>``)."""
    trainer = _trainer(root, workers, sampler=sampler)
    served: list[tuple[int, list[int]]] = []
    for epoch in range(EPOCHS):  # fit's loop: every epoch iterates the dataloader anew
        for batch in trainer.train_dataloader:
            served.append((epoch, [int(i) for i in batch["index"]]))
            trainer.global_steps = len(served)
            trainer._save_checkpoint()
    return served


def _first_batch_after_resume(root: Path, workers: int, step: int) -> tuple[int, list[int]] | None:
    """(epoch, batch) a trainer resumed from ``global_step_<step>`` serves first (None: fit ended without one)."""
    trainer = _trainer(root, workers, resume_from=step)
    try:
        trainer.fit()
    except Served as served:
        return served.served
    return None


def _where(step: int) -> str:
    epoch, done = divmod(step, STEPS_PER_EPOCH)
    return f"end of epoch {epoch - 1}" if done == 0 else f"epoch {epoch} after {done} of its {STEPS_PER_EPOCH} batches"


def _check_every_resume(workers: int) -> None:
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = _uninterrupted(root, workers)
        assert len(reference) == EPOCHS * STEPS_PER_EPOCH, reference
        wrong = []
        for step in range(1, len(reference)):
            first = _first_batch_after_resume(root, workers, step)
            if first != reference[step]:
                wrong.append(
                    f"  global_step_{step} ({_where(step)}): served (epoch, batch) {first}, uninterrupted run "
                    f"{reference[step]}"
                )
        assert not wrong, (
            f"a resumed run serves other prompts than the uninterrupted run (dataloader_num_workers={workers}):\n"
            + "\n".join(wrong)
            + f"\nuninterrupted order: {reference}"
        )


def check_resume_order_single_process() -> None:
    _check_every_resume(workers=0)


def check_resume_order_worker_processes() -> None:
    """With dataloader workers (verl's default is 8): torchdata's state then comes from its snapshots."""
    _check_every_resume(workers=2)


def _torch_random_sampler(rows: list[dict]) -> object:
    """The sampler verl 0.6.1's create_rl_sampler made (main_ppo.py ~425-430, data.seed null)."""
    import torch

    return torch.utils.data.RandomSampler(rows, generator=torch.Generator())


def check_checkpoint_of_the_torch_sampler(workers: int) -> None:
    """data.pt written over torch's RandomSampler (before the patch) resumes: mid-epoch the epoch goes on in the order
    that sampler drew for it (its remaining batches, no more); at an epoch's end the next epoch is served."""
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = _uninterrupted(root, workers, sampler=_torch_random_sampler(_rows()))
        step = STEPS_PER_EPOCH + 1  # epoch 1, after its first batch
        trainer = _trainer(root, workers, resume_from=step)
        trainer._load_checkpoint()
        rest = [[int(i) for i in batch["index"]] for batch in trainer.train_dataloader]
        expected = [batch for _, batch in reference[step : 2 * STEPS_PER_EPOCH]]
        assert rest == expected, f"resumed from global_step_{step}: epoch 1 went on with {rest}, not {expected}"
        first = _first_batch_after_resume(root, workers, 2 * STEPS_PER_EPOCH)
        assert first is not None and first[0] == 2 and len(set(first[1])) == BATCH, f"after epoch 1: served {first}"


def test_patched_every_resume_single_process() -> None:
    check_resume_order_single_process()


def test_patched_every_resume_worker_processes(capsys: pytest.CaptureFixture[str]) -> None:
    check_resume_order_worker_processes()
    out = capsys.readouterr().out
    assert f"global_step_{STEPS_PER_EPOCH} ends epoch 0 (training/epoch)" in out, out[-4000:]


@pytest.mark.parametrize("workers", [0, 2])
def test_patched_checkpoint_of_the_torch_sampler(workers: int, capsys: pytest.CaptureFixture[str]) -> None:
    check_checkpoint_of_the_torch_sampler(workers)
    out = capsys.readouterr().out
    assert "was saved over torch's RandomSampler, which keeps no order: epoch 1 goes on after its first 2" in out, out


def test_unpatched_fails(unpatched_verl) -> None:
    out = unpatched_verl.expect_failure(
        __file__, "check_resume_order_single_process", match="a resumed run serves other prompts"
    )
    assert f"global_step_{STEPS_PER_EPOCH + 1} (epoch 1 after 1 of its {STEPS_PER_EPOCH} batches)" in out, out[-4000:]


def test_unpatched_fails_with_worker_processes(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_resume_order_worker_processes", match="a resumed run serves other prompts"
    )
