"""The sandbox worker's frames and system calls: what ``worker_main.py`` and the server share, and the small Linux
helpers (prctl, rlimits, capabilities, /proc) the worker applies to itself and its request children.

Stdlib only and loaded by ``worker_main.py`` by path (it runs as ``python -I`` inside bubblewrap, where the package is
not importable; sandbox/isolation.py mounts it beside the worker); the server imports it as ``sandbox.worker_os``.
"""

from __future__ import annotations

import ctypes
import json
import resource
import socket
import struct
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME = 1 << 30
MIB = 1024 * 1024

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNET = 0x40000000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------------------------------------------------------
# Framing (also imported by the server)


def send_frame(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    """Send one JSON frame; ``fds`` ride on the 4-byte header so they arrive with the frame they belong to."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    header = HEADER.pack(len(body))
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
    sock.sendall(body)


def _recv_exact(sock: socket.socket, size: int, fds_out: list[int] | None = None) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < size:
        if fds_out is not None and got == 0:
            data, fds, _flags, _addr = socket.recv_fds(sock, size, 4)
            fds_out.extend(fds)
        else:
            data = sock.recv(size - got)
        if not data:
            raise EOFError("peer closed the worker socket")
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, with_fds: bool = False) -> tuple[Any, list[int]]:
    """Receive one JSON frame (and the descriptors sent with it)."""
    fds: list[int] = []
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size, fds if with_fds else None))
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes is too large")
    return json.loads(_recv_exact(sock, size)), fds


# ---------------------------------------------------------------------------------------------------------------
# Small OS helpers


def _prctl(option: int, arg: int | bytes = 0) -> bool:
    return _libc.prctl(option, arg, 0, 0, 0) == 0


def _set_rlimit(which: int, soft: int, hard: int | None = None) -> None:
    """Lower a limit; never tries to raise a hard limit (which would fail for non-root servers)."""
    _cur_soft, cur_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def raise_open_file_limit(wanted: int) -> None:
    """Every connection held at once is a file descriptor (the server's queued requests, the burst bench's clients):
    lift a 1,024 soft limit towards ``wanted``, at most to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _drop_all_capabilities() -> None:
    for cap in range(64):
        _prctl(PR_CAPBSET_DROP, cap)

    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
