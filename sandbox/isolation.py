"""How workers are launched: inside bubblewrap when it can run, else as plain processes (the fallback).

bwrap mode: each worker (the warm interpreter itself) runs in ``bwrap`` with a read-only root, private /tmp and
/dev, fresh /proc, no network, its own pid/ipc/uts namespaces, die-with-parent; /root and /home (and any other
directory the sandbox uid could not traverse on the way to the interpreter) are hidden behind empty tmpfs mounts,
with only the interpreter's own directories bound back. Requests then fork inside that sandbox, so bwrap's
~10 ms start-up is paid per worker, not per request.

Fallback ("none"): rlimits, a new session, a private temp dir, and, when the server is root, a per-request network
namespace and a uid drop. It exists for unprivileged containers where user namespaces are off.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.settings import SandboxSettings

WORKER_SCRIPT = Path(__file__).with_name("worker_main.py")
# Covered with an empty tmpfs in every sandbox. /tmp is here too (a private /tmp): an interpreter or venv that
# lives under /tmp (a CI checkout, say) is then bound back read-only like one under /root.
ALWAYS_HIDDEN = ("/root", "/home", "/tmp")
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


@dataclass
class IsolationPlan:
    """The decision taken at start-up, announced in the log, /health and /metrics."""

    mode: str  # "bwrap" | "none"
    reason: str
    prefix: list[str] = field(default_factory=list)  # argv before the python command
    tmp_root: str = "/tmp"  # where request dirs go, as the worker sees it

    @property
    def in_bwrap(self) -> bool:
        return self.mode == "bwrap"


def interpreter_paths(python: str) -> list[str]:
    """Directories the interpreter must read (prefixes, sys.path, the binary's real location)."""
    probe = (
        "import json, os, sys; p = {sys.prefix, sys.base_prefix, sys.exec_prefix, "
        "os.path.dirname(os.path.realpath(sys.executable))}; p.update(x for x in sys.path if x and os.path.isdir(x));"
        "print(json.dumps(sorted(os.path.realpath(x) for x in p)))"
    )
    out = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def _world_traversable(path: str) -> bool:
    try:
        return os.stat(path).st_mode & 0o005 == 0o005
    except OSError:
        return False


def hidden_roots(needed: list[str]) -> list[str]:
    """Top-most directories to cover with tmpfs: /root, /home, /tmp and any ancestor the sandbox uid cannot traverse."""
    hidden: set[str] = {d for d in ALWAYS_HIDDEN if os.path.isdir(d)}
    for path in needed:
        parts = Path(path).parts
        for depth in range(2, len(parts)):
            ancestor = str(Path(*parts[:depth]))
            if not _world_traversable(ancestor):
                hidden.add(ancestor)
                break
    tops = sorted(hidden)
    return [h for h in tops if not any(h != o and h.startswith(o.rstrip("/") + "/") for o in tops)]


def rebind_args(needed: list[str]) -> list[str]:
    """bwrap arguments that hide the hidden roots and bind back only what the interpreter needs."""
    args: list[str] = []
    for hidden in hidden_roots(needed):
        args += ["--perms", "0755", "--tmpfs", hidden]
        inside = sorted(p for p in needed if p.startswith(hidden.rstrip("/") + "/"))
        bound: list[str] = []
        created: set[str] = set()
        for path in inside:
            if any(path.startswith(b.rstrip("/") + "/") for b in bound):
                continue
            rel_parts = Path(path).relative_to(hidden).parts
            for depth in range(1, len(rel_parts)):
                directory = str(Path(hidden, *rel_parts[:depth]))
                if directory not in created:
                    created.add(directory)
                    args += ["--perms", "0755", "--dir", directory]
            args += ["--ro-bind", path, path]
            bound.append(path)
    return args


def bwrap_prefix(bwrap: str, needed: list[str]) -> list[str]:
    args = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        *rebind_args(needed),
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
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
    if requested != "none":
        if not settings.bwrap_path:
            reason = "bwrap not found on PATH (apt-get install bubblewrap)"
        else:
            needed = interpreter_paths(settings.python) + [str(WORKER_SCRIPT.parent.resolve())]
            prefix = bwrap_prefix(settings.bwrap_path, needed)
            ok, reason = _bwrap_works(prefix, settings.python)
            if ok:
                return IsolationPlan("bwrap", reason, prefix, "/tmp")
        if requested == "bwrap":
            raise RuntimeError(f"--isolation bwrap requested but unusable: {reason}")
    else:
        reason = "isolation 'none' requested"
    tmp_root = tempfile.mkdtemp(prefix="retool-sandbox-")
    os.chmod(tmp_root, 0o711)  # sandbox uids may pass through to their own request dirs, not list them
    return IsolationPlan("none", f"fallback (rlimits + own session + private temp dir): {reason}", [], tmp_root)
