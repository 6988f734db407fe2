"""A minimal SandboxFusion-compatible ``POST /run_code`` server for the ReTool tests (standard library only).

Why it exists: the tool tests need scripted failures (HTTP 503/504/500, bad JSON, slow answers, SandboxError)
that a real sandbox cannot be asked to produce, and the integration test needs *some* live sandbox even where
the kit's ``sandbox`` service is not usable. It runs Python in a subprocess with a wall-clock timeout and answers
with SandboxFusion's response schema (``status``, ``run_result.{status,stdout,stderr,return_code}``), including
the partial output of a run that timed out. Not a security boundary: loopback only, tests only.

Fault injection: ``POST /_control`` with ``{"fail_next": [503, 504], "delay_s": 0.5, "raw_next": ["not json"]}``
queues HTTP statuses to answer the next requests with, a delay before each answer, or raw bodies to send.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def run_python(code: str, run_timeout: float) -> dict[str, Any]:
    """Run ``code`` like SandboxFusion's python runner; returns its ``run_result`` object."""
    with tempfile.TemporaryDirectory(prefix="retool-stub-") as tmp:
        path = os.path.join(tmp, "main.py")
        with open(path, "w") as f:
            f.write(code)
        env = {"PATH": os.environ.get("PATH", ""), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, path],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=run_timeout)
            status, return_code = "Finished", proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            status, return_code = "TimeLimitExceeded", None
    return {
        "status": status,
        "execution_time": time.monotonic() - start,
        "return_code": return_code,
        "stdout": stdout,
        "stderr": stderr,
    }


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fail_next: list[int] = []
        self.raw_next: list[str] = []
        self.delay_s = 0.0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0


class _Handler(BaseHTTPRequestHandler):
    server: StubServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        state = self.server.state
        if self.path == "/_control":
            control = json.loads(raw or b"{}")
            with state.lock:
                state.fail_next.extend(control.get("fail_next", []))
                state.raw_next.extend(control.get("raw_next", []))
                state.delay_s = float(control.get("delay_s", state.delay_s))
            self._send(200, b"{}")
            return
        if self.path != "/run_code":
            self._send(404, b'{"detail": "Not Found"}')
            return
        request = json.loads(raw)
        with state.lock:
            state.requests.append(request)
            fail = state.fail_next.pop(0) if state.fail_next else None
            body = state.raw_next.pop(0) if state.raw_next and fail is None else None
            delay = state.delay_s
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            status, payload = self._answer(request, fail, body, delay)
        finally:
            # before the answer goes out: once the client has it, it may send its next request, and a count still
            # holding this one would see three in flight under a bound of two (seen on a loaded machine)
            with state.lock:
                state.in_flight -= 1
        self._send(status, payload)

    def _answer(self, request: dict[str, Any], fail: int | None, body: str | None, delay: float) -> tuple[int, bytes]:
        """(HTTP status, body) of the answer; sent by the caller once this request no longer counts as in flight."""
        if delay:
            time.sleep(delay)
        if fail is not None:
            return fail, json.dumps({"detail": f"injected {fail}"}).encode()
        if body is not None:
            return 200, body.encode()
        if request.get("language") != "python":
            answer = {"status": "SandboxError", "message": f"language {request.get('language')!r} not supported"}
        else:
            run = run_python(request["code"], float(request.get("run_timeout") or 10))
            failed = run["status"] != "Finished" or run["return_code"] != 0
            answer = {
                "status": "Failed" if failed else "Success",
                "message": "",
                "compile_result": None,
                "run_result": run,
                "executor_pod_name": None,
                "files": {},
            }
        return 200, json.dumps(answer).encode()


class StubServer(ThreadingHTTPServer):
    """The stub, serving from a daemon thread; ``url`` is its ``/run_code`` endpoint."""

    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.state = _State()
        self._thread = threading.Thread(target=self.serve_forever, name="sandbox-stub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/run_code"

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def inject(self, fail_next: Sequence[int] = (), raw_next: Sequence[str] = (), delay_s: float | None = None) -> None:
        with self.state.lock:
            self.state.fail_next.extend(fail_next)
            self.state.raw_next.extend(raw_next)
            if delay_s is not None:
                self.state.delay_s = delay_s

    def reset(self) -> None:
        with self.state.lock:
            self.state.fail_next.clear()
            self.state.raw_next.clear()
            self.state.delay_s = 0.0
            self.state.requests.clear()
            self.state.max_in_flight = 0


if __name__ == "__main__":
    server = StubServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0).start()
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
