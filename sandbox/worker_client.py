"""Async handle to one worker process (``worker_main.py``): start it, hand it a job, collect the outcome."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sandbox.isolation import FS_LANDLOCK, IsolationPlan
from sandbox.output_capture import CappedPipeReader
from sandbox.settings import SandboxSettings, child_env
from sandbox.worker_os import HEADER, MAX_FRAME

log = logging.getLogger("sandbox.worker")

#: Extra seconds the server waits beyond run_timeout before it declares a worker hung and kills it.
WORKER_GRACE_S = 5.0
STARTUP_TIMEOUT_S = 120.0
#: After the result, how long to wait for the pipes' EOF, and for the worker's "all reaped" report.
EOF_GRACE_S = 0.25
CLEANUP_TIMEOUT_S = 15.0


def _worker_config(
    settings: SandboxSettings,
    plan: IsolationPlan,
    slot: int,
    tmp_root: str,
    env: dict[str, str],
    *,
    preload: bool,
    known: dict[str, Any] | None,
) -> dict[str, Any]:
    """The first frame a worker reads (``worker_main.main``): its uid, limits, directories and what to pre-import."""
    config: dict[str, Any] = {
        "in_bwrap": plan.in_bwrap,
        "tmp_root": tmp_root,
        "sandbox_uid": settings.sandbox_uid - slot,
        "sandbox_gid": settings.sandbox_gid - slot,
        "nproc": settings.nproc,
        "fsize_mb": settings.fsize_mb,
        "nofile": settings.nofile,
        "max_fetch_bytes": settings.max_fetch_mb * 1024 * 1024,
        "preload": list(settings.preload) if preload else [],
        "child_env": env,
        "landlock_abi": plan.landlock_abi if plan.filesystem == FS_LANDLOCK else 0,
        "fs_read_only": plan.allowlist.read_only + plan.allowlist.etc_files,
    }
    if known:  # what an earlier worker found out (privilege mode, netns): spares each cold worker its probes
        config["privilege_mode"] = known["privilege_mode"]
        config["privilege_note"] = known.get("privilege_note", "")
        config["netns_per_request"] = known["network_isolated"] and not plan.in_bwrap
    return config


@dataclass
class Job:
    """One request to execute, already validated."""

    code: str
    run_timeout: float
    memory_limit_mb: int
    stdin: bytes | None = None
    files: dict[str, str | None] = field(default_factory=dict)
    fetch_files: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """What happened: a SandboxFusion ``run_result`` plus bookkeeping for metrics and recycling."""

    status: str  # Finished | TimeLimitExceeded | Error
    return_code: int | None
    execution_time: float
    stdout: str
    stderr: str
    files: dict[str, str | None]
    message: str = ""
    truncated: bool = False
    damaged: bool = False

    def run_result(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "execution_time": self.execution_time,
            "return_code": self.return_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


class WorkerStartError(RuntimeError):
    pass


class WorkerUnavailable(RuntimeError):
    """The worker was dead before it took the request: none of the code ran, so another worker may run it."""


class WorkerProcess:
    """One fork-server worker (warm, many requests) or a one-shot worker (cold, one request)."""

    def __init__(
        self, proc: asyncio.subprocess.Process, sock: socket.socket, info: dict[str, Any], slot: int = 0
    ) -> None:
        self.slot = slot
        self.proc = proc
        self.sock = sock
        self.info = info
        self.requests_served = 0
        self.broken = False
        self.died = False  # gone by itself (OOM killer, kill -9, the run killed it), not stopped by the server
        self.private_tmp: str | None = None

    @classmethod
    async def start(
        cls,
        settings: SandboxSettings,
        plan: IsolationPlan,
        *,
        preload: bool,
        one_shot: bool,
        slot: int = 0,
        known: dict[str, Any] | None = None,
    ) -> WorkerProcess:
        """Start a worker for ``slot``; each slot has its own sandbox uid (65534, 65533, ... by default), so one
        run's processes count against its own RLIMIT_NPROC budget and cannot signal another run's."""
        # Fallback: each worker gets its own directory under the server's temp root, so whatever a dead worker
        # could not remove is removed with it. (In bwrap, /tmp is the worker's private tmpfs and dies with it.)
        tmp_root = plan.tmp_root if plan.in_bwrap else tempfile.mkdtemp(prefix=f"w{slot}-", dir=plan.tmp_root)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [*plan.prefix, settings.python, "-I", "-B", plan.worker_script, "--socket-fd", str(child_sock.fileno())]
        if one_shot:
            argv.append("--one-shot")
        env = child_env(settings.python)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                pass_fds=(child_sock.fileno(),),
                env=env,
                start_new_session=True,
            )
        finally:
            child_sock.close()
        parent_sock.setblocking(False)
        worker = cls(proc, parent_sock, {}, slot)
        worker.private_tmp = None if plan.in_bwrap else tmp_root
        config = _worker_config(settings, plan, slot, tmp_root, env, preload=preload, known=known)
        try:
            await worker._send(config)
            info = await asyncio.wait_for(worker._recv(), STARTUP_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            await worker.kill()
            raise WorkerStartError(f"worker did not start: {exc!r}") from exc
        if not info.get("ready"):
            await worker.kill()
            raise WorkerStartError(f"worker failed to start: {info.get('error')}")
        worker.info = info
        return worker

    # -- framing over the non-blocking socket -------------------------------------------------------------------

    async def _send(self, obj: Any, fds: list[int] | None = None) -> None:
        loop = asyncio.get_running_loop()
        body = json.dumps(obj, separators=(",", ":")).encode()
        header = HEADER.pack(len(body))
        if fds:
            # 4 bytes into an idle request/response socket: the buffer is empty, this cannot block.
            socket.send_fds(self.sock, [header], fds)
        else:
            await loop.sock_sendall(self.sock, header)
        await loop.sock_sendall(self.sock, body)

    async def _recv_exact(self, size: int) -> bytes:
        loop = asyncio.get_running_loop()
        buf = bytearray()
        while len(buf) < size:
            chunk = await loop.sock_recv(self.sock, size - len(buf))
            if not chunk:
                raise EOFError("worker closed its socket")
            buf += chunk
        return bytes(buf)

    async def _recv(self) -> dict[str, Any]:
        (size,) = HEADER.unpack(await self._recv_exact(HEADER.size))
        if size > MAX_FRAME:
            raise ValueError(f"worker frame of {size} bytes")
        return json.loads(await self._recv_exact(size))

    # -- running a job ------------------------------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether this idle worker can take a request now. An idle worker sends nothing, so a readable socket
        means its end is closed (EOF, or a reset): it died, and handing it a request would only fail that request."""
        if self.broken or self.proc.returncode is not None:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    async def run(self, job: Job, output_limit: int) -> Outcome:
        """Execute ``job``; never raises for anything the code does. A hung or dead worker is killed. Raises
        :class:`WorkerUnavailable` when the worker was dead before it took the request (nothing of it ran)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin_fd = _stdin_fd(job.stdin)
        stdout = await CappedPipeReader.attach(out_r, output_limit)
        stderr = await CappedPipeReader.attach(err_r, output_limit)
        try:
            reply = await self._exchange(job, [stdin_fd, out_w, err_w])
        except BaseException:  # cancelled, or WorkerUnavailable: the worker is killed, nothing to collect
            stdout.close()
            stderr.close()
            raise
        self.requests_served += 1
        try:
            # The worker answers once everything of the run got SIGKILL; dying processes may hold the pipes a
            # little longer (a fork bomb's teardown), but can no longer write anything.
            await asyncio.wait_for(asyncio.shield(asyncio.gather(stdout.done, stderr.done)), EOF_GRACE_S)
        except TimeoutError:
            pass
        stdout.close()
        stderr.close()
        if reply.get("damaged"):
            self.broken = True
        return Outcome(
            status=reply["status"],
            return_code=reply.get("return_code"),
            execution_time=float(reply.get("execution_time") or 0.0),
            stdout=stdout.text(),
            stderr=stderr.text(),
            files=reply.get("files") or {},
            message=reply.get("message", ""),
            truncated=stdout.truncated or stderr.truncated,
            damaged=bool(reply.get("damaged")),
        )

    async def _exchange(self, job: Job, fds: list[int]) -> dict[str, Any]:
        """Send the request with its stdin/stdout/stderr, wait for the result frame; the reply for a worker that
        hung or died while it had the request is made up here."""
        request = {
            "code": job.code,
            "run_timeout": job.run_timeout,
            "memory_limit_mb": job.memory_limit_mb,
            "files": job.files,
            "fetch_files": job.fetch_files,
        }
        try:
            try:
                await self._send(request, fds)
            except OSError as exc:  # EPIPE/ECONNRESET: the worker's end was closed before the request got there
                await self._unavailable(exc)
            finally:
                for fd in fds:
                    os.close(fd)
            return await asyncio.wait_for(self._recv(), job.run_timeout + WORKER_GRACE_S)
        except asyncio.CancelledError:
            await self.kill()
            raise
        except ConnectionResetError as exc:
            # Linux resets the peer of a unix stream socket closed with unread data: the worker died before it
            # had read all of the request, so it cannot have started the code.
            await self._unavailable(exc)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            hung = isinstance(exc, TimeoutError)
            log.warning("worker %s %s; killing it", self.proc.pid, "hung" if hung else f"failed: {exc!r}")
            self.died = not hung and isinstance(exc, (OSError, EOFError))  # TimeoutError is an OSError
            await self.kill()
            return {
                "status": "TimeLimitExceeded" if hung else "Error",
                "return_code": None,
                "execution_time": job.run_timeout if hung else 0.0,
                "message": "sandbox worker hung; killed" if hung else "sandbox worker died during execution",
                "damaged": True,
            }

    async def _unavailable(self, exc: OSError) -> NoReturn:
        """Kill the dead worker and tell the caller that the request is intact, to be run elsewhere."""
        log.warning("worker %s was dead before it took a request (%r); killing it", self.proc.pid, exc)
        self.died = True
        await self.kill()
        raise WorkerUnavailable(f"worker {self.proc.pid} was dead before it took the request: {exc!r}") from exc

    async def wait_cleanup(self) -> bool:
        """Second frame of a run: True once every process of it is reaped (the worker is reusable)."""
        if self.broken:
            return False
        try:
            report = await asyncio.wait_for(self._recv(), CLEANUP_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, ValueError):
            report = {}
        if not report.get("cleanup"):
            self.broken = True
        return not self.broken

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Ask politely (EOF on the socket), then kill."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        try:
            await asyncio.wait_for(self.proc.wait(), 2.0)
        except TimeoutError:
            await self.kill()
        self.sock.close()
        self._remove_private_tmp()

    def _remove_private_tmp(self) -> None:
        if self.private_tmp and self.proc.returncode is not None:
            shutil.rmtree(self.private_tmp, ignore_errors=True)

    async def kill(self) -> None:
        self.broken = True
        if self.proc.returncode is None:
            # bwrap --die-with-parent and its pid namespace take everything inside down with it; in the fallback
            # the request child has PDEATHSIG set.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5.0)
        with contextlib.suppress(OSError):
            self.sock.close()
        self._remove_private_tmp()


def _stdin_fd(data: bytes | None) -> int:
    """stdin as an in-memory file: no writer to block, whatever its size and whether or not the code reads it."""
    if not data:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    fd = os.memfd_create("sandbox-stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
