"""The smoke's process supervisor: children die with the pipeline, even when it is SIGKILLed (what no ``finally`` and
no shell trap can catch), through prctl(PR_SET_PDEATHSIG) and through the watchdog fallback; a timed-out stage
takes its whole process group down; the real sandbox (server and workers) goes when its parent goes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.smoke import supervisor
from recipes.smoke.supervisor import StageError, run_logged

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgrp) of every process, from /proc/<pid>/stat."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":  # a zombie is dead, only not yet reaped
            table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def _group(pgrp: int) -> set[int]:
    return {pid for pid, (_, group) in _processes().items() if group == pgrp}


def _descendants(root: int) -> set[int]:
    table = _processes()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def _wait_gone(pids: set[int], timeout: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive &= set(_processes())
    return alive


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()[:120].replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{pid} (gone)"


def _kill_left(pids: set[int]) -> None:
    """A failing test must not leave its sleepers or a sandbox behind."""
    for pid in pids & set(_processes()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _parent(code: str, *args: str) -> tuple[subprocess.Popen, int]:
    """A stand-in pipeline running ``code``; it prints the pid of what it started."""
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
    )
    line = parent.stdout.readline()
    if not line.strip().isdigit():
        parent.kill()
        raise AssertionError(f"the stand-in pipeline failed: {line}{parent.communicate()[1]}")
    return parent, int(line)


TIED_SLEEPER = """
import sys, time
from recipes.smoke.supervisor import popen_tied
proc = popen_tied([sys.executable, "-c", "import time; time.sleep(300)"], use_prctl=sys.argv[1] == "prctl")
print(proc.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("mechanism", ["prctl", "watchdog"])
def test_a_tied_child_dies_when_the_pipeline_is_killed(mechanism: str) -> None:
    if mechanism == "prctl" and supervisor._prctl() is None:
        pytest.skip("no prctl here")
    parent, leader = _parent(TIED_SLEEPER, mechanism)
    deadline = time.monotonic() + 10
    while len(members := _group(leader)) < (2 if mechanism == "watchdog" else 1) and time.monotonic() < deadline:
        time.sleep(0.1)  # the watchdog starts the sleeper itself
    assert leader in members and parent.pid not in members, "the child must lead a process group of its own"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    left = _wait_gone(members)
    _kill_left(left)
    assert left == set(), f"{mechanism}: the children outlived a SIGKILLed pipeline"


def test_watchdog_passes_the_exit_status_through() -> None:
    proc = supervisor.popen_tied([sys.executable, "-c", "raise SystemExit(7)"], use_prctl=False)
    assert proc.wait(timeout=30) == 7
    proc = supervisor.popen_tied([sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"], use_prctl=False)
    assert proc.wait(timeout=30) == 128 + 15


def test_a_timed_out_stage_takes_its_process_group_down(tmp_path: Path) -> None:
    code = "import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); time.sleep(300)"
    log = tmp_path / "stage.log"
    with pytest.raises(StageError, match="stage: timed out after 2 s"):
        run_logged([sys.executable, "-c", code, *SLEEPER], log, kit_env(), timeout=2, label="stage")
    grandchild = int(log.read_text().splitlines()[1])
    assert _wait_gone({grandchild}, timeout=15) == set()


SANDBOX_PARENT = """
import sys, time
from pathlib import Path
from recipes.smoke.sandbox_service import SandboxService
from recipes.smoke.supervisor import kit_env
root = Path(sys.argv[1])
service = SandboxService(root / "sandbox.log", root / "sandbox.pid", kit_env())
service.start()
print(service.proc.pid, flush=True)
time.sleep(300)
"""


def test_the_sandbox_and_its_workers_die_with_a_killed_pipeline(tmp_path: Path) -> None:
    """The cleanup scripts/smoke.sh's trap used to do, now without any shell: SIGKILL the pipeline."""
    parent, server = _parent(SANDBOX_PARENT, str(tmp_path))
    assert (tmp_path / "sandbox.pid").read_text().strip() == str(server)
    tree = {server} | _descendants(server)
    assert len(tree) > 1, "the sandbox runs worker processes"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    left = _wait_gone(tree)
    names = [_cmdline(pid) for pid in left]
    _kill_left(left)
    assert left == set(), f"left behind: {names}"


def test_kit_env_puts_the_kit_first_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/x", str(REPO_ROOT), "/y"]))
    env = supervisor.kit_env(extra_paths=["/z"], FOO="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO_ROOT), "/x", "/y", "/z"]
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0" and env["FOO"] == "1"
