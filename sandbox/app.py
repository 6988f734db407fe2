"""HTTP layer (Starlette): ``POST /run_code``, ``GET /v1/ping``, ``GET /health``, ``GET /metrics``.

Every answer to /run_code is SandboxFusion-shaped JSON, including refusals: malformed JSON → 400, wrong field
types or an unsupported language → 422, overload → 503 (configurable), all with ``status: SandboxError`` and a
message saying what was wrong; never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from sandbox.api_models import (
    SANDBOX_FUSION_LANGUAGES,
    SUPPORTED_LANGUAGES,
    RunCodeRequest,
    error_response,
    run_code_response,
)
from sandbox.executor import Executor, Overloaded
from sandbox.isolation import FS_HOST, FS_LANDLOCK, FS_MOUNTS, IsolationPlan, plan_isolation
from sandbox.metrics import Metrics
from sandbox.settings import SandboxSettings
from sandbox.worker_client import Job

log = logging.getLogger("sandbox")


class BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise BodyTooLarge
    return bytes(chunks)


def _describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(x) for x in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "invalid request: " + "; ".join(parts)


class SandboxService:
    """State shared by the routes: settings, isolation decision, executor, metrics."""

    def __init__(self, settings: SandboxSettings, plan: IsolationPlan | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.plan: IsolationPlan | None = plan
        self.executor: Executor | None = None

    async def start(self) -> None:
        if self.plan is None:
            self.plan = plan_isolation(self.settings)
        self.executor = Executor(self.settings, self.plan, self.metrics)
        await self.executor.start()
        labels = self.isolation_labels()
        # INFO, and only now: the CLI binds the port before the app starts, so "ready" is true when it is logged.
        log.info(
            "retool-sandbox ready: isolation=%s (%s), privilege=%s, network_isolated=%s, filesystem=%s, "
            "workers=%d, max_queue=%d, %s",
            self.plan.mode,
            self.plan.reason,
            labels["privilege"],
            labels["network_isolated"],
            labels["filesystem"],
            self.settings.workers,
            self.settings.max_queue,
            "cold (fresh interpreter per request)" if self.settings.cold else "warm fork-server",
        )
        note = self.executor.worker_info.get("privilege_note")
        if note:
            log.warning("retool-sandbox: %s", note)
        if labels["filesystem"] == "host":
            log.warning(
                "retool-sandbox: no filesystem allowlist (%s): request code can read every file its uid can read",
                self.plan.filesystem_reason or "bwrap and Landlock unavailable",
            )
        missing = [m for m in self.plan.allowlist.importable if m not in self.executor.worker_info.get("preloaded", [])]
        if missing and not self.settings.cold:
            log.warning(
                "retool-sandbox: importable on the host but not inside the sandbox: %s (add their location with "
                "--allow-path)",
                ", ".join(missing),
            )

    async def stop(self) -> None:
        if self.executor is not None:
            await self.executor.stop()

    def isolation_labels(self) -> dict[str, str]:
        info = self.executor.worker_info if self.executor else {}
        return {
            "mode": self.plan.mode if self.plan else "starting",
            "privilege": str(info.get("privilege_mode", "unknown")),
            "network_isolated": str(bool(info.get("network_isolated"))).lower(),
            "execution": "cold" if self.settings.cold else "warm",
            "filesystem": str(info.get("filesystem", "starting")),
        }

    def filesystem_health(self, info: dict[str, Any]) -> dict[str, Any]:
        """What request code can see of the host's files, as the workers confirmed it."""
        assert self.plan is not None
        mode = info.get("filesystem")
        described = {"mounts": FS_MOUNTS, "landlock": FS_LANDLOCK}.get(str(mode), FS_HOST)
        reason = self.plan.filesystem_reason
        if mode == "host" and self.plan.filesystem == FS_LANDLOCK:
            reason = "Landlock did not hide / in the worker's self-test"
        return {
            "mode": str(mode or "starting"),
            "description": described,
            "reason": reason,
            "writable": "the run's own directory only" if mode in ("mounts", "landlock") else "whatever the uid may",
            "landlock_abi": info.get("landlock_abi", 0),
            **self.plan.allowlist.describe(),
        }

    # -- routes -------------------------------------------------------------------------------------------------

    async def run_code(self, request: Request) -> Response:
        try:
            raw = await _read_body(request, self.settings.max_body_mb * 1024 * 1024)
        except BodyTooLarge:
            return self._refuse(413, f"request body larger than {self.settings.max_body_mb} MB")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return self._refuse(400, f"request body is not valid JSON: {exc}")
        if not isinstance(data, dict):
            return self._refuse(422, "request body must be a JSON object")
        try:
            body = RunCodeRequest.model_validate(data)
        except ValidationError as exc:
            return self._refuse(422, _describe_validation_error(exc))
        if body.language not in SUPPORTED_LANGUAGES:
            known = "is a SandboxFusion language but " if body.language in SANDBOX_FUSION_LANGUAGES else ""
            return self._refuse(
                422, f"language {body.language!r} {known}is not supported by this sandbox (supported: python)"
            )
        if body.run_timeout > self.settings.max_run_timeout:
            limit = self.settings.max_run_timeout
            return self._refuse(422, f"run_timeout {body.run_timeout} exceeds the maximum {limit}")
        memory = body.memory_limit_MB if body.memory_limit_MB > 0 else self.settings.default_memory_mb
        job = Job(
            code=body.code,
            run_timeout=body.run_timeout,
            memory_limit_mb=memory,
            stdin=body.stdin.encode("utf-8", errors="surrogatepass") if body.stdin else None,
            files=body.files,
            fetch_files=body.fetch_files,
        )
        assert self.executor is not None
        started = time.monotonic()
        try:
            outcome = await self.executor.run(job)
        except Overloaded as exc:
            return self._refuse(self.settings.overload_status, str(exc))
        except Exception as exc:  # noqa: BLE001 - SandboxFusion answers internal failures as SandboxError
            log.exception("internal error while running a request")
            payload = error_response(f"internal sandbox error: {exc!r}")
            self.metrics.observe(payload["status"], time.monotonic() - started)
            return JSONResponse(payload)
        payload = run_code_response(outcome.run_result(), outcome.message, outcome.files)
        self.metrics.observe(payload["status"], time.monotonic() - started, outcome.execution_time)
        self.metrics.timeouts += outcome.status == "TimeLimitExceeded"
        self.metrics.truncated += outcome.truncated
        return JSONResponse(payload)

    def _refuse(self, http_status: int, message: str) -> JSONResponse:
        self.metrics.http_errors[http_status] += 1
        return JSONResponse(error_response(message), status_code=http_status)

    async def ping(self, _request: Request) -> Response:
        return JSONResponse("pong")

    async def health(self, _request: Request) -> Response:
        ready = self.executor is not None and self.executor.started
        info: dict[str, Any] = dict(self.executor.worker_info) if self.executor else {}
        body = {
            "status": "ok" if ready else "starting",
            "isolation": self.isolation_labels(),
            "isolation_reason": self.plan.reason if self.plan else "",
            "filesystem": self.filesystem_health(info) if self.plan and ready else {},
            "privilege_note": info.get("privilege_note", ""),
            "tmp_root": self.plan.tmp_root if self.plan else "",
            "workers": self.settings.workers,
            "workers_ready": self.executor.pool.ready if self.executor and self.executor.pool else None,
            "max_queue": self.settings.max_queue,
            # Requests it takes at once without refusing: workers running + max_queue waiting (the launcher's
            # capacity check compares this with the recipe's in-flight tool calls).
            "capacity": self.settings.workers + self.settings.max_queue,
            "answered": sum(self.metrics.requests.values()),
            "mean_execution_s": round(self.metrics.mean_execution_s, 4),
            "in_flight": self.metrics.in_flight,
            "queued": self.metrics.queued,
            "preloaded": info.get("preloaded", []),
            "output_limit_bytes": self.settings.output_limit_bytes,
        }
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics_text(self, _request: Request) -> Response:
        pool = self.executor.pool if self.executor else None
        text = self.metrics.render(
            self.isolation_labels(), pool.ready if pool else 0, self.settings.workers, self.settings.max_queue
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def create_app(settings: SandboxSettings, plan: IsolationPlan | None = None) -> Starlette:
    """The ASGI app; ``plan`` is the isolation decision when the caller already took it (the CLI does)."""
    service = SandboxService(settings, plan)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(
        routes=[
            Route("/run_code", service.run_code, methods=["POST"]),
            Route("/v1/ping", service.ping, methods=["GET"]),
            Route("/health", service.health, methods=["GET"]),
            Route("/metrics", service.metrics_text, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.service = service
    return app
