"""Patch 0009 (verl 0.9.1): the engine SFT trainer resumed from a checkpoint saved on an epoch's last step trains the
next epoch, on the batches of an uninterrupted run.

Unpatched 0.9.1 restores the checkpoint's ``data_<dp rank>.pt`` there too (verl/utils/checkpoint/checkpoint_handler.py
:165-166, "Always load dataloader state"): the iterator of the epoch that just ended, after its last batch. ``fit``
resumes in the next epoch (verl/trainer/sft_trainer.py:341, ``start_epoch = global_step // steps_per_epoch``) and
takes that restored iterator as its first, so the epoch yields no batch; the run ends one epoch short and exits 0
(the loop runs out before ``is_last_step``, sft_trainer.py:412, 445-449). The kit's SFT recipes save exactly at epoch
ends (recipes/config/retool_qwen3_4b_sft.yaml: ``save_freq: 31``, one save per epoch). verl issue #7401.

The check runs the trainer's real ``_build_dataloader``, ``_init_engine``, ``_build_ckpt_handler``, ``load_checkpoint``
(CheckpointHandler) and ``fit`` with the model left out (an engine whose checkpoint is nothing, a training client
that records the rows of each batch): an uninterrupted 3-epoch run saves after every step, then fresh trainers resume
from the end of epoch 1, from inside epoch 2 and from the end of epoch 2, each on its own copy of the checkpoints, and
must train every remaining step on the uninterrupted run's batches. The sampler and loader are the trainer's own
(DistributedSampler with ``set_epoch``, StatefulDataLoader with worker processes). End to end (the kit's launcher,
torchrun, ``--max-restarts``, a killed rank): tests/stack091/test_sft_fault_091.py.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from kit_testing import expect_success, gloo_world_of_one, needs_verl_09

pytestmark = [needs_verl_09(), pytest.mark.faults]

ROWS, BATCH, EPOCHS = 6, 2, 3
STEPS_PER_EPOCH = ROWS // BATCH
TOTAL = EPOCHS * STEPS_PER_EPOCH


class _NoModelEngine:
    """The engine calls the trainer and CheckpointHandler make, for one data-parallel rank with nothing to save."""

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_data_parallel_size(self) -> int:
        return 1

    def get_data_parallel_group(self) -> None:
        return None

    def save_checkpoint(self, **kwargs: object) -> None:
        pass

    def load_checkpoint(self, *args: object, **kwargs: object) -> None:
        pass


class _RecordingClient:
    """TrainingWorker's calls in ``fit``; ``train_batch`` records the dataset rows of the batch (row i holds i)."""

    def __init__(self, served: list[list[int]]) -> None:
        self.served = served

    def train_batch(self, data: object) -> object:
        from verl.utils import tensordict_utils as tu

        self.served.append([int(row[0]) for row in data["input_ids"].unbind()])
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"loss": 0.0}})

    def reset(self) -> None:
        pass

    def start_profile(self) -> None:
        pass

    def step_profile(self) -> None:
        pass

    def stop_profile(self) -> None:
        pass


def _config(root: Path, resume_from: int | None) -> object:
    from omegaconf import OmegaConf

    resume = {"resume_mode": "disable", "resume_from_path": None}
    if resume_from is not None:
        resume = {"resume_mode": "resume_path", "resume_from_path": str(root / f"global_step_{resume_from}")}
    return OmegaConf.create(
        {
            # num_workers 2, not verl's 8 (sft_trainer_engine.yaml:40): worker processes, as the kit runs it
            "data": {"train_batch_size": BATCH, "micro_batch_size_per_gpu": BATCH, "num_workers": 2,
                     "pad_mode": "no_padding", "use_dynamic_bsz": False, "max_token_len_per_gpu": 64},
            "model": {"use_remove_padding": True, "lora_rank": 0},
            "trainer": {**resume, "default_local_dir": str(root), "default_hdfs_dir": None, "max_ckpt_to_keep": None,
                        "total_epochs": EPOCHS, "total_training_steps": None, "save_freq": 1, "test_freq": -1,
                        "project_name": "kit", "experiment_name": "sft-resume-091", "logger": ["console"],
                        "device": "cpu"},
        }
    )  # fmt: skip


