"""The code sandbox as the smoke runs it: started on a loopback port, tied to the pipeline's life, counted, stopped.

Why the counters: the RL stage must prove that tool calls reached the sandbox (the policy emitted well-formed calls
and verl's agent loop executed them), and the sandbox's own Prometheus counters say so independently of what the
trainer logged.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from recipes.launch.supervision.process_group import kill_group
from recipes.smoke.supervisor import StageError, free_port, http_get, popen_tied

READY_TIMEOUT_S = 60.0


def sandbox_command(port: int | str, workers: int = 2) -> list[str]:
    """The kit's sandbox on loopback (``python -m sandbox serve --keep-alive``) with ``workers`` warm workers.

    ``--keep-alive``: the process started is a supervisor that restarts the server if it dies during RL; ``stop``
    ends its process group, the supervisor and the server together."""
    return [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--keep-alive",  # a killed server comes back on the same port (sandbox/keepalive.py)
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def sandbox_counters(metrics_text: str) -> dict[str, int]:
    """The sandbox's Prometheus text -> request counts: ``calls`` (answered /run_code requests), ``ok``,
    ``code_errors`` (code ran and failed: SandboxFusion's ``Failed``), ``sandbox_errors``, ``refused``,
    ``timeouts``; ``failures`` = sandbox errors + refused (the sandbox's fault, not the code's)."""

    def value(pattern: str) -> int:
        return sum(int(float(m)) for m in re.findall(pattern + r"\s+([0-9.e+]+)$", metrics_text, re.M))

    p = "retool_sandbox"
    out = {
        "ok": value(rf'^{p}_requests_total\{{status="Success"\}}'),
        "code_errors": value(rf'^{p}_requests_total\{{status="Failed"\}}'),
        "sandbox_errors": value(rf'^{p}_requests_total\{{status="SandboxError"\}}'),
        "refused": value(rf"^{p}_refused_total\{{[^}}]*\}}"),
        "timeouts": value(rf"^{p}_timeouts_total"),
    }
    out["calls"] = out["ok"] + out["code_errors"] + out["sandbox_errors"]
    out["failures"] = out["sandbox_errors"] + out["refused"]
    return out


class SandboxService:
    """One sandbox process: ``start`` waits until it answers, ``stats`` reads its counters, ``stop`` ends it.

    ``pid_file`` records the server's pid while it runs (for an operator; it dies with the pipeline anyway).
    """

    def __init__(self, log: Path, pid_file: Path, env: dict[str, str]) -> None:
        self.log, self.pid_file, self.env = log, pid_file, env
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def launch(self, port: int | None = None) -> None:
        """Start the process on ``port`` (default: a free one) without waiting for it; a second call does nothing.
        The pipeline launches it while an earlier stage runs (its head start), and :meth:`start` waits."""
        if self.proc is not None:
            return
        port = free_port() if port is None else port
        self.url = f"http://127.0.0.1:{port}"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as out:
            self.proc = popen_tied(sandbox_command(port), stdout=out, env=self.env)
        self.pid_file.write_text(f"{self.proc.pid}\n")

    def start(self, port: int | None = None) -> dict[str, Any]:
        """Launch (unless launched) and wait for ``/v1/ping``; returns ``/health`` (parsed if JSON)."""
        self.launch(port)
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise StageError(f"sandbox: exited with status {self.proc.returncode} (log: {self.log})")
            try:
                http_get(f"{self.url}/v1/ping", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise StageError(
                        f"sandbox: no answer on {self.url}/v1/ping in {READY_TIMEOUT_S:.0f} s (log: {self.log})"
                    ) from None
                time.sleep(0.1)
        health = http_get(f"{self.url}/health")
        try:
            return {"pid": self.proc.pid, "health": json.loads(health)}
        except ValueError:
            return {"pid": self.proc.pid, "health": health}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stats(self) -> dict[str, int] | None:
        """The request counters, or None when the sandbox is not running or does not answer."""
        if not self.running:
            return None
        try:
            return sandbox_counters(http_get(f"{self.url}/metrics"))
        except OSError:
            return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc, grace_s=5)
        self.pid_file.unlink(missing_ok=True)
