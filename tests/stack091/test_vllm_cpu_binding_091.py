"""Issue 51: the current stack's vLLM CPU worker gets every core vLLM's auto binding picks, none kept for its scheduler.

verl 0.9.1 runs vLLM 0.23's CPU worker in a process of its own (``distributed_executor_backend: mp``,
vllm_async_server.py:339), and vLLM's OMP manager keeps one core off that worker's thread list for the scheduler
process (vllm/utils/ompmultiprocessing.py:43-50). On 2 cores the worker generated on one while the trainer waited;
the cpu platform's ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` (platforms/cpu.py) gives it both (the learning check's
generation: 33.6 s a step with the reserved core, 26.6 s without; docs/measurements/learn_reserved_cpu.yaml).
Checked on vLLM's own manager, with the env the platform gives the RL phase.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kit_testing import needs_verl_09

from platforms import stacks
from platforms.profiles import CPU

pytestmark = needs_verl_09()

RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def _worker_cores(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> tuple[list[int], list[int]]:
    """vLLM 0.23's auto binding for one local CPU worker under ``env``: (its cores, the cores kept back)."""
    from vllm.utils.ompmultiprocessing import OMPProcessManager

    monkeypatch.delenv(RESERVED_ENV, raising=False)
    for name in ("VLLM_CPU_OMP_THREADS_BIND", RESERVED_ENV):
        if name in env:
            monkeypatch.setenv(name, env[name])
    config = SimpleNamespace(
        parallel_config=SimpleNamespace(local_world_size=1, data_parallel_rank_local=None, _api_process_count=1),
        kv_transfer_config=None,
    )
    manager = OMPProcessManager(config)
    return manager.cpu_lists[0], manager.reserved_cpu_list


def test_the_rl_env_leaves_no_core_to_vllms_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {e.name: e.value for e in CPU.env("rl", stacks.get("0.9.1"), environ={})}
    assert env.get(RESERVED_ENV) == "0", "the cpu platform's RL env no longer sets it"
    cores, kept = _worker_cores(monkeypatch, env)
    assert kept == [] and cores, (cores, kept)
    if len(cores) < 2:
        pytest.skip(f"one physical core here ({cores}): vLLM's default would keep back the worker's only core")
    without = {k: v for k, v in env.items() if k != RESERVED_ENV}
    default_cores, default_kept = _worker_cores(monkeypatch, without)
    # vLLM's own default keeps one back: the kit's value is what gives the worker that core
    assert len(default_kept) == 1 and sorted(default_cores + default_kept) == sorted(cores), (cores, default_cores)
