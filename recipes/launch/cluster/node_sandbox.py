"""One kit sandbox per node (``scripts/ray_cluster.sh head|worker --with-sandbox``), so a loopback
``RETOOL_SANDBOX_URL`` is right on every node.

Why per node: verl 0.6.1 places AgentLoopWorker i on node ``i % nnodes`` (``verl/experimental/agent_loop/
agent_loop.py`` L736-739, as :mod:`recipes.launch.sizing.capacity` cites), and the tool calls the sandbox from there;
with ``http://127.0.0.1:8080/run_code`` and a sandbox only on the head, every other node's calls hit nothing and the
model reads "sandbox unavailable" (issue 14, finding 1). One sandbox per node on the same loopback port makes the URL
right everywhere and keeps its HTTP API off the network.

The sandbox runs detached (its own session) with its log and pid file in a run directory on the node's local disk
(``/tmp``, not a shared home: every node keeps its own), and ``stop`` ends exactly the process group recorded there.
It runs as ``serve --keep-alive``: the recorded pid is a supervisor that restarts the server on the same port when
it is killed mid-run (issue 20 fault e; ``sandbox/keepalive.py``), and the group ``stop`` ends holds both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from recipes.launch.run_inputs.inputs import DEFAULT_SANDBOX_URL
from recipes.launch.supervision.process_group import kill_group

KIT_ROOT = Path(__file__).resolve().parents[3]
HOST = "127.0.0.1"
DEFAULT_PORT = urlsplit(DEFAULT_SANDBOX_URL).port or 8080
#: Where pid and log files go when --run-dir is not given (per user, node-local).
RUN_DIR_ENV = "KIT_RUN_DIR"
#: How long ``start`` waits for /health to say "ok" (warm workers import numpy/sympy first).
READY_TIMEOUT_S = 180.0


def default_run_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    chosen = environ.get(RUN_DIR_ENV, "").strip()
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"retool-kit-{os.getuid()}"


@dataclass(frozen=True)
class NodeSandbox:
    """The per-node sandbox on ``port``: its command, files and URL."""

    port: int
    run_dir: Path
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable

    @property
    def command(self) -> list[str]:
        # --keep-alive: a supervisor (the recorded pid) restarts a server that gets killed (sandbox/keepalive.py)
        return [
            self.python,
            "-m",
            "sandbox",
            "serve",
            "--keep-alive",
            "--host",
            HOST,
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"sandbox-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"sandbox-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/run_code"

    @property
    def health_url(self) -> str:
        return f"http://{HOST}:{self.port}/health"


def health(url: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The JSON of ``GET url`` (a /health URL), or None when nothing answers it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310  (http URL we built)
            body = json.loads(response.read() or b"{}")
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return body if isinstance(body, dict) else {}


def recorded_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` when that process still runs the kit's sandbox (a reused pid is not ours)."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if b"sandbox" in cmdline and b"serve" in cmdline else None


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    box: NodeSandbox,
    env: Mapping[str, str],
    say: Callable[[str], None],
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> None:
    """Start the sandbox detached and wait until its /health says ok; raises RuntimeError with the log's tail."""
    running = recorded_pid(box.pid_file)
    if running is not None:
        if (health(box.health_url) or {}).get("status") == "ok":
            say(f"sandbox already running on {HOST}:{box.port} (pid {running}, log {box.log_file}): kept")
            return
        raise RuntimeError(
            f"a sandbox (pid {running}) from {box.pid_file} runs but {box.health_url} does not answer ok: "
            "stop it with `scripts/ray_cluster.sh stop` first"
        )
    box.run_dir.mkdir(parents=True, exist_ok=True)
    with open(box.log_file, "ab") as log:
        proc = subprocess.Popen(
            box.command,
            cwd=KIT_ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this process; `stop` ends its process group by this id
        )
    box.pid_file.write_text(f"{proc.pid}\n")
    say(f"sandbox starting on {HOST}:{box.port} (pid {proc.pid}, log {box.log_file})")
    deadline = time.monotonic() + ready_timeout_s
    next_note = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            box.pid_file.unlink(missing_ok=True)
            raise RuntimeError(f"the sandbox exited with status {proc.returncode}:\n{_tail(box.log_file)}")
        if (health(box.health_url) or {}).get("status") == "ok":
            say(f"sandbox ready: RETOOL_SANDBOX_URL={box.url} on this node")
            return
        if time.monotonic() > deadline:
            kill_group(proc)
            box.pid_file.unlink(missing_ok=True)
            raise RuntimeError(
                f"the sandbox did not report ready within {ready_timeout_s:.0f} s (stopped):\n{_tail(box.log_file)}"
            )
        if time.monotonic() > next_note:
            say(f"waiting for the sandbox's workers ({ready_timeout_s - (deadline - time.monotonic()):.0f} s)")
            next_note += 10
        time.sleep(0.5)


def pid_files(run_dir: Path, ports: Sequence[int] | None = None) -> list[Path]:
    if ports is not None:
        return [run_dir / f"sandbox-{port}.pid" for port in ports if (run_dir / f"sandbox-{port}.pid").exists()]
    return sorted(run_dir.glob("sandbox-*.pid"))


def stop(run_dir: Path, say: Callable[[str], None], ports: Sequence[int] | None = None, dry_run: bool = False) -> int:
    """End the sandboxes recorded in ``run_dir`` (their process groups, by the recorded id); how many it ended."""
    ended = 0
    for pid_file in pid_files(run_dir, ports):
        pid = recorded_pid(pid_file)
        if pid is None:
            if not dry_run:
                pid_file.unlink(missing_ok=True)
            continue
        if dry_run:
            say(f"would stop the sandbox pid {pid} ({pid_file})")
            continue
        _end_group(pid)
        pid_file.unlink(missing_ok=True)
        say(f"sandbox pid {pid} stopped ({pid_file})")
        ended += 1
    return ended


def _end_group(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the sandbox's session (it and its workers), SIGKILL what is left after ``grace_s``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
