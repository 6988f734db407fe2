"""Fixtures for the sandbox tests: real servers in subprocesses on loopback, stopped afterwards.

The servers run ``python -m sandbox serve`` from this checkout, so the tests exercise exactly what the console
script runs. Isolation is parametrised: ``bwrap`` (skipped, with the reason, where bubblewrap cannot run) and
``none`` (the fallback). ``KIT_REQUIRE_BWRAP=1`` (set by .ci/run) turns that skip into a failure, so a CI host
whose bwrap cannot create namespaces does not pass with no isolation checked (issue 14 item 12).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from kit_testing import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUEST_PROCESS_NAME = "sbx-req"  # sandbox.worker_main.REQUEST_PROCESS_NAME
REQUIRE_BWRAP_ENV = "KIT_REQUIRE_BWRAP"


def bwrap_skip_reason() -> str | None:
    """None if bubblewrap can run a sandbox here, else why not."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "bwrap not installed (apt-get install bubblewrap)"
    proc = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "true"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return f"bwrap cannot create namespaces here: {proc.stderr.strip()[:200]}"
    return None


def bwrap_unavailable(reason: str) -> None:
    """Skip a bwrap case with ``reason``, or fail it when the environment requires working bwrap."""
    if os.environ.get(REQUIRE_BWRAP_ENV, "").strip() == "1":
        pytest.fail(f"{REQUIRE_BWRAP_ENV}=1 but the bwrap sandbox cannot be tested here: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class SandboxServer:
    """A running ``retool-sandbox serve``."""

    proc: subprocess.Popen
    port: int
    isolation: str
    log_path: Path
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/run_code"

    def run(self, code: str, timeout_s: float = 60, **fields: Any) -> tuple[int, dict[str, Any], float]:
        """POST /run_code; returns (HTTP status, body, seconds)."""
        body = {"code": code, "language": "python", **fields}
        started = time.monotonic()
        resp = requests.post(self.url, json=body, timeout=timeout_s)
        return resp.status_code, resp.json(), time.monotonic() - started

    def get_health(self) -> dict[str, Any]:
        resp = requests.get(f"{self.base}/health", timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextlib.contextmanager
def start_server(tmp_dir: Path, *args: str, isolation: str = "auto", workers: int = 2) -> Iterator[SandboxServer]:
    port = free_port()
    log_path = tmp_dir / f"server-{port}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p)
    cmd = [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--isolation",
        isolation,
        *args,
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = SandboxServer(proc, port, isolation, log_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{server.base}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy after 120 s:\n{server.log()}")
            time.sleep(0.2)
        server.health = server.get_health()
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session", params=["bwrap", "none"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    """A warm server per isolation mode, shared by the API and battery tests."""
    if request.param == "bwrap" and (reason := bwrap_skip_reason()):
        bwrap_unavailable(reason)
    with start_server(tmp_path_factory.mktemp(f"sbx-{request.param}"), isolation=request.param) as srv:
        assert srv.health["isolation"]["mode"] == request.param
        yield srv


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """Module-level helpers for test files (which must not import conftest under ``--import-mode=importlib``)."""
    return SimpleNamespace(
        start_server=start_server,
        bwrap_skip_reason=bwrap_skip_reason,
        bwrap_unavailable=bwrap_unavailable,
        request_processes=request_processes,
        run_dirs=run_dirs,
        wait_until_clean=wait_until_clean,
        worker_trees=worker_trees,
    )


# ---------------------------------------------------------------------------------------------------------------
# Leftover checks


def request_processes() -> list[int]:
    """Processes (zombies included) carrying the name every request child gets."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == REQUEST_PROCESS_NAME:
                    found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def worker_trees(server: SandboxServer) -> list[list[int]]:
    """Each worker of ``server`` (a child running worker_main.py, bwrap or not) with every process below it."""
    trees = []
    for pid in descendants(server.proc.pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == server.proc.pid and b"worker_main.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                trees.append([pid, *descendants(pid)])
    return trees


def run_dirs(server: SandboxServer) -> list[str]:
    """Request directories still present: in the fallback's temp root, and inside every worker's private /tmp."""
    found: list[str] = []
    roots = [Path(server.health["tmp_root"])] if server.health["isolation"]["mode"] == "none" else []
    roots += [Path(f"/proc/{pid}/root/tmp") for pid in descendants(server.proc.pid)]
    for root in roots:
        with contextlib.suppress(OSError):
            found += [str(p) for p in root.glob("**/run-*")]
    return sorted(set(found))


def wait_until_clean(server: SandboxServer, timeout: float = 10.0) -> None:
    """No request process and no request dir may remain (dying fork bombs get ``timeout`` to be reaped)."""
    deadline = time.monotonic() + timeout
    while True:
        procs, dirs = request_processes(), run_dirs(server)
        if not procs and not dirs:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: {len(procs)} request processes {procs[:10]}, dirs {dirs[:10]}")
        time.sleep(0.1)
