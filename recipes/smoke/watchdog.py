"""``python -m recipes.smoke.watchdog PARENT_PID -- CMD...``: run CMD and take its process group down when PARENT dies.

The fallback of :func:`recipes.smoke.supervisor.popen_tied` where ``prctl(PR_SET_PDEATHSIG)`` is unavailable (not
Linux, or no loadable libc). The supervisor starts this watchdog as the leader of a new process group; CMD runs in
that group. Every half second the watchdog checks that it still has its parent (a dead parent's children are
re-parented, so ``getppid()`` changes); when not, it sends SIGTERM to the whole group, then SIGKILL after a grace
period. Otherwise it exits with CMD's status (128 + N for a signal, like a shell). Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

POLL_S = 0.5
GRACE_S = 10.0


def _stop_group(child: subprocess.Popen) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group signal below must not end us before the child
    os.killpg(os.getpgrp(), signal.SIGTERM)
    try:
        child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # ends us too
    return 128 + signal.SIGTERM


def watch(parent: int, cmd: Sequence[str]) -> int:
    if os.getppid() != parent:
        return 128 + signal.SIGTERM  # the parent is already gone: start nothing
    child = subprocess.Popen(list(cmd))
    while True:
        try:
            code = child.wait(timeout=POLL_S)
            return 128 - code if code < 0 else code
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:
            return _stop_group(child)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(words) < 3 or words[1] != "--" or not words[0].isdigit():
        print("usage: python -m recipes.smoke.watchdog PARENT_PID -- CMD...", file=sys.stderr)
        return 2
    return watch(int(words[0]), words[2:])


if __name__ == "__main__":
    sys.exit(main())
