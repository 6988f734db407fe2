"""How the sandbox worker ends a run: wait for its main process under the wall timeout, SIGKILL everything the run
left, and reap until the worker has no child at all.

Stdlib only and loaded by ``worker_main.py`` by path, like worker_os.py (sandbox/isolation.py mounts it beside the
worker inside bubblewrap). A module of its own so the worker stays one screen of request handling (issue 22 item 6:
``worker_main.py`` had grown past 450 lines).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time


def children_of_self() -> list[int]:
    """Direct children (the worker is a subreaper, so orphaned descendants land here too)."""
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        return pids
    except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: scan the process table
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                            pids.append(int(entry))
        return pids


def wait_main(pid: int, timeout: float) -> tuple[str, int | None]:
    """Wait for the main child (leaving it a zombie so its pid and process group stay reserved)."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], max(timeout, 0.0))
        if not ready:
            # Give the program a moment to flush what it printed (its SIGTERM handler does), then kill.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            select.select([pidfd], [], [], 0.05)
            return "TimeLimitExceeded", None
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        if info.si_code == os.CLD_EXITED:
            return "Finished", info.si_status
        return "Finished", -info.si_status
    finally:
        os.close(pidfd)


def signal_all(in_bwrap: bool, leader: int | None, leader_reaped: bool) -> None:
    """One SIGKILL pass over everything the request may have left running."""
    if in_bwrap:
        # Our own pid namespace: every process but bwrap's init and us belongs to this request.
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    if leader is not None and not leader_reaped:  # while unreaped, its pid (= its group id) can't be reused
        for target in (-leader, leader):
            with contextlib.suppress(OSError):
                os.kill(target, signal.SIGKILL)
    for child in children_of_self():
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def reap_all(in_bwrap: bool, leader: int | None) -> bool:
    """Kill and reap until we have no child at all; False if something survived 3 s of this.

    The worker is a child subreaper, so every descendant is either below a live process or re-parented to us:
    when ``waitpid`` reports no children, nothing of the request is left.
    """
    deadline = time.monotonic() + 3.0
    leader_reaped = False
    while True:
        signal_all(in_bwrap, leader, leader_reaped)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                break
            leader_reaped = leader_reaped or pid == leader
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
