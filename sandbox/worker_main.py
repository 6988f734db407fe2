"""The sandbox worker: a (warm) interpreter that forks one child per request and runs the code in it.

Run as a script (``python -I -B worker_main.py --socket-fd N``), usually inside bubblewrap. It must stay
stdlib-only: it is executed by path in isolated mode, and every module it imports becomes part of what each
request child inherits. The server talks to it over a unix socketpair with length-prefixed JSON frames; the
request's stdin/stdout/stderr arrive as file descriptors (SCM_RIGHTS), so output flows straight from the child to
the server, which reads it while the program runs and caps it. This process only forks, applies the limits,
enforces the wall timeout and removes every process and file the request left behind.

Why fork: importing sympy/numpy/scipy costs ~0.2-0.6 s per fresh interpreter; a fork of an interpreter that has
already imported them costs ~5 ms. One worker serves one request at a time; the server runs several.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import importlib
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
import traceback
import types
from typing import Any, NoReturn

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

#: Process name of every request child (inherited by anything it forks): lets tests and operators spot leftovers.
REQUEST_PROCESS_NAME = b"sbx-req"
#: Exit code a child uses when sandbox setup (not the user's code) failed.
SETUP_FAILED_EXIT = 0x7D

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


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _children_of_self() -> list[int]:
    """Direct children (the worker is a subreaper, so orphaned descendants land here too)."""
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        return pids
    except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: scan the process table
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                            pids.append(int(entry))
        return pids


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


# ---------------------------------------------------------------------------------------------------------------
# The worker


class Worker:
    """One fork-server: receives requests, forks a limited child per request, reports the outcome."""

    def __init__(self, sock: socket.socket, config: dict[str, Any]) -> None:
        self.sock = sock
        self.cfg = config
        self.in_bwrap: bool = config["in_bwrap"]
        self.uid: int = config["sandbox_uid"]
        self.gid: int = config["sandbox_gid"]
        self.is_root = os.geteuid() == 0
        self.tmp_root: str = config["tmp_root"]
        self.privilege_mode = "same"
        self.privilege_note = ""
        self.nproc_limit: int = config["nproc"]
        self.preloaded: list[str] = []
        self.netns_per_request = False
        self.leader: int | None = None
        # Fallback mode's filesystem allowlist (bwrap mode mounts only the allowlist instead).
        self.landlock: types.ModuleType | None = None
        self.landlock_abi = int(config.get("landlock_abi") or 0)
        self.fs_read_only: list[str] = list(config.get("fs_read_only") or [])
        self.filesystem = "mounts" if self.in_bwrap else "host"

    # -- startup -------------------------------------------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        """Harden the worker's own environment, pre-import modules, and decide how children drop privileges."""
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if not self.in_bwrap:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server died: take the children with us
        os.makedirs(self.tmp_root, exist_ok=True)
        if not self.in_bwrap:
            os.chmod(self.tmp_root, 0o711)  # the sandbox uid may enter its own request dir, not list others
        if self.in_bwrap and self.is_root:
            # /tmp and /dev/shm are this sandbox's private tmpfs: only the worker may write there, so a request can
            # write nowhere but its own directory, which is removed afterwards.
            for path in (self.tmp_root, "/dev/shm"):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o755)
        self._choose_privilege_mode()
        if "netns_per_request" in self.cfg:
            self.netns_per_request = bool(self.cfg["netns_per_request"])
        else:
            self.netns_per_request = not self.in_bwrap and self.is_root and self._probe_netns()
        if self.landlock_abi and not self.in_bwrap:
            self._enable_landlock()
            if self.landlock is not None and self.privilege_mode == "ruid":
                self.privilege_note = (
                    f"the Python installation is not readable by uid {self.uid}; children keep root's file "
                    "permissions, limited by Landlock to the read-only allowlist and their run directory, and lose "
                    "all capabilities"
                )
        self._preload(self.cfg.get("preload", []))
        return {
            "ready": True,
            "pid": os.getpid(),
            "preloaded": self.preloaded,
            "privilege_mode": self.privilege_mode,
            "privilege_note": self.privilege_note,
            "network_isolated": self.in_bwrap or self.netns_per_request,
            "filesystem": self.filesystem,
            "landlock_abi": self.landlock_abi if self.landlock is not None else 0,
            "vm_baseline_mb": round(_vm_size_bytes() / MIB, 1),
        }

    def _preload(self, names: list[str]) -> None:
        for name in names:
            try:
                importlib.import_module(name)
                self.preloaded.append(name)
            except Exception:  # noqa: BLE001 - "whatever is installed"
                continue
        warmups = {
            "sympy": "import sympy; sympy.factorint(360); sympy.simplify(sympy.Symbol('x') ** 2 - 1)",
            "numpy": "import numpy; numpy.arange(10).sum()",
        }
        for name, snippet in warmups.items():
            if name in self.preloaded:
                with contextlib.suppress(Exception):
                    exec(snippet, {})

    def _enable_landlock(self) -> None:
        """Load the Landlock helper (next to this script, by path) and keep it if a test child proves it works."""
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_landlock.py")
        spec = importlib.util.spec_from_file_location("retool_sandbox_landlock", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if module.hides_root(self.fs_read_only, [self.tmp_root], self.landlock_abi):
            self.landlock, self.filesystem = module, "landlock"

    def _needed_paths(self) -> list[str]:
        paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
        paths.update(p for p in sys.path if p and os.path.isdir(p))
        return sorted(paths)

    def _choose_privilege_mode(self) -> None:
        """Pick how request children give up root.

        "uid": run as the sandbox uid (no writes outside the request dir, per-uid process cap). "ruid": only the real
        uid changes and all capabilities go (the interpreter lives somewhere the sandbox uid cannot read, e.g. under
        /root): that keeps RLIMIT_NPROC effective against accidental fork bombs but gives no file protection.
        "same": the server is not root; children run as the server's user.
        """
        known = self.cfg.get("privilege_mode")
        if known:  # decided by an earlier worker of this server: cold one-shot workers skip the probe fork
            self.privilege_mode, self.privilege_note = known, self.cfg.get("privilege_note", "")
            if known == "same" and not self.in_bwrap:
                self.nproc_limit += _count_processes_of_uid(os.getuid())
            return
        if not self.is_root:
            self.privilege_mode = "same"
            if not self.in_bwrap:
                # RLIMIT_NPROC counts every process of this uid, the server's included: allow the limit on top.
                self.nproc_limit += _count_processes_of_uid(os.getuid())
            return
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self._become_sandbox_uid()
                for path in self._needed_paths():
                    os.listdir(path)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            self.privilege_mode = "uid"
        else:
            self.privilege_mode = "ruid"
            self.privilege_note = (
                f"the Python installation is not readable by uid {self.uid}; children keep root file access "
                "(no file protection) but lose all capabilities and are counted under that uid for the process cap"
            )

    def _probe_netns(self) -> bool:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _libc.unshare(CLONE_NEWNET) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    def _become_sandbox_uid(self) -> None:
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    # -- serving -------------------------------------------------------------------------------------------------

    def serve(self, one_shot: bool) -> None:
        """Per request two frames go back: the result as soon as every process of the run has been sent SIGKILL,
        then, once all of them are reaped, a cleanup report. Tearing down a few hundred forked interpreters (a fork
        bomb) takes a second or more; the client need not wait for it, the next request on this worker does."""
        while True:
            try:
                request, fds = recv_frame(self.sock, with_fds=True)
            except EOFError:
                return
            self.leader = None
            try:
                reply = self.handle(request, fds)
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            send_frame(self.sock, reply)
            clean = self._reap_all(self.leader)
            if self.in_bwrap and not self.is_root:
                _empty_private_dirs((self.tmp_root, "/dev/shm"))  # same uid as us: it could write there
            send_frame(self.sock, {"cleanup": clean})
            if one_shot or not clean or reply.get("damaged"):
                return

    def handle(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        workdir = tempfile.mkdtemp(prefix="run-", dir=self.tmp_root)
        try:
            return self._run_in_workdir(request, fds, workdir)
        except Exception as exc:  # noqa: BLE001 - reported to the client as a sandbox error, worker recycled
            return {"status": "Error", "message": f"sandbox worker error: {exc!r}", "damaged": True}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_in_workdir(self, request: dict[str, Any], fds: list[int], workdir: str) -> dict[str, Any]:
        if len(fds) != 3:
            return {"status": "Error", "message": f"expected 3 descriptors, got {len(fds)}", "damaged": True}
        script = _materialise(workdir, request.get("files") or {}, request["code"])
        if self.privilege_mode == "uid":
            _chown_tree(workdir, self.uid, self.gid)
        os.chmod(workdir, 0o700)
        setup_r, setup_w = os.pipe()
        os.set_blocking(setup_r, False)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(setup_r)
            self._child(request, fds, workdir, script, setup_w)
        self.leader = pid
        os.close(setup_w)
        for fd in fds:  # only the child (and the server) may hold the request's pipes
            os.close(fd)
        fds.clear()
        outcome = self._wait(pid, float(request["run_timeout"]))
        execution_time = time.monotonic() - started
        self._signal_all(pid, leader_reaped=False)
        try:
            setup_ok = os.read(setup_r, 1) == b"1"
        except BlockingIOError:  # killed (timeout) before it finished setting up
            setup_ok = False
        os.close(setup_r)
        reply: dict[str, Any] = {"execution_time": round(execution_time, 6), "files": {}}
        if not setup_ok and outcome[0] != "TimeLimitExceeded":
            reply.update(status="Error", return_code=None, message="sandbox setup of the child failed")
            return reply
        reply.update(status=outcome[0], return_code=outcome[1], message="")
        fetch = request.get("fetch_files") or []
        if fetch:
            reply["files"] = self._fetch_files(workdir, fetch, int(self.cfg["max_fetch_bytes"]))
        return reply

    def _signal_all(self, leader: int | None, leader_reaped: bool) -> None:
        """One SIGKILL pass over everything the request may have left running."""
        if self.in_bwrap:
            # Our own pid namespace: every process but bwrap's init and us belongs to this request.
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        if leader is not None and not leader_reaped:  # while unreaped, its pid (= its group id) can't be reused
            for target in (-leader, leader):
                with contextlib.suppress(OSError):
                    os.kill(target, signal.SIGKILL)
        for child in _children_of_self():
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)

    def _reap_all(self, leader: int | None) -> bool:
        """Kill and reap until we have no child at all; False if something survived 3 s of this.

        The worker is a child subreaper, so every descendant is either below a live process or re-parented to us:
        when ``waitpid`` reports no children, nothing of the request is left.
        """
        deadline = time.monotonic() + 3.0
        leader_reaped = False
        while True:
            self._signal_all(leader, leader_reaped)
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return True
                if pid == 0:
                    break
                leader_reaped = leader_reaped or pid == leader
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def _wait(self, pid: int, timeout: float) -> tuple[str, int | None]:
        """Wait for the main child (leaving it a zombie so its pid and process group stay reserved)."""
        pidfd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], max(timeout, 0.0))
            if not ready:
                # Give the program a moment to flush what it printed (its SIGTERM handler does), then kill.
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
                select.select([pidfd], [], [], 0.05)
                return "TimeLimitExceeded", None
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            if info.si_code == os.CLD_EXITED:
                return "Finished", info.si_status
            return "Finished", -info.si_status
        finally:
            os.close(pidfd)

    def _fetch_files(self, workdir: str, names: list[str], max_bytes: int) -> dict[str, str | None]:
        """Read the requested files with the request's own credentials (a symlink can't reach beyond them)."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(read_fd)
                self._drop_privileges(workdir)
                result: dict[str, str | None] = {}
                budget = max_bytes
                for name in names:
                    try:
                        path = _safe_join(workdir, name)
                        with open(path, "rb") as f:
                            data = f.read(budget + 1)
                        if len(data) > budget:
                            result[name] = None
                            continue
                        budget -= len(data)
                        result[name] = base64.b64encode(data).decode()
                    except (OSError, ValueError):
                        result[name] = None
                with os.fdopen(write_fd, "wb") as out:
                    out.write(json.dumps(result).encode())
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as f:
            payload = f.read()
        os.waitpid(pid, 0)
        try:
            return json.loads(payload)
        except ValueError:
            return {name: None for name in names}

    # -- the child -----------------------------------------------------------------------------------------------

    def _drop_privileges(self, workdir: str) -> None:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if self.landlock is not None:  # while still able to open every allowed path; fails closed
            self.landlock.restrict_self(self.fs_read_only, [workdir], self.landlock_abi)
        if self.privilege_mode == "uid":
            self._become_sandbox_uid()
        elif self.privilege_mode == "ruid":
            os.setgroups([])
            os.setresgid(self.gid, 0, 0)
            os.setresuid(self.uid, 0, 0)  # euid stays 0: capabilities survive until dropped below
            _drop_all_capabilities()

    def _child(self, request: dict[str, Any], fds: list[int], workdir: str, script: str, setup_w: int) -> NoReturn:
        try:
            os.setsid()
            _prctl(PR_SET_NAME, REQUEST_PROCESS_NAME)
            self._apply_limits(request)
            if self.netns_per_request:
                _libc.unshare(CLONE_NEWNET)
            stdin_fd, stdout_fd, stderr_fd = fds
            os.dup2(stdin_fd, 0)
            os.dup2(stdout_fd, 1)
            os.dup2(stderr_fd, 2)
            if setup_w != 3:
                os.dup2(setup_w, 3)
            os.closerange(4, 1 << 16)  # the server socket, pidfds, everything else of the worker
            os.chdir(workdir)
            self._drop_privileges(workdir)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
            _reset_process_state(self.cfg["child_env"], workdir)
            os.write(3, b"1")
            os.close(3)
        except BaseException:  # noqa: BLE001
            with contextlib.suppress(BaseException):
                os.write(2, f"sandbox setup failed:\n{traceback.format_exc()}".encode())
            os._exit(SETUP_FAILED_EXIT)
        os._exit(_run_user_code(script))

    def _apply_limits(self, request: dict[str, Any]) -> None:
        memory_mb = int(request.get("memory_limit_mb") or 0)
        if memory_mb > 0:
            # The limit is on what the code may add: the warm interpreter's pre-imported baseline is not the
            # code's doing (and a cold interpreter's baseline is ~20 MB).
            limit = _vm_size_bytes() + memory_mb * MIB
            _set_rlimit(resource.RLIMIT_AS, limit)
        timeout = float(request["run_timeout"])
        _set_rlimit(resource.RLIMIT_CPU, int(timeout) + 2, int(timeout) + 3)
        _set_rlimit(resource.RLIMIT_NPROC, self.nproc_limit)
        _set_rlimit(resource.RLIMIT_FSIZE, int(self.cfg["fsize_mb"]) * MIB)
        _set_rlimit(resource.RLIMIT_NOFILE, int(self.cfg["nofile"]))
        _set_rlimit(resource.RLIMIT_CORE, 0)


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


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    fd = int(args[args.index("--socket-fd") + 1])
    one_shot = "--one-shot" in args
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    config, _ = recv_frame(sock)
    worker = Worker(sock, config)
    try:
        ready = worker.prepare()
    except Exception as exc:  # noqa: BLE001
        send_frame(sock, {"ready": False, "error": f"{exc!r}\n{traceback.format_exc()}"})
        return
    send_frame(sock, ready)
    worker.serve(one_shot)


if __name__ == "__main__":
    main()
