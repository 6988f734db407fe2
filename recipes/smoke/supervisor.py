"""Process supervision for the smoke run: the environment of its children, logged runs with a deadline, and children
that die with the pipeline.

Why a module of its own: the smoke starts long-lived processes (torchrun, a Ray driver, the code sandbox) that must
never outlive it. Every child gets its own process group (killed as a whole on timeout, failure or interrupt) and is
tied to the pipeline's life: ``PR_SET_PDEATHSIG`` (Linux, through ctypes in ``preexec_fn``) sends it SIGTERM when the
pipeline dies, even by SIGKILL, where no ``finally`` runs; without prctl, :mod:`recipes.smoke.watchdog` does the same
by polling. That replaces the last-resort cleanup ``scripts/smoke.sh`` used to keep in a trap.

Standard library only: the tests' helpers (``tests/kit_testing.py``) import :func:`kit_env` and :func:`free_port`
from here, also in subprocesses where only the standard library and the kit are importable.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

from recipes.launch.supervision.process_group import kill_group
from recipes.smoke.progress import Progress, StepClock, read_tail

KIT_ROOT = Path(__file__).resolve().parents[2]


def default_out(kind: str) -> Path:
    """A command's default ``--out``: ``build/<kind>/<date>-<time>`` in the kit, a new folder each run."""
    return KIT_ROOT / "build" / kind / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


#: prctl(2) option: the signal the calling process gets when its parent thread exits.
PR_SET_PDEATHSIG = 1
#: What a tied child gets when the pipeline dies: SIGTERM lets torchrun, Ray's driver and the sandbox stop their own
#: children (the sandbox's workers die with it: bwrap --die-with-parent, or their own PDEATHSIG).
DEATH_SIGNAL = signal.SIGTERM


class StageError(RuntimeError):
    """A stage failed; the message says why (and where its log is)."""


def say(message: str) -> None:
    print(f"[smoke] {message}", flush=True)


# ------------------------------------------------------------------------------------------- environment, ports


def kit_env(*, extra_paths: Sequence[str | os.PathLike[str]] = (), **extra: str) -> dict[str, str]:
    """The environment of a child: this one, the kit importable first on PYTHONPATH (``extra_paths`` last), and no
    torch_npu auto-load (helpers compute on the CPU; without CANN an auto-loaded torch_npu breaks ``import torch``).

    Trainer stages take the platform's own environment on top (``Smoke.trainer_env``), which decides that variable
    for itself.
    """
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    paths = [str(KIT_ROOT), *env.get("PYTHONPATH", "").split(os.pathsep), *(str(p) for p in extra_paths)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))  # in order, each once
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port on loopback that is free now (the OS picks it; a race with other processes is accepted)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (our own loopback sandbox)
        return response.read().decode()


# --------------------------------------------------------------------------------------- children tied to us


@cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux, no loadable libc): then the watchdog is used."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with(parent: int, prctl: Callable[..., int]) -> Callable[[], None]:
    """``preexec_fn``: runs in the child between fork and exec (the setting survives exec of a normal binary)."""

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: nobody would signal us later
            os.kill(os.getpid(), DEATH_SIGNAL)

    return arm


def popen_tied(
    cmd: Sequence[str],
    *,
    stdout: IO[Any] | int | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = KIT_ROOT,
    use_prctl: bool | None = None,
) -> subprocess.Popen:
    """Start ``cmd`` as the leader of a new process group that dies with this process.

    ``use_prctl`` None: prctl where available, else the watchdog (tests force either). With the watchdog the
    returned process is the watchdog, leader of the same group as ``cmd``: killing the group stops both.
    """
    prctl = _prctl() if use_prctl in (None, True) else None
    if use_prctl and prctl is None:
        raise OSError("prctl(PR_SET_PDEATHSIG) is not available here")
    argv, preexec = list(cmd), None
    if prctl is not None:
        preexec = _die_with(os.getpid(), prctl)
    else:
        argv = [sys.executable, "-m", "recipes.smoke.watchdog", str(os.getpid()), "--", *argv]
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        argv,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is not None else None,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=preexec,  # the pipeline starts no threads of its own: fork + a ctypes call is safe here
    )


@dataclass(frozen=True)
class Started:
    """A logged child and when it began: started ahead of its stage (the pipeline's head starts) or by the stage."""

    proc: subprocess.Popen
    at: float


def start_logged(cmd: Sequence[str], log: Path, env: dict[str, str]) -> Started:
    """Start ``cmd`` with its output to ``log`` (headed by the command line), tied to the pipeline's life."""
    log.parent.mkdir(parents=True, exist_ok=True)
    at = time.monotonic()
    with open(log, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        return Started(popen_tied(cmd, stdout=out, env=env), at)


def run_logged(
    cmd: Sequence[str],
    log: Path,
    env: dict[str, str],
    timeout: float,
    label: str,
    heartbeat_s: float = 20.0,
    progress: Progress | None = None,
) -> StepClock | None:
    """Run ``cmd`` with output to ``log``: :func:`start_logged`, then :func:`wait_logged`."""
    return wait_logged(start_logged(cmd, log, env), log, timeout, label, heartbeat_s, progress)


def wait_logged(
    started: Started,
    log: Path,
    timeout: float,
    label: str,
    heartbeat_s: float = 20.0,
    progress: Progress | None = None,
) -> StepClock | None:
    """Wait for a logged child, printing a progress line every ``heartbeat_s``: for a trainer (``progress``)
    ``step k/N``, seconds per step and an ETA, otherwise the elapsed time. Returns, for a trainer, when each of its
    steps showed (:class:`StepClock`: the first step's start-up, the gaps); None without one. It returns as the
    child exits (a wait, not a sleep between polls); the deadline counts from the child's start.

    The command's process group is killed on timeout or interrupt, so a hung trainer never outlives the stage.
    """
    proc, start = started.proc, started.at
    clock = StepClock(log, progress) if progress is not None else None
    try:
        next_beat = start + heartbeat_s
        while proc.poll() is None:
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if clock is not None:
                clock.poll(now - start)
            if proc.poll() is None and now - start > timeout:
                raise StageError(f"{label}: timed out after {timeout:.0f} s (log: {log})")
            if now >= next_beat:
                next_beat = now + heartbeat_s
                if progress is None:
                    say(f"  {label}: {now - start:.0f} s")
                else:
                    per_step = clock.seconds_per_step() if clock is not None else None
                    say(f"  {label}: {progress.describe(read_tail(log), now - start, per_step)}")
    finally:
        if proc.poll() is None:
            kill_group(proc)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise StageError(f"{label}: exit status {proc.returncode} (log: {log})\n{tail}")
    return clock


def exit_on_signals() -> None:
    """SIGTERM and SIGINT unwind the stack, so every ``finally`` stops its trainer's process group and the sandbox.
    SIGINT is re-armed: a background job of a non-interactive shell starts with it ignored."""

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
