"""Patch: with trainer.device=cpu, main_ppo's resource pools ask Ray for CPU bundles (one per worker process).

Unpatched 0.6.1 hard-codes ``use_gpu=True`` and counts only Ray "GPU"/"NPU", so on a CPU-only Ray cluster
``TaskRunner`` dies with "Total available GPUs 0 is less than total desired GPUs 2".
"""

from __future__ import annotations


def check_cpu_resource_pool() -> None:
    import ray
    from omegaconf import OmegaConf
    from ray.util.placement_group import placement_group_table
    from verl.trainer.main_ppo import TaskRunner
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager

    config = OmegaConf.create(
        {
            "trainer": {"device": "cpu", "n_gpus_per_node": 2, "nnodes": 1},
            "reward_model": {"enable_resource_pool": False},
        }
    )
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        # main_ppo's own code path: TaskRunner builds the manager from the trainer config
        manager = TaskRunner().init_resource_pool_mgr(config)
        manager.create_resource_pool()
        pool = manager.resource_pool_dict["global_pool"]
        assert pool.use_gpu is False, pool.use_gpu
        (pg,) = pool.get_placement_groups(device_name="cpu")
        bundles = list(placement_group_table(pg)["bundles"].values())
        assert bundles == [{"CPU": 1.0}, {"CPU": 1.0}], bundles

        # without trainer.device=cpu nothing changes: accelerator bundles, and the GPU count check still applies
        accel = ResourcePoolManager(resource_pool_spec={"p": [2]}, mapping={})
        try:
            accel.create_resource_pool()
        except ValueError as e:
            assert "Total available GPUs 0" in str(e), e
        else:
            raise AssertionError("the accelerator pool was created on a machine without GPUs")
        assert accel.resource_pool_dict["p"].use_gpu is True
    finally:
        ray.shutdown()


def test_patched() -> None:
    check_cpu_resource_pool()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_cpu_resource_pool", match="Total available GPUs 0 is less than total desired GPUs 2"
    )
