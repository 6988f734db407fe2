"""``serve --keep-alive``'s supervisor (sandbox/keepalive.py) with stand-in children: restart, crash loop, a first
start that never answers, exit 0. The real server under it: ``tests/faults/test_sandbox_killed_mid_step.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandbox.keepalive import Supervisor, child_argv, describe_exit


def _child(code: str) -> list[str]:
    """A child that lives 0.6 s (so the supervisor asks ``ready`` once, after its 0.5 s wait), then runs ``code``."""
    return [sys.executable, "-c", f"import time\ntime.sleep(0.6)\n{code}"]


def test_a_crash_loop_gives_up(capsys: pytest.CaptureFixture[str]) -> None:
    sup = Supervisor(_child("raise SystemExit(3)"), lambda: True, backoff_s=0.01, max_deaths=3, window_s=60)
    assert sup.run() == 1 and sup.restarts == 3
    err = capsys.readouterr().err
    assert err.count("exit status 3; restarting in 0.01 s") == 3
    assert "4 deaths within 60 s: crash loop, giving up" in err


def test_a_death_outside_the_window_restarts(tmp_path: Path) -> None:
    """Deaths spread out (window 0 s) never add up to a crash loop; the child stops itself with exit 0 at run 4."""
    count = tmp_path / "n"
    code = f"import pathlib,os,signal; p=pathlib.Path({str(count)!r}); n=len(p.read_text()) if p.exists() else 0\n"
    code += "p.write_text('x'*(n+1))\nraise SystemExit(0) if n == 3 else os.kill(os.getpid(), signal.SIGKILL)"
    sup = Supervisor(_child(code), lambda: True, backoff_s=0.01, max_deaths=1, window_s=0)
    assert sup.run() == 0 and sup.restarts == 3 and count.read_text() == "xxxx"


def test_a_first_start_that_never_answers_is_not_retried(capsys: pytest.CaptureFixture[str]) -> None:
    sup = Supervisor(_child("raise SystemExit(2)"), lambda: False, backoff_s=0.01)
    assert sup.run() == 2 and sup.restarts == 0
    assert "exit status 2 before it ever answered: not restarting" in capsys.readouterr().err


def test_a_first_start_killed_before_the_ping_saw_it_is_restarted(tmp_path: Path) -> None:
    """The readiness ping runs every 0.5 s: a server SIGKILLed right after it served its first request looked like a
    start that never answered, and was not restarted (seen in test_multinode under load)."""
    count = tmp_path / "starts"
    code = f"import pathlib,os,signal; p=pathlib.Path({str(count)!r}); n=len(p.read_text()) if p.exists() else 0\n"
    code += "p.write_text('x'*(n+1))\nraise SystemExit(0) if n else os.kill(os.getpid(), signal.SIGKILL)"
    sup = Supervisor(_child(code), lambda: False, backoff_s=0.01)
    assert sup.run() == 0 and sup.restarts == 1 and count.read_text() == "xx"


def test_child_command_and_exit_wording() -> None:
    assert child_argv(["serve", "--keep-alive", "--port", "1"]) == [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--port",
        "1",
    ]
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(1) == "exit status 1"
