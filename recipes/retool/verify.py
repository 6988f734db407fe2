"""Decide whether a predicted answer equals the ground truth: exact integer/rational fast paths, then math-verify.

AIME and DAPO-Math-17k answers are integers, so almost every call is decided by :func:`as_integer` in
microseconds. Only answers that are neither integers nor plain rationals go to math-verify, which runs in a small
pool of worker processes (:mod:`recipes.retool.mathverify_worker`) with a hard per-call time bound: safe from any
thread or event loop, and a stuck sympy simplification costs at most ``timeout_s`` before its worker is killed.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from recipes.retool.answer import as_integer, as_rational, clean_answer, compact

WORKER_SCRIPT = Path(__file__).resolve().parent / "mathverify_worker.py"
STARTUP_TIMEOUT_S = 120.0
"""Importing sympy + math-verify can take a while on a loaded node; this bounds only the (rare) worker start."""

DEFAULT_POOL_SIZE = int(os.environ.get("RETOOL_MATH_VERIFY_WORKERS", "2"))


@dataclass(frozen=True)
class Verdict:
    """Whether the answer is right, and which rule decided it (logged, handy when auditing rewards)."""

    correct: bool
    method: str


class _Worker:
    """One math-verify process, spoken to over pipes with a deadline on every answer."""

    def __init__(self) -> None:
        stderr = None if os.environ.get("RETOOL_MATH_VERIFY_DEBUG") else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        self._buffer = b""
        if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) is None:
            self.kill()
            raise RuntimeError("math-verify worker did not start (is math-verify installed?)")

    def _read_line(self, deadline: float) -> dict | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None  # the worker died
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def ask(self, gold: str, pred: str, timeout_s: float) -> dict | None:
        """The worker's answer, or None if it timed out or died (the caller must then :meth:`kill` it)."""
        request = json.dumps({"gold": gold, "pred": pred, "timeout": max(1, int(timeout_s) - 1)}) + "\n"
        try:
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        return self._read_line(time.monotonic() + timeout_s)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class MathVerifyPool:
    """Up to ``size`` lazily started workers shared by all threads of this process."""

    def __init__(self, size: int = DEFAULT_POOL_SIZE) -> None:
        self.size = max(1, size)
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()

    def _acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._count >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            return _Worker()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            if healthy:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def equivalent(self, gold: str, pred: str, timeout_s: float) -> bool | None:
        """math-verify's ``verify(parse(gold), parse(pred))``; None when it timed out or failed."""
        worker = self._acquire()
        answer = None
        try:
            answer = worker.ask(gold, pred, timeout_s)
        finally:
            self._release(worker, healthy=answer is not None)
        if answer is None or "error" in answer:
            return None
        return bool(answer.get("ok"))

    def warm_up(self) -> None:
        """Start one worker and run one verification (its lazy imports) now, e.g. before timing steady state."""
        self.equivalent("\\frac{1}{2}", "0.5", timeout_s=STARTUP_TIMEOUT_S)

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.kill()


_pool: MathVerifyPool | None = None
_pool_lock = threading.Lock()


def math_verify_pool() -> MathVerifyPool:
    """The process-wide pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = MathVerifyPool()
        return _pool


def _forget_pool_in_child() -> None:
    # A forked child (datasets.map, DataLoader workers) must not share the parent's pipes; it starts its own.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


def _close_pool() -> None:
    if _pool is not None:
        _pool.close()


os.register_at_fork(after_in_child=_forget_pool_in_child)
atexit.register(_close_pool)


def judge(pred: str | None, ground_truth: str, timeout_s: float = 5.0) -> Verdict:
    """Compare an extracted answer (``None``: none found) with the ground truth."""
    if pred is None:
        return Verdict(False, "no_answer")
    gold_int = as_integer(ground_truth)
    if gold_int is not None:
        pred_int = as_integer(pred)
        if pred_int is not None:
            return Verdict(pred_int == gold_int, "integer")
        pred_rational = as_rational(pred)
        if pred_rational is not None:
            return Verdict(pred_rational == gold_int, "rational")
        if not any(ch.isdigit() for ch in pred):
            return Verdict(False, "integer")  # no digits: not a way of writing this integer
    else:
        if compact(pred) == compact(ground_truth):
            return Verdict(True, "exact")
        gold_rational, pred_rational = as_rational(ground_truth), as_rational(pred)
        if gold_rational is not None and pred_rational is not None:
            return Verdict(gold_rational == pred_rational, "rational")
    if timeout_s <= 0:
        return Verdict(False, "math_verify_disabled")
    equal = math_verify_pool().equivalent(clean_answer(ground_truth), clean_answer(pred), timeout_s)
    if equal is None:
        return Verdict(False, "math_verify_failed")
    return Verdict(equal, "math_verify")
