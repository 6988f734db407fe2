"""What a request may see of the host's filesystem: an allowlist, never "the host minus some directories".

Issue 14 item 11: under bwrap with ``--ro-bind / /`` user code could list ``/`` and read every world-readable path
(datasets, model weights, checkpoints, the project tree, other users' files) and copy it into trajectories. The
allowlist is: the system's programs and libraries (``/usr`` and the ``/bin``, ``/lib*`` links or directories), the
few ``/etc`` files the dynamic loader and libc read, the interpreter's prefixes, the ``sys.path`` entries that hold
a module the warm worker pre-imports, the directories of every shared library it has mapped, and what the operator
adds with ``--allow-path``. Nothing else. The only writable place is the request's own run directory.

bwrap mode builds a root from exactly these (an empty tmpfs root, read-only binds, a synthetic ``/etc/passwd``);
the fallback applies the same list with Landlock (:mod:`sandbox.worker_landlock`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: System trees: programs a snippet may run (``subprocess.run(["sort"])``), the C library and its friends.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Host ``/etc`` entries the loader and libc read; the rest of ``/etc`` (users, keys, service configs) stays out.
ETC_FROM_HOST = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
#: Where the worker's own script is bound inside the bwrap root (the kit's tree itself is not visible there).
WORKER_DIR_INSIDE = "/opt/retool-sandbox"

_PROBE = r"""
import importlib, json, os, sys
loaded = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        loaded.append(name)
    except Exception:
        pass
files = [os.path.realpath(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            maps.add(os.path.dirname(parts[5].strip()))
print(json.dumps({
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}),
    "executable_dir": os.path.dirname(os.path.realpath(sys.executable)),
    "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
    "module_files": files,
    "mapped_dirs": sorted(maps),
    "importable": loaded,
}))
"""


@dataclass
class InterpreterFacts:
    """What the interpreter needs, as it reports it after importing the preload list on the host."""

    prefixes: list[str]
    executable_dir: str
    sys_path: list[str]
    module_files: list[str]
    mapped_dirs: list[str]
    importable: list[str]


def probe_interpreter(python: str, preload: Sequence[str]) -> InterpreterFacts:
    """Run ``python -I`` (as the workers run) with the preload imported, and ask it what it touched."""
    out = subprocess.run(
        [python, "-I", "-c", _PROBE, *preload], capture_output=True, text=True, check=True, timeout=300
    )
    return InterpreterFacts(**json.loads(out.stdout.strip().splitlines()[-1]))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def outermost(paths: Iterable[str]) -> list[str]:
    """Sorted, deduplicated, with every path inside another one dropped (a bind of the parent covers it)."""
    tops: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths}):
        if not any(_under(path, t) for t in tops):
            tops.append(path)
    return tops


@dataclass
class Allowlist:
    """Host paths a request may read, how ``/bin``-style links look inside, and what was deliberately left out."""

    read_only: list[str] = field(default_factory=list)  # outermost real paths, bound read-only
    symlinks: dict[str, str] = field(default_factory=dict)  # link inside -> its target (merged-/usr links)
    etc_files: list[str] = field(default_factory=list)  # host /etc entries kept
    left_out: list[str] = field(default_factory=list)  # sys.path entries nothing pre-imported lives in
    importable: list[str] = field(default_factory=list)  # preload modules the host interpreter could import

    def describe(self) -> dict[str, object]:
        return {
            "read_only": self.read_only,
            "etc": self.etc_files,
            "links": self.symlinks,
            "sys_path_left_out": self.left_out,
        }


def build_allowlist(facts: InterpreterFacts, extra: Sequence[str] = (), python: str | None = None) -> Allowlist:
    """The allowlist for an interpreter (see the module docstring for what goes in and why)."""
    allow = Allowlist(importable=list(facts.importable))
    wanted: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            allow.symlinks[path] = os.readlink(path)
            wanted.append(os.path.realpath(path))
        elif os.path.isdir(path):
            wanted.append(path)
    wanted += [os.path.realpath(p) for p in facts.prefixes]
    wanted.append(facts.executable_dir)
    if python:  # the path the worker is started by (a venv's bin/python link) must exist inside too
        wanted.append(os.path.dirname(os.path.abspath(python)))
    for entry in facts.sys_path:
        real = os.path.realpath(entry)
        if any(_under(f, real) for f in facts.module_files):
            wanted.append(real)
    wanted += facts.mapped_dirs
    wanted += [os.path.realpath(p) for p in extra]
    allow.read_only = [p for p in outermost(wanted) if p != "/" and os.path.exists(p)]
    real_entries = {os.path.realpath(e) for e in facts.sys_path}
    allow.left_out = sorted(e for e in real_entries if not any(_under(e, r) for r in allow.read_only))
    allow.etc_files = [p for p in ETC_FROM_HOST if os.path.exists(p)]
    return allow


def synthetic_etc(uids: Iterable[int], gids: Iterable[int]) -> str:
    """A directory with a minimal passwd/group/hosts/nsswitch.conf for the bwrap root; the caller removes it."""
    root = tempfile.mkdtemp(prefix="retool-sandbox-etc-")
    os.chmod(root, 0o755)
    users = {0: "root", 65534: "nobody"}
    for uid in uids:
        users.setdefault(uid, f"sandbox{65534 - uid}" if uid < 65534 else "sandbox")
    groups = {0: "root", 65534: "nogroup"}
    for gid in gids:
        groups.setdefault(gid, f"sandbox{65534 - gid}" if gid < 65534 else "sandbox")
    files = {
        "passwd": "".join(f"{n}:x:{u}:{u}::/tmp:/usr/sbin/nologin\n" for u, n in sorted(users.items())),
        "group": "".join(f"{n}:x:{g}:\n" for g, n in sorted(groups.items())),
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
    for name, text in files.items():
        path = Path(root, name)
        path.write_text(text)
        path.chmod(0o644)
    return root


def bwrap_mount_args(allow: Allowlist, etc_dir: str, worker_files: Sequence[Path]) -> list[str]:
    """bwrap arguments for a root that holds the allowlist and nothing else (bwrap's own root is an empty tmpfs).

    Parents of every mount point are made first with mode 0755: bwrap (0.8) would create them 0700, and a sandbox
    uid could not reach an interpreter under /root then."""
    destinations = [*allow.read_only, *allow.etc_files, "/etc/passwd", f"{WORKER_DIR_INSIDE}/x"]
    parents = sorted({str(p) for d in destinations for p in Path(d).parents if str(p) != "/"})
    args: list[str] = []
    for parent in parents:
        args += ["--perms", "0755", "--dir", parent]
    for path in allow.read_only:
        args += ["--ro-bind", path, path]
    for link, target in sorted(allow.symlinks.items()):
        if not any(_under(link, p) for p in allow.read_only):
            args += ["--symlink", target, link]
    for path in allow.etc_files:
        args += ["--ro-bind", path, path]
    for name in sorted(os.listdir(etc_dir)):
        args += ["--ro-bind", os.path.join(etc_dir, name), f"/etc/{name}"]
    for path in worker_files:
        args += ["--ro-bind", str(path.resolve()), f"{WORKER_DIR_INSIDE}/{path.name}"]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    return args
