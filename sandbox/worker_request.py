"""What a request child of the sandbox worker does to itself: its run directory, a clean process state, and running
the user's code as ``__main__`` with the exit code and output a notebook user expects.

Stdlib only and loaded by ``worker_main.py`` by path, like worker_os.py (sandbox/isolation.py mounts it beside the
worker inside bubblewrap).
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import signal
import stat
import sys
import tempfile
import traceback
import types


def _count_processes_of_uid(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def _empty_private_dirs(roots: tuple[str, ...]) -> None:
    """Remove whatever a run left in the worker's private tmpfs dirs, so the next run on this worker sees none."""
    for root in roots:
        with contextlib.suppress(OSError):
            for entry in os.scandir(root):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _safe_join(root: str, relative: str) -> str:
    """Resolve a client-supplied relative path inside ``root``; refuse absolute paths and ``..`` escapes."""
    if not relative or relative.startswith("/") or "\x00" in relative:
        raise ValueError(f"bad file path {relative!r}")
    path = os.path.normpath(os.path.join(root, relative))
    if not path.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"file path {relative!r} leaves the sandbox directory")
    return path


def _materialise(workdir: str, files: dict[str, str | None], code: str) -> str:
    """Write the request's files and the code; returns the script path (``main.py`` unless a file took it)."""
    for name, content in files.items():
        path = _safe_join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(content) if content else b"")
    script = os.path.join(workdir, "main.py")
    counter = 0
    while os.path.exists(script):
        counter += 1
        script = os.path.join(workdir, f"main_{counter}.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    return script


def _chown_tree(root: str, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid)
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                os.chown(path, uid, gid)


def _reset_process_state(env: dict[str, str], workdir: str) -> None:
    """Make the forked interpreter look like a fresh ``python main.py`` to the code."""
    os.environ.clear()
    os.environ.update(env)
    os.environ["HOME"] = workdir
    os.environ["TMPDIR"] = workdir
    tempfile.tempdir = None
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="strict"
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _flush_and_exit)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # a fresh interpreter would not replay the worker's random stream
        with contextlib.suppress(Exception):
            numpy.random.seed()


def _flush_and_exit(_signum: int, _frame: object) -> None:
    """On the wall timeout the worker sends SIGTERM first, so partial output reaches the client."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + signal.SIGTERM)


def _run_user_code(script: str) -> int:
    import atexit
    import builtins
    import threading

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    try:
        with open(script, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - print it the way the interpreter would
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        code = 1
    for finaliser in (getattr(threading, "_shutdown", None), atexit._run_exitfuncs):
        with contextlib.suppress(BaseException):
            if finaliser is not None:
                finaliser()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = code or 120
    return code


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    with contextlib.suppress(Exception):
        print(exc.code, file=sys.stderr)
    return 1
