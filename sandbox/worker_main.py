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
import importlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import types
from typing import Any, NoReturn

#: Process name of every request child (inherited by anything it forks): lets tests and operators spot leftovers.
REQUEST_PROCESS_NAME = b"sbx-req"
#: Exit code a child uses when sandbox setup (not the user's code) failed.
SETUP_FAILED_EXIT = 0x7D


def _load_sibling(name: str) -> types.ModuleType:
    """A stdlib module beside this file, by path: ``python -I`` does not put this folder on sys.path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"retool_sandbox_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_os = _load_sibling("worker_os")
HEADER, MAX_FRAME, MIB, CLONE_NEWNET = _os.HEADER, _os.MAX_FRAME, _os.MIB, _os.CLONE_NEWNET
PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = _os.PR_SET_PDEATHSIG, _os.PR_SET_NAME, _os.PR_SET_NO_NEW_PRIVS
PR_SET_CHILD_SUBREAPER = _os.PR_SET_CHILD_SUBREAPER
send_frame, recv_frame, _libc, _prctl = _os.send_frame, _os.recv_frame, _os._libc, _os._prctl
_set_rlimit, _vm_size_bytes = _os._set_rlimit, _os._vm_size_bytes
_drop_all_capabilities = _os._drop_all_capabilities

_request = _load_sibling("worker_request")
_count_processes_of_uid = _request._count_processes_of_uid
_empty_private_dirs = _request._empty_private_dirs
_safe_join = _request._safe_join
_materialise = _request._materialise
_chown_tree = _request._chown_tree
_reset_process_state = _request._reset_process_state
_flush_and_exit = _request._flush_and_exit
_run_user_code = _request._run_user_code
_exit_code = _request._exit_code

_reap = _load_sibling("worker_reap")


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
        module = _load_sibling("worker_landlock")
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
            clean = _reap.reap_all(self.in_bwrap, self.leader)
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
        outcome = _reap.wait_main(pid, float(request["run_timeout"]))
        execution_time = time.monotonic() - started
        _reap.signal_all(self.in_bwrap, pid, leader_reaped=False)
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