def _trainer(root: Path, resume_from: int | None, served: list[list[int]]) -> object:
    """verl 0.9.1's SFTTrainer built as ``__init__`` builds it (sft_trainer.py:51-75), less the model and dataset:
    row i of the dataset is i + 1 tokens of value i, so a batch names its rows."""
    import torch
    from verl.trainer.sft_trainer import SFTTrainer

    trainer = SFTTrainer.__new__(SFTTrainer)
    trainer.config = _config(root, resume_from)
    trainer.rank = 0
    trainer.model_config = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0))
    trainer.optimizer_config = SimpleNamespace(total_training_steps=None)
    trainer.start_profile_step = trainer.end_profile_step = -1
    trainer.train_dataset = [
        {"input_ids": torch.full((i + 1,), i), "attention_mask": torch.ones(i + 1, dtype=torch.long)}
        for i in range(ROWS)
    ]
    trainer.val_dataset = None
    trainer.engine = _NoModelEngine()
    trainer.training_client = _RecordingClient(served)
    trainer._build_dataloader()
    trainer._init_engine()
    trainer._build_ckpt_handler()
    trainer.resume_global_step = trainer.ckpt_handler.load_checkpoint()
    trainer.device_name = "cpu"
    return trainer


def _fit(root: Path, resume_from: int | None = None) -> list[list[int]]:
    """The batches a run trains, in order: from scratch, or resumed from ``global_step_<resume_from>``."""
    served: list[list[int]] = []
    _trainer(root, resume_from, served).fit()
    return served


def _where(step: int) -> str:
    epoch, done = divmod(step, STEPS_PER_EPOCH)
    return f"the last step of epoch {epoch}/{EPOCHS}" if done == 0 else f"inside epoch {epoch + 1}/{EPOCHS}"


def check_resume_trains_every_remaining_step() -> None:
    from verl.trainer import sft_trainer

    # fit logs device memory at each epoch (sft_trainer.py:360): verl's default device without the kit's platform
    # plugin is CUDA, which this machine lacks; there is no device memory here to log
    no_memory_log = mock.patch.object(sft_trainer, "log_gpu_memory_usage", lambda *args, **kwargs: None)
    with no_memory_log, gloo_world_of_one(), tempfile.TemporaryDirectory() as tmp:
        reference = _fit(Path(tmp) / "uninterrupted")  # saves global_step_1 .. global_step_9
        assert len(reference) == TOTAL, reference
        wrong = []
        for step in (STEPS_PER_EPOCH, STEPS_PER_EPOCH + 1, 2 * STEPS_PER_EPOCH):
            # each resume on its own copy: a resumed run saves too, over the checkpoints of the steps it trains
            root = Path(tmp) / f"resume-{step}"
            shutil.copytree(Path(tmp) / "uninterrupted", root)
            served = _fit(root, resume_from=step)
            if served == reference[step:]:
                continue
            trained = f"steps {step + 1}-{step + len(served)}" if served else "no step"
            short = TOTAL - step - len(served)
            wrong.append(
                f"  resumed from global_step_{step} ({_where(step)}): trained {trained} of {step + 1}-{TOTAL} "
                f"({short} steps short, {STEPS_PER_EPOCH} per epoch), on batches {served} instead of {reference[step:]}"
            )
        assert not wrong, "a resumed SFT run skipped steps or trained other batches:\n" + "\n".join(wrong)


def test_patched_resume_at_an_epoch_end() -> None:
    # A fresh interpreter: inside the full suite an earlier test's logging setup left caplog without this line (seen:
    # caplog.text == ""); alone, verl's logger reaches stderr through logging's last-resort handler.
    out = expect_success(__file__, "check_resume_trains_every_remaining_step")
    said = f"step {STEPS_PER_EPOCH} is the last of epoch 1 ({STEPS_PER_EPOCH} steps per epoch)"
    assert said in out, out[-4000:]  # the patch says why it did not restore the dataloader


def test_unpatched_091_skips_the_next_epoch(unpatched_verl) -> None:  # noqa: ANN001 - the conftest fixture
    out = unpatched_verl.expect_failure(
        __file__, "check_resume_trains_every_remaining_step", match="a resumed SFT run skipped steps"
    )
    end_of_1 = f"resumed from global_step_{STEPS_PER_EPOCH} (the last step of epoch 1/{EPOCHS})"
    assert f"{end_of_1}: trained steps 4-6 of 4-9 ({STEPS_PER_EPOCH} steps short" in out, out[-4000:]
    end_of_2 = f"resumed from global_step_{2 * STEPS_PER_EPOCH} (the last step of epoch 2/{EPOCHS})"
    assert f"{end_of_2}: trained no step of 7-9" in out, out[-4000:]
    assert f"resumed from global_step_{STEPS_PER_EPOCH + 1}" not in out  # inside an epoch: restored, as before
