"""Patch: process groups use gloo on a CPU-only machine.

Unpatched 0.6.1: ``get_nccl_backend()`` says "nccl" without CUDA, so the SFT trainer's
``initialize_global_process_group`` dies with "Distributed package doesn't have NCCL built in", and the FSDP
workers build "cpu:gloo,cpu:nccl" ("Duplicate device type cpu in backend string").
"""

from __future__ import annotations

from kit_testing import gloo_world_of_one, ppo_config, tiny_model_dir


def check_sft_process_group() -> None:
    import torch.distributed as dist
    from verl.utils.device import get_nccl_backend
    from verl.utils.distributed import initialize_global_process_group, initialize_global_process_group_ray

    with gloo_world_of_one(init_process_group=False):
        # what the SFT trainer calls under torchrun
        local_rank, rank, world_size = initialize_global_process_group()
        assert (local_rank, rank, world_size) == (0, 0, 1)
        assert dist.get_backend() == "gloo", dist.get_backend()
    with gloo_world_of_one(init_process_group=False):
        initialize_global_process_group_ray()
        assert dist.get_backend() == "gloo", dist.get_backend()
    assert get_nccl_backend() == "gloo", get_nccl_backend()


def check_fsdp_worker_process_group() -> None:
    import torch.distributed as dist
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    model = tiny_model_dir()
    config = ppo_config(
        [
            f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.n=1",
            "trainer.device=cpu",
        ]
    )
    with gloo_world_of_one(init_process_group=False):
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
    # torch's CPU build has no NCCL at all; its CUDA build (PyPI's, the venv's fallback) has it but no GPU
    nccl = ("Distributed package doesn't have NCCL", "ProcessGroupNCCL is only supported with GPUs, no GPUs found")
    unpatched_verl.expect_failure(__file__, "check_sft_process_group", match=nccl)


def test_fsdp_worker_process_group_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_fsdp_worker_process_group", match="Duplicate device type cpu")
