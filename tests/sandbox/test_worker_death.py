"""Workers killed from outside (OOM killer, an operator's ``kill -9``, a crash): the request a worker was running
gets a SandboxError and is not run again; a worker that dies while idle costs nobody's request, because the pool
finds it dead before handing it work (or retries on a fresh worker) and respawns it; the service answers again
within seconds, and /metrics counts the deaths."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from sandbox.executor import Executor
from sandbox.isolation import plan_isolation
from sandbox.metrics import Metrics
from sandbox.settings import SandboxSettings
from sandbox.worker_client import Job, Outcome, WorkerProcess

SLOW = "import time\ntime.sleep(4)\nprint('slept')"
RECOVERY_S = 30.0  # a fresh worker imports numpy/sympy/scipy; generous for a loaded 2-core CI host


@pytest.fixture(scope="module", params=["none", "bwrap"])
def fresh_server(request: pytest.FixtureRequest, helpers, tmp_path_factory: pytest.TempPathFactory):
    """A server of its own (its workers get killed), 2 warm workers."""
    if request.param == "bwrap" and (reason := helpers.bwrap_skip_reason()):
        helpers.bwrap_unavailable(reason)
    with helpers.start_server(tmp_path_factory.mktemp(f"death-{request.param}"), isolation=request.param) as srv:
        yield srv


def _kill_trees(trees: list[list[int]]) -> None:
    for tree in trees:
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _metric(server, name: str, default: float | None = None) -> float:
    text = requests.get(f"{server.base}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"retool_sandbox_{name} "):
            return float(line.split()[1])
    if default is not None:
        return default
    raise AssertionError(f"no metric {name} in:\n{text}")


def _wait_for(predicate, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def test_killing_all_workers_costs_only_the_running_request(fresh_server, helpers) -> None:
    """The reported bug: after ``kill -9`` of both worker trees while one runs ``sleep(4)``, the next ``print(3)``
    also failed ("sandbox worker died during execution", BrokenPipeError) because the dead idle worker was found
    dead only by sending it that request."""
    srv = fresh_server
    deaths_before = _metric(srv, "worker_deaths_total", default=0.0)  # read before the kill; checked after
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(slow=srv.run(SLOW, run_timeout=10)))
    thread.start()
    _wait_for(lambda: srv.get_health()["in_flight"] == 1 and helpers.request_processes(), 10, "sleep(4) running")
    trees = helpers.worker_trees(srv)
    assert len(trees) == 2, trees
    _kill_trees(trees)
    thread.join(30)

    _, body, seconds = result["slow"]
    assert body["status"] == "SandboxError" and "died during execution" in body["message"], body
    assert seconds < 4, f"{seconds:.1f} s: the started code must not be run again"

    code, body, seconds = srv.run("print(3)", run_timeout=10)
    assert code == 200 and body["status"] == "Success" and body["run_result"]["stdout"] == "3\n", body
    assert seconds < RECOVERY_S
    for _ in range(4):
        _, body, _ = srv.run("print(4)", run_timeout=10)
        assert body["status"] == "Success", body
    assert _metric(srv, "worker_deaths_total") - deaths_before == 2
    assert not {pid for tree in trees for pid in tree} & {pid for tree in helpers.worker_trees(srv) for pid in tree}
    helpers.wait_until_clean(srv)


def test_idle_workers_killed_are_respawned_before_any_request(fresh_server, helpers) -> None:
    """No traffic when the workers die: the pool notices by itself and has two fresh workers ready for the next
    burst, which all succeeds."""
    srv = fresh_server
    _wait_for(lambda: srv.get_health()["workers_ready"] == 2, RECOVERY_S, "both workers idle")
    deaths_before = _metric(srv, "worker_deaths_total", default=0.0)
    trees = helpers.worker_trees(srv)
    assert len(trees) == 2, trees
    _kill_trees(trees)
    killed = {tree[0] for tree in trees}

    def respawned() -> bool:
        return len({tree[0] for tree in helpers.worker_trees(srv)} - killed) == 2

    _wait_for(respawned, RECOVERY_S, "two fresh workers started with no request sent")
    _wait_for(lambda: srv.get_health()["workers_ready"] == 2, RECOVERY_S, "two fresh workers ready")
    assert _metric(srv, "worker_deaths_total") - deaths_before == 2

    results: list = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(srv.run(f"print({i})", run_timeout=10))) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(body["run_result"]["stdout"] for _, body, _ in results) == ["0\n", "1\n", "2\n", "3\n"], results


def _wait_state(pid: int, states: str) -> None:
    """Block (the event loop too, on purpose: nothing may notice the death first) until ``pid`` is in a state."""
    deadline = time.monotonic() + 10
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "Z"  # dead and already reaped (asyncio's child watcher thread waits for it)
        if state in states:
            return
        assert time.monotonic() < deadline, f"process {pid} never reached state {states}"
        time.sleep(0.005)


@pytest.mark.parametrize("death", ["before_the_send", "before_the_read"])
def test_a_worker_dying_at_the_hand_over_costs_a_retry(monkeypatch, death) -> None:
    """The race the liveness check cannot close: the worker passes it, then dies. Before the send, the send fails
    (EPIPE); after the send but before the worker read the request, the kernel resets the socket (ECONNRESET).
    Either way none of the code ran: the request runs on a fresh worker and succeeds, counted as one retry."""
    settings = SandboxSettings(workers=1, isolation="none", preload=())
    checked = WorkerProcess.alive
    doomed: list[int] = []

    def alive_then_gone(self: WorkerProcess) -> bool:
        ok = checked(self)
        if not doomed:  # the first worker handed a request; its replacement is left alone
            doomed.append(self.proc.pid)
            if death == "before_the_send":
                os.killpg(self.proc.pid, signal.SIGKILL)
                _wait_state(self.proc.pid, "Z")  # dead, its socket closed
            else:  # stopped in its recv: the request lands in its buffer unread, then it is killed
                os.kill(self.proc.pid, signal.SIGSTOP)
                _wait_state(self.proc.pid, "T")
                asyncio.get_running_loop().call_later(0.5, os.killpg, self.proc.pid, signal.SIGKILL)
        return ok

    async def scenario() -> tuple[Outcome, Metrics]:
        metrics = Metrics()
        executor = Executor(settings, plan_isolation(settings), metrics)
        await executor.start()
        try:
            monkeypatch.setattr(WorkerProcess, "alive", alive_then_gone)
            outcome = await executor.run(Job(code="print('ran once')", run_timeout=10, memory_limit_mb=512))
            return outcome, metrics
        finally:
            await executor.stop()

    outcome, metrics = asyncio.run(scenario())
    assert (outcome.status, outcome.return_code, outcome.stdout) == ("Finished", 0, "ran once\n"), outcome
    assert (metrics.retries, metrics.worker_deaths) == (1, 1)
