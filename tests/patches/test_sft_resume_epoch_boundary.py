"""Patch 0024: the SFT trainer resumed from a checkpoint saved on an epoch's last step trains the next epoch.

Unpatched 0.6.1 restores data.pt there too: the iterator of the epoch that just ended, after its last batch.
``fit`` resumes in the next epoch (``global_step // steps_per_epoch``) and takes that restored iterator as its first,
so the epoch yields nothing and is skipped (verl/trainer/fsdp_sft_trainer.py ``_load_dataloader_state`` and ``fit``).
The kit's 4B and 32B SFT configs save once per epoch, so every restart of them lost an epoch.

The check runs the trainer's real ``fit``, ``save_checkpoint`` and ``load_checkpoint`` with the model left out (the
training step records the batch, the checkpoint manager saves nothing) over the sampler and dataloader the trainer
builds (``_build_dataloader``: DistributedSampler with ``set_epoch``, StatefulDataLoader with worker processes): an
uninterrupted run saves after every step, then a fresh trainer resumes from each epoch boundary and from inside an
epoch, and must train every remaining step on the batches of the uninterrupted run. End to end (torchrun, the kit's
restart supervisor, a killed rank): tests/cpu/test_cpu_sft_resume.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from kit_testing import gloo_world_of_one

ROWS, BATCH, EPOCHS = 6, 2, 3
STEPS_PER_EPOCH = ROWS // BATCH


class _NoModelCheckpoint:
    """The trainer's checkpoint manager without a model: the trainer still writes data.pt and the tracker."""

    def save_checkpoint(self, **kwargs: object) -> None:
        pass

    def load_checkpoint(self, *args: object, **kwargs: object) -> None:
        pass


def _trainer(root: Path, resume_from: int | None, served: list[list[int]]) -> object:
    """An FSDPSFTTrainer with the parts fit, save_checkpoint and load_checkpoint use; ``training_step`` records."""
    import torch
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.utils.data import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)
    resume = {"resume_mode": "disable", "resume_from_path": None}
    if resume_from is not None:
        resume = {"resume_mode": "resume_path", "resume_from_path": str(root / f"global_step_{resume_from}")}
    trainer.config = OmegaConf.create(
        {
            "data": {"train_batch_size": BATCH, "micro_batch_size_per_gpu": BATCH},
            "trainer": {
                **resume,
                "default_local_dir": str(root),
                "default_hdfs_dir": None,
                "total_epochs": EPOCHS,
                "total_training_steps": None,
                "save_freq": 1,
                "test_freq": -1,
                "max_ckpt_to_keep": None,
                "project_name": "kit",
                "experiment_name": "sft-resume",
                "logger": ["console"],
            },
        }
    )
    trainer.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    trainer.device_name = "cpu"
    rows = [{"index": torch.tensor(i)} for i in range(ROWS)]
    # as _build_dataloader makes them (fsdp_sft_trainer.py:177-188), but no pinned memory (patch 0016: unpatched
    # 0.6.1 pins on CPU and dies there) and 2 worker processes, not 8
    trainer.train_sampler = DistributedSampler(rows, shuffle=True, num_replicas=1, rank=0, drop_last=True)
    trainer.train_dataloader = StatefulDataLoader(
        rows, batch_size=BATCH, sampler=trainer.train_sampler, num_workers=2, drop_last=True
    )
    trainer.val_dataloader = [{"index": torch.arange(BATCH)}]
    trainer.steps_per_epoch = len(trainer.train_dataloader)
    trainer.resume_global_step = 0
    trainer.checkpoint_manager = _NoModelCheckpoint()

    def training_step(batch: object) -> dict[str, float]:
        served.append([int(i) for i in batch["index"]])
        return {"train/time(s)": 0.0}

    trainer.training_step = training_step
    trainer.validation_step = lambda batch: torch.tensor(0.0)
    return trainer


def _fit(root: Path, resume_from: int | None = None) -> list[list[int]]:
    """The batches a run trains, in order: from scratch, or resumed from ``global_step_<resume_from>``."""
    served: list[list[int]] = []
    trainer = _trainer(root, resume_from, served)
    trainer.load_checkpoint()
    trainer.fit()
    return served


def check_resume_trains_every_remaining_step() -> None:
    with gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = _fit(root)  # saves global_step_1 .. global_step_9
        total = EPOCHS * STEPS_PER_EPOCH
        assert len(reference) == total, reference
        wrong = []
        for step in (STEPS_PER_EPOCH, STEPS_PER_EPOCH + 1, 2 * STEPS_PER_EPOCH):
            served = _fit(root, resume_from=step)
            if served == reference[step:]:
                continue
            trained = f"steps {step + 1}-{step + len(served)}" if served else "no step"
            epoch, done = divmod(step, STEPS_PER_EPOCH)
            where = f"the last step of epoch {epoch}/{EPOCHS}" if done == 0 else f"inside epoch {epoch + 1}/{EPOCHS}"
            wrong.append(
                f"  resumed from global_step_{step} ({where}): trained {trained} of {step + 1}-{total}, on batches "
                f"{served} instead of {reference[step:]}"
            )
        assert not wrong, "a resumed SFT run skipped steps or trained other batches:\n" + "\n".join(wrong)


def test_patched(capsys: pytest.CaptureFixture[str]) -> None:
    check_resume_trains_every_remaining_step()
    out = capsys.readouterr().out
    assert f"step {STEPS_PER_EPOCH} is the last of epoch 1/{EPOCHS}" in out, out[-4000:]


def test_unpatched_fails(unpatched_verl) -> None:
    out = unpatched_verl.expect_failure(
        __file__, "check_resume_trains_every_remaining_step", match="a resumed SFT run skipped steps"
    )
    assert f"resumed from global_step_{STEPS_PER_EPOCH} (the last step of epoch 1/{EPOCHS}): trained steps 4-6" in out
