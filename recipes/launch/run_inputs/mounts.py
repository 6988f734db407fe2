"""Which mount holds a path, and whether that is a container's own root filesystem.

Why the launcher asks: inside a ``docker run --rm`` (docker/run_npu.sh), a checkpoint dir that is not a mounted host
folder lies in the container's writable overlay layer and vanishes with the container, after hours of training
(issue 14). The container's root is the mount at ``/`` with an overlay-type filesystem in ``/proc/self/mountinfo``
(docker/containerd overlay2; podman rootless uses fuse-overlayfs; docker's old aufs driver); a bind-mounted host
folder is a mount of its own (ext4, xfs, nfs, ...) below it. A machine that is not a container has its disk at ``/``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: Set to 1 to let a run checkpoint onto the container's own filesystem anyway (a throwaway test run).
EPHEMERAL_CKPT_ENV = "KIT_ALLOW_EPHEMERAL_CKPT"
MOUNTINFO = Path("/proc/self/mountinfo")
#: Filesystem types of a container engine's root layer.
OVERLAY_TYPES = frozenset({"overlay", "aufs", "fuse-overlayfs", "fuse.fuse-overlayfs"})
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where it is mounted, its filesystem type, its source."""

    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of ``/proc/<pid>/mountinfo`` text, in order (a later mount on the same point hides an earlier one).

    Format (proc(5)): ``id parent major:minor root mount-point options [optional fields...] - fstype source super``.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 2:
            continue
        source = fields[sep + 2] if len(fields) > sep + 2 else ""
        mounts.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(source)))
    return mounts


def _resolved(path: str) -> str:
    """Absolute, with symlinks of the part that exists resolved (the mount is where the bytes would go)."""
    where = Path(path).absolute()
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    rest = where.relative_to(existing)
    return os.path.normpath(os.path.join(os.path.realpath(existing), rest))


def _under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount ``path`` lies on: the deepest mount point above it, the last one where several share it."""
    target = _resolved(path)
    best: Mount | None = None
    for mount in mounts:
        if _under(target, mount.mount_point) and (best is None or len(mount.mount_point) >= len(best.mount_point)):
            best = mount
    return best


def container_root_of(path: str, mountinfo: str | None = None) -> Mount | None:
    """The container's overlay root mount when ``path`` lies on it, else None (also when mountinfo is unreadable:
    not Linux, so not a container the kit starts). ``mountinfo`` is the text to use instead of this process's."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    mount = mount_of(path, parse_mountinfo(mountinfo))
    if mount is not None and mount.mount_point == "/" and mount.fstype in OVERLAY_TYPES:
        return mount
    return None
