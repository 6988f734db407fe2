"""Issue 51: the current stack's vLLM servers on CPU get vLLM 0.23's own CPU batch limits, not verl's GPU-sized ones.

verl 0.9.1 hands vLLM ``max_num_batched_tokens=8192`` and ``max_num_seqs=1024`` (verl/workers/config/rollout.py:208 and
its max_num_seqs default), and vLLM 0.23's CPU worker runs a dummy forward of max_num_batched_tokens tokens before it
serves (vllm/v1/worker/cpu_worker.py:169-170 -> cpu_model_runner.py:120-124 -> profile_run): seconds of every RL
start-up on a CPU. The cpu platform's limits (platforms/cpu.py ``VLLM_CPU_BATCH_LIMITS``) are what vLLM itself picks
for a CPU API server; scripts/bench_vllm_cpu.py measures the start-up with each.
"""

from __future__ import annotations

from kit_testing import needs_verl_09, require_vllm, tiny_model_dir
from vllm_cpu_defaults import vllm_api_server_limits

from platforms import stacks
from platforms.cpu import VLLM_CPU_BATCH_LIMITS
from platforms.profiles import CPU

pytestmark = needs_verl_09()


def test_the_batch_limits_are_vllm_023s_own_for_a_cpu_api_server() -> None:
    require_vllm()
    assert vllm_api_server_limits(tiny_model_dir()) == VLLM_CPU_BATCH_LIMITS
    overrides = CPU.verl_overrides("rl", stacks.CURRENT)
    for key, value in VLLM_CPU_BATCH_LIMITS.items():
        assert f"actor_rollout_ref.rollout.{key}={value}" in overrides, overrides
