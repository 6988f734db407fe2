"""A real full disk for checkpoint tests: a small tmpfs in a user + mount namespace (``unshare -rm``, no root), the
check run inside it, and a ballast file that takes the free space as another writer on a shared disk does.

Why a module: both stacks' disk-full patches (0.6.1's 0021, tests/patches/test_ppo_checkpoint_disk_full.py; 0.9.1's
0008, tests/stack091/test_v1_checkpoint_disk_full_091.py) fill the same kind of disk; one copy of how.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kit_testing import kit_env

TMPFS_SIZE = "1m"


def mount_command(size: str, mountpoint: str, then: list[str]) -> list[str]:
    """``then`` in a new user + mount namespace with a ``size`` tmpfs over ``mountpoint`` (gone when it exits)."""
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, "sh", size, mountpoint, *then]


@functools.cache
def tmpfs_unavailable() -> str | None:
    """Why this machine cannot mount a small tmpfs for a test (user namespaces off, no unshare); None if it can."""
    with tempfile.TemporaryDirectory() as mountpoint:
        command = mount_command("64k", mountpoint, ["true"])
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"`{shlex.join(command)}` failed: {error}"
    if proc.returncode != 0:
        return f"`{shlex.join(command)}` failed (rc {proc.returncode}): {(proc.stdout + proc.stderr).strip()}"
    return None


def require_tmpfs() -> None:
    reason = tmpfs_unavailable()
    if reason is not None:
        pytest.skip(f"needs a small real filesystem to fill: {reason}")


def on_tmpfs(test_file: str, func: str) -> None:
    """Run ``func(mountpoint)`` of ``test_file`` in a child that has a fresh ``TMPFS_SIZE`` tmpfs there; fail with its
    output. The child inherits this process's PYTHONPATH, so it imports the same verl (patched or, under the
    ``unpatched_verl`` fixture, unpatched)."""
    with tempfile.TemporaryDirectory() as mountpoint:
        code = f"import runpy, sys; runpy.run_path({test_file!r})[{func!r}](sys.argv[1])"
        command = mount_command(TMPFS_SIZE, mountpoint, [sys.executable, "-c", code, mountpoint])
        proc = subprocess.run(command, env=kit_env(), capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{func} on a {TMPFS_SIZE} tmpfs failed (rc {proc.returncode}):\n{out[-6000:]}"


def allocated(folder: Path) -> int:
    """The space ``folder``'s files take on their filesystem (``du``), what a checkpoint like it needs."""
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(folder) for f in files)


def fill(mountpoint: Path, leave: int) -> None:
    """Another writer takes the filesystem's free space, all but about ``leave`` bytes."""
    with open(mountpoint / "ballast", "ab") as ballast:
        ballast.write(b"\0" * max(shutil.disk_usage(mountpoint).free - leave, 0))
