"""Landlock (Linux >= 5.13): the fallback mode's filesystem allowlist, applied by a request child to itself.

Why Landlock: the fallback exists where bubblewrap cannot create namespaces (no mounts, so no allowlist root), but
Landlock needs neither privileges nor namespaces - an unprivileged process restricts itself, and every process it
forks inherits the restriction. Outside the allowed trees the child can neither read a file nor list a directory
(``os.listdir("/")`` fails); it may write only beneath its run directory. It cannot hide names from ``stat``: a path
known in advance still answers "exists" (the bwrap mode's mount allowlist hides it completely).

With Landlock ABI >= 4 TCP bind/connect are denied as well (no sockets to Ray, the dashboard or the sandbox itself);
with ABI >= 6 signals to processes outside the run (the worker, the server) and abstract unix sockets are scoped.

Stdlib only, loaded by ``worker_main.py`` by path: it runs inside the sandbox where the package is not importable.
Numbers from the kernel's ``include/uapi/linux/landlock.h``; the syscall numbers are the same on x86_64 and aarch64.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from collections.abc import Iterable

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
PR_SET_NO_NEW_PRIVS = 38
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
ABI1_FS = (1 << 13) - 1
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

#: Device files a program legitimately opens; /dev/null also for writing.
DEVICE_READ = ("/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")
DEVICE_READ_WRITE = ("/dev/null",)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock syscall {number}: {os.strerror(err)}")
    return int(result)


def abi_version() -> int:
    """The kernel's Landlock ABI (0: not built in, or disabled at boot)."""
    try:
        return _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except OSError:
        return 0


def handled_fs(abi: int) -> int:
    return ABI1_FS | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def _add_path_rule(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # an allowlist entry that does not exist on this host: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FILE_RIGHTS  # the kernel refuses directory rights on a file
        attr = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        _syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), attr, ctypes.c_uint32(0))
    finally:
        os.close(fd)


def restrict_self(read_only: Iterable[str], writable: Iterable[str], abi: int | None = None) -> int:
    """Allow reading (and executing) beneath ``read_only``, everything beneath ``writable``, nothing else.

    The caller must have set ``PR_SET_NO_NEW_PRIVS`` (or hold CAP_SYS_ADMIN). Returns the ABI applied; raises
    OSError when Landlock is unavailable, so a child that cannot restrict itself does not run (fail closed).
    """
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = handled_fs(abi)
    fields = [fs]
    if abi >= 4:
        fields.append(NET_BIND_TCP | NET_CONNECT_TCP)  # handled, and no rule allows a port: no TCP at all
    if abi >= 6:
        fields.append(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    packed = struct.pack(f"={len(fields)}Q", *fields)
    attr = ctypes.create_string_buffer(packed, len(packed))
    ruleset = _syscall(SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(packed)), ctypes.c_uint32(0))
    try:
        for path in read_only:
            _add_path_rule(ruleset, path, READ_ONLY)
        for path in DEVICE_READ:
            _add_path_rule(ruleset, path, READ_FILE)
        for path in DEVICE_READ_WRITE:
            _add_path_rule(ruleset, path, (READ_FILE | WRITE_FILE | TRUNCATE) & fs)
        for path in writable:
            _add_path_rule(ruleset, path, fs)
        _syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def hides_root(read_only: Iterable[str], writable: Iterable[str], abi: int) -> bool:
    """Self-test in a throw-away child: restricted like a request, can it still list ``/``? (It must not.)"""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            restrict_self(read_only, writable, abi)
            try:
                os.listdir("/")
            except PermissionError:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
