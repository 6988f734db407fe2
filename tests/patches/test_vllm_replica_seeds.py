"""Patch: every vLLM replica gets its own seed (verl PRs 5179 and 5181).

Unpatched 0.6.1 ``vLLMHttpServerBase.launch_server`` passes ``config.seed`` (0 unless set) to every replica's
engine, so replicas that receive the same requests draw the same samples: with vLLM's deterministic sampling a GRPO
group split over replicas has fewer distinct trajectories. The check builds verl's real server argument list for
replicas 0-3 on vLLM 0.11.0's CPU build (no engine started) and reads the seed vLLM's parser gets.
"""

from __future__ import annotations

from kit_testing import interpreter_stack, require_vllm, tiny_model_dir, vllm_server_args

from platforms import CPU

REPLICAS = 4


def check_seeds_differ_per_replica() -> None:
    import ray

    overrides = [*CPU.rollout_overrides(interpreter_stack()), "actor_rollout_ref.rollout.mode=async"]
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)  # one Ray for the four servers
    try:
        seeds = [vllm_server_args(tiny_model_dir(), overrides, replica_rank=rank).seed for rank in range(REPLICAS)]
    finally:
        ray.shutdown()
    print(f"vLLM seeds of replicas 0-{REPLICAS - 1}: {seeds}")
    assert len(set(seeds)) == REPLICAS, f"{REPLICAS} vLLM replicas got the seeds {seeds}: they sample alike"


def test_patched() -> None:
    require_vllm()
    check_seeds_differ_per_replica()


def test_unpatched_fails(unpatched_verl) -> None:
    require_vllm()
    unpatched_verl.expect_failure(
        __file__, "check_seeds_differ_per_replica", match=f"{REPLICAS} vLLM replicas got the seeds [0, 0, 0, 0]"
    )
