"""Blocking client for SandboxFusion's ``POST /run_code`` (the kit's sandbox speaks the same API).

Why not verl's ``sandbox_fusion`` helpers: they fold timeouts, sandbox errors and unreachable servers into one
"no stdout here" and drop the partial output of a timed-out run. This client keeps every outcome apart
(:class:`SandboxResult.kind`), retries only what is worth retrying (HTTP 429/502/503/504 and connections refused or
reset before the request was sent, with exponential backoff; never a run that may have executed), and keeps one
keep-alive connection per thread. It uses only the standard library and ignores ``HTTP(S)_PROXY``: the sandbox is an
internal service.

A connection the server drops after it got the request (the server was killed mid-run; ``serve --keep-alive``
restarts it) is a ``sandbox_error`` at once, not a retry: the code may have run, and it may be what killed the
server, so running it again could crash the restarted one too (``tests/faults/test_sandbox_killed_mid_step.py``).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from recipes.retool.tool_defaults import DEFAULT_TIMEOUT_S, REQUEST_MARGIN_S, http_timeout_s

RETRY_STATUSES = frozenset({429, 502, 503, 504})

ResultKind = Literal["finished", "timeout", "sandbox_error", "unavailable"]


@dataclass
class SandboxResult:
    """What happened to one ``/run_code`` request."""

    kind: ResultKind
    stdout: str = ""
    stderr: str = ""
    return_code: int | None = None
    message: str = ""
    latency_s: float = 0.0
    retries: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


class DroppedMidRun(Exception):
    """The server closed the connection after it had the whole request: the code may have run."""


def _stale(sock: socket.socket) -> bool:
    """An idle keep-alive socket with something to read has been closed by the server (EOF) or is out of step."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def run_code_url(url: str) -> str:
    """Accept ``http://host:port`` as well as verl's ``http://host:port/run_code``."""
    url = url.strip()
    if not url:
        raise ValueError("sandbox URL is empty: set sandbox_fusion_url in the tool config (or RETOOL_SANDBOX_URL)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"sandbox URL {url!r} is not an http(s) URL")
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/run_code"
    return url


def parse_response(data: Any) -> SandboxResult:
    """Map a SandboxFusion ``RunCodeResponse`` JSON object to a :class:`SandboxResult`."""
    if not isinstance(data, dict):
        return SandboxResult("sandbox_error", message=f"unexpected response {str(data)[:200]!r}")
    run = data.get("run_result") or {}
    run_status = run.get("status") if isinstance(run, dict) else None
    stdout = str(run.get("stdout") or "") if isinstance(run, dict) else ""
    stderr = str(run.get("stderr") or "") if isinstance(run, dict) else ""
    return_code = run.get("return_code") if isinstance(run, dict) else None
    if run_status == "Finished":
        return SandboxResult("finished", stdout, stderr, return_code, raw=data)
    if run_status == "TimeLimitExceeded":
        return SandboxResult("timeout", stdout, stderr, return_code, raw=data)
    compile_result = data.get("compile_result") or {}
    message = str(data.get("message") or "") or stderr or str(compile_result.get("stderr") or "")
    if not message:
        message = f"status {data.get('status')!r}, run status {run_status!r}"
    return SandboxResult("sandbox_error", stdout, stderr, return_code, message=message[:500], raw=data)


class SandboxClient:
    """Runs code through one sandbox endpoint; safe to call from many threads at once."""

    def __init__(
        self,
        url: str,
        *,
        language: str = "python",
        run_timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit_mb: int = -1,
        max_retries: int = 3,
        retry_backoff_s: float = 1.0,
        request_margin_s: float = REQUEST_MARGIN_S,
    ) -> None:
        self.url = run_code_url(url)
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.language = language
        self.run_timeout_s = float(run_timeout_s)
        self.memory_limit_mb = int(memory_limit_mb)
        self.max_retries = max(0, int(max_retries))
        self.retry_backoff_s = float(retry_backoff_s)
        self.request_margin_s = float(request_margin_s)
        self._local = threading.local()

    def payload(self, code: str, run_timeout_s: float) -> dict[str, Any]:
        """The request body, with every field SandboxFusion's ``RunCodeRequest`` knows (as verl sends it)."""
        return {
            "code": code,
            "language": self.language,
            "compile_timeout": run_timeout_s,
            "run_timeout": run_timeout_s,
            "memory_limit_MB": self.memory_limit_mb,
            "stdin": None,
            "files": {},
            "fetch_files": [],
        }

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _post_once(self, body: bytes, timeout: float) -> tuple[int, bytes]:
        """One POST. A keep-alive connection the server closed while idle is replaced before sending (and, if the
        close races the send, reopened once); a drop after the request was sent raises :class:`DroppedMidRun`."""
        for attempt in range(2):
            conn = self._connection(timeout)
            if conn.sock is not None and _stale(conn.sock):
                self._drop_connection()
                conn = self._connection(timeout)
            reused = conn.sock is not None
            try:
                conn.request("POST", self._path, body=body, headers={"Content-Type": "application/json"})
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_connection()
                if not reused or attempt:
                    raise
                continue
            except BaseException:
                self._drop_connection()
                raise
            try:
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, http.client.IncompleteRead, ConnectionResetError) as exc:
                self._drop_connection()
                raise DroppedMidRun(f"{type(exc).__name__}: {exc}") from exc
            except BaseException:
                self._drop_connection()
                raise
            if response.will_close:
                self._drop_connection()
            return response.status, data
        raise AssertionError("unreachable")

    def run(self, code: str, run_timeout_s: float | None = None) -> SandboxResult:
        """Run ``code``; never raises for network or server trouble (that is :attr:`SandboxResult.kind`)."""
        timeout = self.run_timeout_s if run_timeout_s is None else float(run_timeout_s)
        body = json.dumps(self.payload(code, timeout)).encode()
        http_timeout = http_timeout_s(timeout, self.request_margin_s)
        start = time.monotonic()
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            try:
                status, data = self._post_once(body, http_timeout)
            except TimeoutError:
                # The request may have run: do not run it again.
                return SandboxResult(
                    "unavailable",
                    message=f"no answer from the sandbox within {http_timeout:g} s",
                    latency_s=time.monotonic() - start,
                    retries=attempt,
                )
            except DroppedMidRun as exc:
                return SandboxResult(
                    "sandbox_error",
                    message=f"the sandbox closed the connection while running the code ({exc}); it crashed or was "
                    "restarted, and the code is not run again",
                    latency_s=time.monotonic() - start,
                    retries=attempt,
                )
            except (OSError, http.client.HTTPException) as exc:
                problem = f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
                continue
            if status in RETRY_STATUSES:
                problem = f"{self.url} answered HTTP {status}"
                continue
            latency = time.monotonic() - start
            if status != 200:
                text = data[:300].decode(errors="replace")
                return SandboxResult(
                    "sandbox_error", message=f"HTTP {status}: {text}", latency_s=latency, retries=attempt
                )
            try:
                result = parse_response(json.loads(data))
            except ValueError:
                text = data[:200].decode(errors="replace")
                result = SandboxResult("sandbox_error", message=f"invalid JSON from the sandbox: {text!r}")
            result.latency_s, result.retries = latency, attempt
            return result
        return SandboxResult(
            "unavailable",
            message=f"{problem} (after {self.max_retries + 1} attempts)",
            latency_s=time.monotonic() - start,
            retries=self.max_retries,
        )

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        self._drop_connection()
