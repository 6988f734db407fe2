"""Patch: verl 0.6.1's SFT trainer takes its dataloaders' worker count from ``data.num_workers``.

Unpatched 0.6.1 builds both of ``FSDPSFTTrainer``'s dataloaders with ``num_workers=8`` and no config key
(verl/trainer/fsdp_sft_trainer.py:184, :197). The check builds the trainer's own dataloaders (``_build_dataloader``)
with ``data.num_workers`` 0 and then without the key, and reads what each loader got: 0, then verl's 8.
"""

from __future__ import annotations

import subprocess
import sys

from kit_testing import REPO_ROOT, gloo_world_of_one, kit_env


def check_sft_dataloader_workers() -> None:
    import torch
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    rows = [{"input_ids": torch.full((4,), i), "loss_mask": torch.ones(4)} for i in range(8)]
    data = {"train_batch_size": 2, "micro_batch_size_per_gpu": 2}
    trainers = {}
    with gloo_world_of_one():
        for name, extra in (("set to 0", {"num_workers": 0}), ("absent", {})):
            trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)  # only what _build_dataloader reads
            trainer.config = OmegaConf.create({"ulysses_sequence_parallel_size": 1, "data": {**data, **extra}})
            trainer.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
            trainer._build_dataloader(rows, rows)
            trainers[name] = trainer
        got = {name: (t.train_dataloader.num_workers, t.val_dataloader.num_workers) for name, t in trainers.items()}
        assert got == {"set to 0": (0, 0), "absent": (8, 8)}, f"(train, val) workers: {got}"
        # the loader without workers still serves the sampler's batches (and its state, which resume saves)
        loader = trainers["set to 0"].train_dataloader
        assert [batch["input_ids"].shape for batch in loader] == [torch.Size([2, 4])] * 4
        assert "_num_yielded" in str(loader.state_dict()), loader.state_dict()


def check_config_declares_the_key() -> None:
    """The key is in verl's own sft_trainer.yaml with verl's 8, so a Hydra override of it composes (no ``+``)."""
    from pathlib import Path

    import verl
    from omegaconf import OmegaConf

    config = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "sft_trainer.yaml")
    assert OmegaConf.select(config, "data.num_workers") == 8, OmegaConf.to_yaml(config.data)


def _run(check: str) -> subprocess.CompletedProcess:
    code = f"import runpy; runpy.run_path({__file__!r})[{check!r}]()"
    return subprocess.run(
        [sys.executable, "-c", code], env=kit_env(), capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )


def test_patched() -> None:
    """In a fresh interpreter, as the unpatched run (a forked dataloader worker of pytest's process, after a thousand
    tests have loaded torch and vLLM, segfaulted once: test_sft_pin_memory_cpu.py)."""
    proc = _run("check_sft_dataloader_workers")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    check_config_declares_the_key()  # reads a yaml file: no fresh interpreter needed


def test_unpatched_fails(unpatched_verl) -> None:  # noqa: ANN001 - fixture
    unpatched_verl.expect_failure(__file__, "check_sft_dataloader_workers", "'set to 0': (8, 8)")
