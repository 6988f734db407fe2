"""Ending a child's whole process group: the one way the launcher and the main job stop what a child started.

Why a module of its own, here: the launcher's restart supervisor (``restart.py``), its per-node sandbox
(``node_sandbox.py``) and the main job's stages (``recipes/smoke/supervisor.py``) all start children in a process
group of their own (``start_new_session=True``) that may outlive the child itself (a local Ray head started by the
trainer). The launcher is the lowest layer that needs it, and imports run downward (tests/test_import_graph.py).
Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to ``proc``'s whole process group, SIGKILL after ``grace_s`` to whatever of it is left.

    The group, not the leader, decides: the leader may be gone already (a trainer killed by a fault) while what it
    started (a local Ray head) still runs in its group."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
