"""Patch 0.9.1/0010: the bucketed weight transfer fails the step when its rollout worker dies or raises, not hangs.

In verl 0.9.1's colocated vLLM rollout, every trainer rank sends its weights to its vLLM worker through
``BucketedWeightSender`` (verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py): a ZeroMQ REQ socket whose
``send_pyobj``/``recv`` calls (:135-136, :163-164, :195-197) have no timeout. The receiver (``BucketedWeightReceiver``,
in the vLLM worker) acknowledges each bucket after loading it. When it raises, it closes its socket without an ACK
(:308-309); when its process dies, no ACK comes either: the sender blocks in ``recv()`` for ever, and so do the
trainer's ``ray.get`` on ``update_weights`` (verl/checkpoint_engine/base.py:519) and the run, which ``--max-restarts``
cannot restart because it never fails (issue 20's fault scenario (h); verl PR #7366 open).

The checks drive the real sender and receiver over a real ``ipc://`` socket pair in two forked processes, with shared
memory buckets (the CPU path; CUDA IPC needs a GPU), 1 MiB buckets of two 512 KiB weights each, so the transfer has
three buckets and the receiver fails on the second. Patched, the sender fails within :data:`BOUND_S` with an error
naming the worker's socket, the bucket and (for a dead worker) the timeout; unpatched it is still blocked when
:data:`BOUND_S` runs out, and the check says so.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from kit_testing import expect_success, needs_verl_09

pytestmark = [needs_verl_09(), pytest.mark.faults]

#: How long the checks wait for the sender's outcome after starting the transfer.
BOUND_S = 10.0
#: The patched sender's ACK timeout in these checks (the default is 300 s: verl/workers/config/rollout.py).
ACK_TIMEOUT_S = 2.0
#: Six 512 KiB float32 weights in 1 MiB buckets: three buckets, the receiver fails on the second.
WEIGHTS, NUMEL, BUCKET_MB, FAIL_AT_BUCKET = 6, 131072, 1, 2
CONFIG_KEY = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_ack_timeout_seconds"


def _use_cpu_platform() -> None:
    """verl's platform set to the kit's CPU platform in this (forked, throw-away) process: the sender's and receiver's
    cleanup calls ``get_torch_device().synchronize()/empty_cache()``, which verl's CUDA fallback cannot answer here."""
    from verl.plugin.platform import platform_manager

    from platforms import verl_platform

    cls = verl_platform.register()
    assert cls is not None, "the kit's cpu platform did not register"
    os.environ["VERL_PLATFORM"] = "cpu"
    platform_manager._current_platform = cls()


def _weights() -> list[tuple[str, Any]]:
    import torch

    return [(f"layer{i}.weight", torch.full((NUMEL,), float(i))) for i in range(WEIGHTS)]


