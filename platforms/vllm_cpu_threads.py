"""Keep vLLM's CPU worker from pinning a trainer rank's threads: ``actor_rollout_ref.model.external_lib`` on CPU.

Why: in verl's hybrid rollout the vLLM worker lives inside each FSDP trainer rank (verl 0.6.1
``vllm_rollout_spmd.py`` ``_init_worker``), and vLLM 0.11's ``CPUWorker.init_device`` binds that process's OpenMP
threads to the cores of NUMA node 0 (``VLLM_CPU_OMP_THREADS_BIND=auto``: ``vllm/v1/worker/cpu_worker.py:38-64``,
``torch.ops._C_utils.init_cpu_threads_env``): thread 0 to the first core, and every thread the process starts
afterwards inherits that. With two ranks on a two-core machine both ranks' main threads ended up on core 0 (37 of
the 83 threads of each rank pinned there, measured in the learning check), so training and generation ran on one
core. Another value of the variable cannot help: vLLM indexes the list by the trainer's global rank after slicing it
to a one-entry group (``IndexError`` on rank 1), and only rank 0 can be given ``all``.

This module, imported by verl's FSDP workers (``import_external_libs``, the hook the cpu platform's RL overrides
name), wraps ``CPUWorker.init_device`` so that after vLLM's binding every thread of the process gets back the
affinity the process had, and torch its thread count (``OMP_NUM_THREADS``, one per rank on the cpu platform). Where
vLLM's CPU build is not installed (the hf rollout) it does nothing.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from platforms.post_import import when_imported

logger = logging.getLogger(__name__)

#: vLLM's CPU worker, whose ``init_device`` pins the threads.
WORKER_MODULE = "vllm.v1.worker.cpu_worker"
#: Marks the wrapped method, so a second import wraps nothing.
_WRAPPED = "_kit_unpinned"


def restore_threads(affinity: set[int], threads: int) -> int:
    """Give every thread of this process ``affinity`` and torch ``threads`` intra-op threads; returns how many
    threads were reset (a thread that ended meanwhile is skipped)."""
    import torch

    reset = 0
    for name in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(name), affinity)
            reset += 1
        except (ProcessLookupError, OSError):
            continue
    torch.set_num_threads(threads)
    return reset


def unpin(worker_cls: type) -> bool:
    """Wrap ``worker_cls.init_device`` (vLLM's ``CPUWorker``); False when it is wrapped already."""
    original = worker_cls.init_device
    if getattr(original, _WRAPPED, False):
        return False

    def init_device(self) -> None:
        import torch

        affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
        original(self)
        reset = restore_threads(affinity, threads)
        logger.warning("vLLM CPU worker: %d threads unpinned to cores %s, %d torch threads", reset, affinity, threads)

    setattr(init_device, _WRAPPED, True)
    worker_cls.init_device = init_device
    return True


def install() -> str:
    """Wrap vLLM's CPU worker when its module is imported ("later") or now if it is ("now").

    Lazily: verl imports this module in every process that builds a model config (vLLM servers included, verl
    ``workers/config/model.py:94``), and importing ``cpu_worker`` imports IPEX (4.4 s of CPU) through vLLM's CPU
    attention; only the trainer ranks, where vLLM's worker runs, import it themselves. Where vLLM's CPU build is not
    installed (the hf rollout) the module is never imported and nothing happens.
    """
    return when_imported(WORKER_MODULE, unpin_worker_module)


def unpin_worker_module(module: ModuleType) -> bool:
    """:func:`unpin` on the ``CPUWorker`` of ``vllm.v1.worker.cpu_worker``."""
    return unpin(module.CPUWorker)


install()
