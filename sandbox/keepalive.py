"""``retool-sandbox serve --keep-alive``: a small parent that runs the server as its child and restarts it when it dies.

Why: a sandbox killed during RL (the OOM killer, an operator's ``kill -9``, a crash) used to stay dead for the rest of
the run, so every later tool call came back ``[sandbox unavailable: …]`` and the policy trained on a broken
interpreter. With ``--keep-alive`` the server comes back on the same port after :data:`BACKOFF_S`, and the tool's
client (``recipes/retool/sandbox_client.py``), which retries refused connections with backoff, reaches it again.

Rules:

* the child is ``python -m sandbox serve`` with the same options minus ``--keep-alive``, in the supervisor's process
  group (so ``killpg`` of the group, what ``scripts/ray_cluster.sh stop`` and the smoke do, ends both) and with
  ``PR_SET_PDEATHSIG`` (a ``kill -9`` of the supervisor does not leave a server nobody restarts);
* a child killed by a signal or exiting non-zero is restarted; one exiting 0 (it was stopped on purpose) ends the
  supervisor with 0;
* a first start that exits non-zero before ever answering ``/v1/ping`` is a configuration error (port in use, bad
  option): reported and not retried (one killed by a signal is restarted: it may have served before the ping saw it);
* more than :data:`MAX_DEATHS` deaths within :data:`WINDOW_S` is a crash loop: the supervisor gives up, says so,
  and exits 1;
* SIGTERM/SIGINT/SIGHUP stop the supervisor: the child gets SIGTERM (SIGKILL after :data:`STOP_GRACE_S`) and is not
  restarted;
* each child runs with ``TMPDIR`` set to a scratch folder of its own, removed once it is gone: a killed server cannot
  clean up its request folders (``sandbox/isolation.py`` and ``filesystem.py`` make them with ``tempfile``), and days
  of restarts would otherwise leave them in ``/tmp``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from types import FrameType

#: Seconds between a death and the restart (the port is free at once: the server binds with SO_REUSEADDR).
BACKOFF_S = 1.0
#: A crash loop: more than this many deaths within :data:`WINDOW_S` seconds.
MAX_DEATHS = 5
WINDOW_S = 60.0
#: How long a stopping child gets after SIGTERM before SIGKILL.
STOP_GRACE_S = 15.0
PREFIX = "retool-sandbox keep-alive:"


def say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def describe_exit(returncode: int) -> str:
    """``killed by SIGKILL`` / ``exit status 3`` (Popen reports death by signal N as ``-N``)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def ping_ready(host: str, port: int) -> Callable[[], bool]:
    """A readiness check for the child: ``GET /v1/ping`` answers 200 (the server binds before its workers start,
    and the app answers only once they are up, ``sandbox/cli.py`` ``_serve``)."""
    target = "[" + host + "]" if ":" in host else host
    url = f"http://{target}:{port}/v1/ping"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310  (loopback URL we built)
                return response.status == 200
        except (OSError, urllib.error.URLError, ValueError):
            return False

    return ready


def _die_with_parent() -> None:
    """preexec_fn of the child: SIGTERM it when the supervisor dies (the supervisor is single-threaded)."""
    from sandbox.worker_os import PR_SET_PDEATHSIG, _prctl

    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    """Runs ``argv`` and restarts it per the module's rules; :meth:`run` returns the supervisor's exit status."""

    def __init__(
        self,
        argv: Sequence[str],
        ready: Callable[[], bool],
        *,
        backoff_s: float = BACKOFF_S,
        max_deaths: int = MAX_DEATHS,
        window_s: float = WINDOW_S,
    ) -> None:
        self.argv, self.ready = list(argv), ready
        self.backoff_s, self.max_deaths, self.window_s = backoff_s, max_deaths, window_s
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.deaths: deque[float] = deque()
        self.restarts = 0

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            say(f"{signal.Signals(signum).name}: stopping the server (no restart)")
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def _watch(self, child: subprocess.Popen) -> tuple[int, bool]:
        """Wait for ``child`` to exit; ``(returncode, answered /v1/ping at least once)``."""
        was_ready = False
        while True:
            try:
                return child.wait(timeout=0.5), was_ready
            except subprocess.TimeoutExpired:
                pass
            if self.stopping:
                return self._stop_child(child), was_ready
            if not was_ready and self.ready():
                was_ready = True
                if self.restarts:
                    say(f"server back (pid {child.pid}, restart {self.restarts})")

    def _stop_child(self, child: subprocess.Popen) -> int:
        child.terminate()
        try:
            return child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()

    def _crash_loop(self, now: float) -> bool:
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > self.window_s:
            self.deaths.popleft()
        return len(self.deaths) > self.max_deaths

    def _decide(self, returncode: int, was_ready: bool) -> int | None:
        """After a death: the supervisor's exit status, or None to restart."""
        if self.stopping:
            return 0
        how = describe_exit(returncode)
        if returncode == 0:
            say(f"server (pid {self.child.pid if self.child else '?'}) exited with status 0: not restarting")
            return 0
        if not was_ready and self.restarts == 0 and returncode > 0:
            # a first start that exits on its own before answering is a configuration error (port in use, bad
            # option); one killed by a signal may have served already (the ping runs every 0.5 s): restart it
            say(f"server {how} before it ever answered: not restarting (see its messages above)")
            return returncode
        if self._crash_loop(time.monotonic()):
            say(
                f"server {how}; {len(self.deaths)} deaths within {self.window_s:g} s: crash loop, giving up "
                "(see the server's messages above)"
            )
            return 1
        say(f"server (pid {self.child.pid if self.child else '?'}) {how}; restarting in {self.backoff_s:g} s")
        return None

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            while True:
                scratch = tempfile.mkdtemp(prefix="retool-sandbox-keepalive-")
                os.chmod(scratch, 0o711)  # the sandbox uids pass through to their own request dirs, as in /tmp
                env = {**os.environ, "TMPDIR": scratch}
                try:
                    self.child = subprocess.Popen(self.argv, env=env, preexec_fn=_die_with_parent)  # noqa: PLW1509
                    returncode, was_ready = self._watch(self.child)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                status = self._decide(returncode, was_ready)
                if status is not None:
                    return status
                deadline = time.monotonic() + self.backoff_s
                while time.monotonic() < deadline and not self.stopping:
                    time.sleep(0.05)
                if self.stopping:
                    return 0
                self.restarts += 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def child_argv(argv: Sequence[str]) -> list[str]:
    """The server's own command: this interpreter, ``-m sandbox``, and ``argv`` without ``--keep-alive``."""
    return [sys.executable, "-m", "sandbox", *(a for a in argv if a != "--keep-alive")]


def run_keep_alive(argv: Sequence[str], host: str, port: int) -> int:
    """Entry point for ``serve --keep-alive`` (``argv``: the CLI's arguments, ``serve`` included)."""
    say(
        f"supervising the server on {host}:{port}: restart {BACKOFF_S:g} s after a death, "
        f"give up after more than {MAX_DEATHS} deaths within {WINDOW_S:g} s"
    )
    return Supervisor(child_argv(argv), ping_ready(host, port)).run()
