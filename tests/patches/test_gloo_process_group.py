"""Patch: process groups use gloo on a CPU-only machine.

Unpatched 0.6.1: ``get_nccl_backend()`` says "nccl" without CUDA, so the SFT trainer's
``initialize_global_process_group`` dies with "Distributed package doesn't have NCCL built in", and the FSDP
workers build "cpu:gloo,cpu:nccl" ("Duplicate device type cpu in backend string").
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tiny_model_dir() -> Path:
    """The kit's tiny random Qwen3 + real Qwen tokenizer, built once into build/ (cached by fingerprint)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from recipes.smoke.tiny_model import build_tiny_qwen

    return build_tiny_qwen(Path(os.environ.get("KIT_TINY_MODEL_DIR", REPO_ROOT / "build" / "tiny-qwen3")))


@contextlib.contextmanager
def _single_process_env() -> Iterator[None]:
    """torchrun-style env for a world of one process; restores os.environ and destroys the group afterwards."""
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    saved = dict(os.environ)
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def _ppo_config(overrides: list[str]):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def check_sft_process_group() -> None:
    import torch.distributed as dist
    from verl.utils.device import get_nccl_backend
    from verl.utils.distributed import initialize_global_process_group, initialize_global_process_group_ray

    with _single_process_env():
        # what the SFT trainer calls under torchrun
        local_rank, rank, world_size = initialize_global_process_group()
        assert (local_rank, rank, world_size) == (0, 0, 1)
        assert dist.get_backend() == "gloo", dist.get_backend()
    with _single_process_env():
        initialize_global_process_group_ray()
        assert dist.get_backend() == "gloo", dist.get_backend()
    assert get_nccl_backend() == "gloo", get_nccl_backend()


def check_fsdp_worker_process_group() -> None:
    import torch.distributed as dist
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    model = _tiny_model_dir()
    config = _ppo_config(
        [
            f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.n=1",
            "trainer.device=cpu",
        ]
    )
    with _single_process_env():
        worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
        assert dist.get_backend() == "gloo", dist.get_backend()
        assert worker.device_mesh.device_type == "cpu"
        # a collective on the worker's group works
        import torch

        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]


def test_sft_process_group_patched() -> None:
    check_sft_process_group()


def test_fsdp_worker_process_group_patched() -> None:
    check_fsdp_worker_process_group()


def test_sft_process_group_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_sft_process_group", match="Distributed package doesn't have NCCL")


def test_fsdp_worker_process_group_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_fsdp_worker_process_group", match="Duplicate device type cpu")
