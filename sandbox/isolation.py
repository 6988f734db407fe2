"""How workers are launched: inside bubblewrap when it can run, else as plain processes (the fallback).

bwrap mode: each worker (the warm interpreter itself) runs in ``bwrap`` on a root that holds only the filesystem
allowlist (:mod:`sandbox.filesystem`: system libraries, the interpreter's prefixes and the site-packages the preload
needs, a minimal ``/etc``), a private /tmp and /dev, a fresh /proc, no network, its own pid/ipc/uts namespaces,
die-with-parent; the root itself is read-only. Requests then fork inside that sandbox, so bwrap's ~10 ms start-up is
paid per worker, not per request.

Fallback ("none"): rlimits, a new session, a private temp dir, and, when the server is root, a per-request network
namespace and a uid drop. The filesystem allowlist is applied with Landlock when the kernel has it. It exists for
unprivileged containers where user namespaces are off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import worker_landlock
from sandbox.filesystem import (
    WORKER_DIR_INSIDE,
    Allowlist,
    build_allowlist,
    bwrap_mount_args,
    probe_interpreter,
    synthetic_etc,
)
from sandbox.settings import SandboxSettings

WORKER_SCRIPT = Path(__file__).with_name("worker_main.py")
LANDLOCK_HELPER = Path(__file__).with_name("worker_landlock.py")
#: Loaded by the worker by path: frames and system calls; what a request child does to itself; ending a run.
WORKER_HELPERS = tuple(
    Path(__file__).with_name(f"{name}.py") for name in ("worker_os", "worker_request", "worker_reap")
)
WORKER_FILES = (WORKER_SCRIPT, LANDLOCK_HELPER, *WORKER_HELPERS)
WORKER_CAPABILITIES = (
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_KILL",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_SETPCAP",
)
#: /health's names for what user code sees of the host's files.
FS_MOUNTS = "allowlist (bwrap root of read-only binds)"
FS_LANDLOCK = "allowlist (landlock: outside it nothing can be read or listed; names still answer stat)"
FS_HOST = "host (every file the run's uid can read)"


@dataclass
class IsolationPlan:
    """The decision taken at start-up, announced in the log, /health and /metrics."""

    mode: str  # "bwrap" | "none"
    reason: str
    prefix: list[str] = field(default_factory=list)  # argv before the python command
    tmp_root: str = "/tmp"  # where request dirs go, as the worker sees it
    worker_script: str = str(WORKER_SCRIPT)  # as the worker sees it
    allowlist: Allowlist = field(default_factory=Allowlist)
    filesystem: str = FS_HOST  # what the plan intends; the worker confirms it (worker_info["filesystem"])
    filesystem_reason: str = ""
    landlock_abi: int = 0
    owned_dirs: list[str] = field(default_factory=list)  # host dirs the server created and removes at stop

    @property
    def in_bwrap(self) -> bool:
        return self.mode == "bwrap"

    def cleanup(self) -> None:
        for path in self.owned_dirs:
            shutil.rmtree(path, ignore_errors=True)


def sandbox_ids(settings: SandboxSettings) -> tuple[list[int], list[int]]:
    """The uids/gids request code may run as: one per worker slot as root, else the server's own."""
    if os.geteuid() == 0:
        slots = range(settings.workers)
        return [settings.sandbox_uid - s for s in slots], [settings.sandbox_gid - s for s in slots]
    return [os.getuid()], [os.getgid()]


def bwrap_prefix(bwrap: str, allow: Allowlist, etc_dir: str) -> list[str]:
    args = [bwrap, *bwrap_mount_args(allow, etc_dir, WORKER_FILES), "--remount-ro", "/"]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        # Unprivileged bwrap needs a user namespace. As root we stay in the host's, so children can switch to the
        # sandbox uid (a fresh user namespace would map only uid 0).
        args.append("--unshare-user")
    else:
        # The worker keeps only what it needs: switching children's ids, chown/removing their files, killing them,
        # and dropping the bounding set. Children lose even these when they change uid.
        args += ["--cap-drop", "ALL"]
        for cap in WORKER_CAPABILITIES:
            args += ["--cap-add", cap]
    args += ["--die-with-parent", "--new-session", "--chdir", "/tmp", "--"]
    return args


def _bwrap_works(prefix: list[str], python: str) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            [*prefix, python, "-I", "-c", "import socket; print('ok')"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not start: {exc}"
    if proc.returncode == 0 and proc.stdout.strip() == "ok":
        return True, "bubblewrap works here"
    return False, f"bwrap failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}"


def plan_isolation(settings: SandboxSettings) -> IsolationPlan:
    """Resolve ``--isolation auto|bwrap|none``; ``bwrap`` that cannot run is an error, ``auto`` falls back."""
    requested = settings.isolation
    if requested not in ("auto", "bwrap", "none"):
        raise ValueError(f"unknown isolation {requested!r}")
    allow = build_allowlist(probe_interpreter(settings.python, settings.preload), settings.allow_paths, settings.python)
    if requested != "none":
        if not settings.bwrap_path:
            reason = "bwrap not found on PATH (apt-get install bubblewrap)"
        else:
            etc_dir = synthetic_etc(*sandbox_ids(settings))
            prefix = bwrap_prefix(settings.bwrap_path, allow, etc_dir)
            ok, reason = _bwrap_works(prefix, settings.python)
            if ok:
                return IsolationPlan(
                    "bwrap",
                    reason,
                    prefix,
                    "/tmp",
                    f"{WORKER_DIR_INSIDE}/{WORKER_SCRIPT.name}",
                    allow,
                    FS_MOUNTS,
                    "only the allowlist is mounted",
                    owned_dirs=[etc_dir],
                )
            shutil.rmtree(etc_dir, ignore_errors=True)
        if requested == "bwrap":
            raise RuntimeError(f"--isolation bwrap requested but unusable: {reason}")
    else:
        reason = "isolation 'none' requested"
    tmp_root = tempfile.mkdtemp(prefix="retool-sandbox-")
    os.chmod(tmp_root, 0o711)  # sandbox uids may pass through to their own request dirs, not list them
    abi = worker_landlock.abi_version()
    plan = IsolationPlan(
        "none",
        f"fallback (rlimits + own session + private temp dir): {reason}",
        [],
        tmp_root,
        allowlist=allow,
        landlock_abi=abi,
        owned_dirs=[tmp_root],
    )
    if abi >= 1:
        plan.filesystem, plan.filesystem_reason = FS_LANDLOCK, f"Landlock ABI {abi}"
    else:
        plan.filesystem_reason = "the kernel has no Landlock (Linux >= 5.13 with landlock in the LSM list)"
    return plan
