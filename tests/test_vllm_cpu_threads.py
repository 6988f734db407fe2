"""The cpu platform's guard against vLLM pinning a trainer rank's threads (platforms/vllm_cpu_threads.py).

In the learning check both FSDP ranks' threads ended up on core 0 after vLLM's ``CPUWorker.init_device`` (RL steps
121-167 s; 78-115 s once undone). These tests pin threads the way vLLM does and check they come back, that verl's
``external_lib`` hook names the module on the cpu platform with vLLM only, and that the real vLLM class gets wrapped.
"""

from __future__ import annotations

import os
import threading

import pytest

from platforms import stacks, vllm_cpu_threads
from platforms.base import RL_EXTERNAL_LIB_KEY
from platforms.cpu import VLLM_UNPIN_MODULE, CpuPlatform

needs_two_cores = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="pinning to one core changes nothing on a one-core machine"
)


class _PinningWorker:
    """What vLLM's CPUWorker.init_device does to the process (init_cpu_threads_env): every thread onto one core."""

    def init_device(self) -> None:
        first = min(os.sched_getaffinity(0))
        for name in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(name), {first})
            except ProcessLookupError:  # a thread that ended meanwhile (seen under pytest-xdist)
                continue


def _thread_affinities() -> list[set[int]]:
    affinities = []
    for name in os.listdir("/proc/self/task"):
        try:
            affinities.append(os.sched_getaffinity(int(name)))
        except ProcessLookupError:  # ended meanwhile
            continue
    return affinities


@needs_two_cores
def test_the_wrapped_worker_gives_every_thread_its_cores_back() -> None:
    before = os.sched_getaffinity(0)
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)  # a thread started before vLLM pins, as torch's are
    helper.start()
    worker_cls = type("Worker", (_PinningWorker,), {})
    try:
        assert vllm_cpu_threads.unpin(worker_cls) is True
        assert vllm_cpu_threads.unpin(worker_cls) is False  # imported twice: wrapped once
        worker_cls().init_device()
        assert all(aff == before for aff in _thread_affinities()), _thread_affinities()
    finally:
        stop.set()
        os.sched_setaffinity(0, before)


@needs_two_cores
def test_without_the_wrapper_the_threads_stay_pinned() -> None:
    """The check above can fail: the unwrapped worker leaves every thread on one core."""
    before = os.sched_getaffinity(0)
    try:
        _PinningWorker().init_device()
        assert all(len(aff) == 1 for aff in _thread_affinities())
    finally:
        vllm_cpu_threads.restore_threads(before, threads=1)
    assert os.sched_getaffinity(0) == before


def test_the_cpu_platform_names_the_module_only_for_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    platform = CpuPlatform()
    hook = f"{RL_EXTERNAL_LIB_KEY}={VLLM_UNPIN_MODULE}"
    if platform.rollout_engine(stacks.REFERENCE).name == "vllm":
        assert hook in platform.rollout_overrides(stacks.REFERENCE)
    from platforms import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "engine", lambda: vllm_cpu.RolloutEngine("hf", None, "no vLLM here"))
    assert hook not in CpuPlatform().rollout_overrides(stacks.REFERENCE)
    __import__(VLLM_UNPIN_MODULE)  # the name verl's import_external_libs imports exists


def test_the_real_vllm_cpu_worker_is_wrapped_on_import() -> None:
    worker = pytest.importorskip("vllm.v1.worker.cpu_worker", reason="vLLM's CPU build is not installed")
    vllm_cpu_threads.install()
    assert getattr(worker.CPUWorker.init_device, "_kit_unpinned", False)