def _receiver(address: str, fail: str, results: multiprocessing.Queue) -> None:
    """The vLLM worker's side: receive and "load" each bucket; on bucket FAIL_AT_BUCKET raise or die by ``fail``.

    After an exception it stays alive, as a vLLM worker does when its ``update_weights_from_ipc`` RPC raises.
    """
    import torch
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

    _use_cpu_platform()
    loaded: dict[str, float] = {}
    buckets = 0

    def on_bucket(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
        nonlocal buckets
        buckets += 1
        if buckets == FAIL_AT_BUCKET and fail == "raise":
            raise RuntimeError("simulated load_weights failure")
        if buckets == FAIL_AT_BUCKET and fail == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        loaded.update((name, float(tensor.sum())) for name, tensor in weights)

    receiver = BucketedWeightReceiver(zmq_handle=address, device=torch.device("cpu"), use_shm=True)
    try:
        receiver.receive_weights(on_bucket_received=on_bucket)
    except Exception as error:  # noqa: BLE001  (the point: which error, reported to the parent)
        # kit: on the shared-memory path the receiver's cleanup re-raises a callback's error as "BufferError: cannot
        # close exported pointers exist" (bucketed_weight_transfer.py:339-341, the failed bucket's views still
        # alive): the chain, as the worker's log shows it.
        chain = [error, *([error.__context__] if error.__context__ else [])]
        results.put(" <- ".join(f"{type(e).__name__}: {e}" for e in chain))
        time.sleep(3 * BOUND_S)
    else:
        results.put(loaded)


def _sender(address: str, ack_timeout_s: float, results: multiprocessing.Queue) -> None:
    """The trainer rank's side: send the weights, report how it ended."""
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

    _use_cpu_platform()
    # Unpatched 0.9.1's sender has no timeout to set: it is built as it is there, and blocks.
    bound = (
        {"ack_timeout_s": ack_timeout_s}
        if "ack_timeout_s" in inspect.signature(BucketedWeightSender).parameters
        else {}
    )
    sender = BucketedWeightSender(zmq_handle=address, bucket_size_mb=BUCKET_MB, use_shm=True, **bound)
    try:
        asyncio.run(sender.async_send_weights(iter(_weights())))
    except Exception as error:  # noqa: BLE001
        results.put(f"{type(error).__name__}: {error}")
    else:
        results.put("returned")


def _transfer(fail: str | None, ack_timeout_s: float = ACK_TIMEOUT_S) -> tuple[str, float, Any, int | None]:
    """Run one transfer (``fail``: "raise", "die", or None for a receiver that works; "absent": none at all) with the
    sender's ACK timeout ``ack_timeout_s`` where it has one.

    Returns the sender's outcome, the seconds it took, the receiver's outcome and its exit code. When the sender is
    still blocked after BOUND_S, kills both and fails with the symptom of the bug.
    """
    import verl.workers.rollout.vllm_rollout.bucketed_weight_transfer  # noqa: F401  (imported once, before the forks)

    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        address = f"ipc://{Path(tmp) / 'weights.sock'}"
        sent, received = context.Queue(), context.Queue()
        receiver = None
        if fail != "absent":
            receiver = context.Process(target=_receiver, args=(address, fail, received), daemon=True)
            receiver.start()
        start = time.monotonic()
        sender = context.Process(target=_sender, args=(address, ack_timeout_s, sent), daemon=True)
        sender.start()
        sender.join(BOUND_S)
        waited = time.monotonic() - start
        if sender.is_alive():
            sender.kill()
            state = "none connected" if receiver is None else f"exit code {receiver.exitcode}"
            if receiver is not None:
                receiver.kill()
            raise AssertionError(
                f"the weight sender is still blocked {waited:.0f} s into a transfer whose receiver was told to "
                f"{fail} on bucket {FAIL_AT_BUCKET} (receiver: {state}): it waits for an ACK for ever"
            )
        outcome = sent.get(timeout=5)
        receiver_outcome = received.get(timeout=5) if receiver is not None and fail != "die" else None
        if receiver is not None:
            receiver.join(0.5 if fail == "raise" else 5)
            if receiver.is_alive():
                receiver.kill()
        return outcome, waited, receiver_outcome, None if receiver is None else receiver.exitcode


def check_receiver_raising_fails_the_sender() -> None:
    """The receiver raises while loading bucket 2: the sender must fail at once with the receiver's error.

    The sender's timeout is far beyond BOUND_S here: failing within the bound shows that the error ACK, not the
    timeout, ended the wait.
    """
    outcome, waited, receiver_outcome, _ = _transfer("raise", ack_timeout_s=10 * BOUND_S)
    assert "RuntimeError: simulated load_weights failure" in receiver_outcome, receiver_outcome
    assert outcome.startswith("RuntimeError: bucketed weight transfer: the rollout worker at ipc://"), outcome
    assert f"failed on bucket {FAIL_AT_BUCKET}: RuntimeError: simulated load_weights failure" in outcome, outcome
    print(f"the sender failed {waited:.2f} s after the start: {outcome}")


def check_receiver_dying_fails_the_sender() -> None:
    """The receiver's process is SIGKILLed while loading bucket 2: the sender must time out with a clear error."""
    outcome, waited, _, exitcode = _transfer("die")
    assert exitcode == -signal.SIGKILL, f"the receiver did not die as planned: exit code {exitcode}"
    assert outcome.startswith("TimeoutError: bucketed weight transfer: the rollout worker at ipc://"), outcome
    expected = f"did not acknowledge bucket {FAIL_AT_BUCKET} within {ACK_TIMEOUT_S:g} s ({CONFIG_KEY})"
    assert expected in outcome, outcome
    assert ACK_TIMEOUT_S <= waited < ACK_TIMEOUT_S + 5, f"the sender failed after {waited:.1f} s"
    print(f"the sender failed {waited:.2f} s after the start: {outcome}")


def test_patched_receiver_raising_fails_the_sender() -> None:
    expect_success(__file__, "check_receiver_raising_fails_the_sender", timeout=120)


def test_patched_receiver_dying_fails_the_sender() -> None:
    expect_success(__file__, "check_receiver_dying_fails_the_sender", timeout=120)


def test_patched_absent_receiver_fails_the_sender() -> None:
    expect_success(__file__, "check_absent_receiver_fails_the_sender", timeout=120)


def test_patched_transfer_completes() -> None:
    expect_success(__file__, "check_transfer_completes", timeout=120)


def check_absent_receiver_fails_the_sender() -> None:
    """No receiver ever connects (the vLLM worker died before its RPC ran): the first send times out."""
    outcome, waited, _, _ = _transfer("absent")
    expected = f"did not take the buffer handshake (no receiver connected) within {ACK_TIMEOUT_S:g} s"
    assert outcome.startswith("TimeoutError: ") and expected in outcome, outcome
    assert waited < ACK_TIMEOUT_S + 5, f"the sender failed after {waited:.1f} s"


def check_transfer_completes() -> None:
    """The normal path is unchanged: every weight arrives, in three buckets, and both sides return."""
    outcome, waited, loaded, exitcode = _transfer(None)
    assert outcome == "returned" and exitcode == 0, (outcome, exitcode)
    assert loaded == {f"layer{i}.weight": float(i * NUMEL) for i in range(WEIGHTS)}, loaded
    assert waited < BOUND_S


def test_unpatched_receiver_raising_hangs_the_sender(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_receiver_raising_fails_the_sender", match="the weight sender is still blocked", timeout=120
    )


def test_unpatched_receiver_dying_hangs_the_sender(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_receiver_dying_fails_the_sender", match="the weight sender is still blocked", timeout=120
    )


# ------------------------------------------------------------------------------------------- the configuration key


def test_patched_ack_timeout_config() -> None:
    """The key exists with its default in verl's rollout config, and nonsense is refused when the config is built."""
    import verl
    import yaml
    from verl.workers.config import CheckpointEngineConfig

    rollout_yaml = Path(verl.__file__).parent / "trainer/config/rollout/rollout.yaml"
    assert yaml.safe_load(rollout_yaml.read_text())["checkpoint_engine"]["update_weights_ack_timeout_seconds"] == 300.0
    assert CheckpointEngineConfig().update_weights_ack_timeout_seconds == 300.0
    assert CheckpointEngineConfig(update_weights_ack_timeout_seconds=5).update_weights_ack_timeout_seconds == 5
    for bad in (0, -1.0, float("inf"), float("nan"), "30"):
        with pytest.raises(ValueError, match="update_weights_ack_timeout_seconds must be a positive, finite"):
            CheckpointEngineConfig(update_weights_ack_timeout_seconds=bad)


def test_patched_server_adapter_passes_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ServerAdapter.update_weights builds its sender with the configured timeout (vllm_rollout.py:236)."""
    from verl.workers.config import CheckpointEngineConfig
    from verl.workers.rollout.vllm_rollout import vllm_rollout

    built: list[dict[str, Any]] = []

    class RecordingSender:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)

        async def async_send_weights(self, weights: Any) -> None:
            list(weights)

    async def no_server(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(vllm_rollout, "BucketedWeightSender", RecordingSender)
    adapter = vllm_rollout.ServerAdapter.__new__(vllm_rollout.ServerAdapter)
    adapter.config = type(
        "Config", (), {"checkpoint_engine": CheckpointEngineConfig(update_weights_ack_timeout_seconds=7)}
    )
    adapter.zmq_handle, adapter.use_shm, adapter._has_server, adapter.replica_rank = "ipc:///x", True, False, 1
    adapter._execute_method = no_server
    asyncio.run(adapter.update_weights(iter(_weights())))
    assert built and built[0]["ack_timeout_s"] == 7, built
