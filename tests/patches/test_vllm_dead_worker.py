"""Patch 0020: the vLLM engine's executor fails a call whose rollout worker died instead of waiting forever.

In verl 0.6.1's hybrid rollout the vLLM engine drives the trainer's own worker processes through
``ExternalZeroMQDistributedExecutor`` (``vllm_async_server.py``): ``collective_rpc`` sends each worker a message on a
ZeroMQ REQ socket and blocks in ``socket.recv()`` with no timeout. When a worker process dies (SIGKILL, the OOM
killer, a crashed node) no reply ever comes: the engine, every agent loop and the driver wait forever and
``--max-restarts`` never gets its non-zero exit (issue 20, fault (f)).

The check runs the real executor in a child process against a stand-in worker: a process bound to a real ZeroMQ REP
socket that answers the executor's three start-up calls (``init_worker``, ``init_device``, ``load_model``), then takes
the next call and SIGKILLs itself. The executor's call must end within :data:`BOUND_S` with an error naming the
worker's address; unpatched it is still blocked when the bound runs out.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

BOUND_S = 10.0


def _stand_in_worker(address: str, answered: int) -> None:
    """Reply ``None`` to ``answered`` calls (the executor's start-up), then die on the next one, unanswered."""
    import zmq

    socket = zmq.Context().socket(zmq.REP)
    socket.bind(address)
    for _ in range(answered):
        socket.recv()
        socket.send(pickle.dumps(None))
    socket.recv()
    os.kill(os.getpid(), signal.SIGKILL)


def _engine(address: str, results: multiprocessing.Queue) -> None:
    """What vLLM's engine process does with verl's executor: start it on the worker, then run a call on it."""
    from verl.workers.rollout.vllm_rollout.vllm_async_server import ExternalZeroMQDistributedExecutor

    executor = ExternalZeroMQDistributedExecutor.__new__(ExternalZeroMQDistributedExecutor)
    executor.vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(data_parallel_rank_local=0, tensor_parallel_size=1)
    )
    os.environ["VERL_VLLM_ZMQ_ADDRESSES"] = address
    executor._init_executor()  # the three start-up calls, answered
    results.put("started")
    try:
        executor.collective_rpc("execute_model")
    except Exception as error:  # noqa: BLE001  (the point: which error, reported to the parent)
        results.put(f"{type(error).__name__}: {error}")
    else:
        results.put("returned")


def check_dead_worker_fails_the_call() -> None:
    import verl.workers.rollout.vllm_rollout.vllm_async_server  # noqa: F401  (imported once, before the forks)

    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        address = f"ipc://{Path(tmp) / 'worker.ipc'}"
        worker = context.Process(target=_stand_in_worker, args=(address, 3), daemon=True)
        worker.start()
        results = context.Queue()
        engine = context.Process(target=_engine, args=(address, results), daemon=True)
        engine.start()
        assert results.get(timeout=120) == "started", "the executor did not start on the stand-in worker"
        start = time.monotonic()
        engine.join(BOUND_S)
        waited = time.monotonic() - start
        if engine.is_alive():
            engine.kill()
            worker.join(5)
            raise AssertionError(
                f"collective_rpc still waits {waited:.0f} s after its worker (exit code {worker.exitcode}) was killed"
            )
        worker.join(5)
        assert worker.exitcode == -signal.SIGKILL, f"the stand-in worker did not die as planned: {worker.exitcode}"
        outcome = results.get(timeout=5)
        assert outcome.startswith("RuntimeError") and address in outcome and "execute_model" in outcome, outcome
        print(f"the call failed {waited:.1f} s after it was sent: {outcome}")


def test_patched_dead_worker_fails_the_call() -> None:
    check_dead_worker_fails_the_call()


def test_unpatched_dead_worker_hangs_the_call(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_dead_worker_fails_the_call", match="collective_rpc still waits")
