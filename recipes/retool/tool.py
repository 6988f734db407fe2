"""Code-interpreter tool for verl's ToolAgentLoop (a ``BaseTool``), backed by a SandboxFusion-compatible sandbox.

Tool YAML (``recipes/retool/code_interpreter.yaml``)::

    tools:
      - class_name: recipes.retool.tool.CodeInterpreterTool
        config: {type: native, sandbox_fusion_url: "http://127.0.0.1:8080/run_code", ...}

No ``tool_schema`` in the YAML: verl 0.6.1 passes ``None`` then (verl/tools/utils/tool_registry.py:109-111) and the
tool uses :data:`recipes.retool.schema.TOOL_SCHEMA`, the one copy the SFT data and RL prompts use too.

Per call: the code is taken from the ``code`` argument (the fenced python block(s) if fenced), a bare last
expression is displayed notebook-style (:mod:`recipes.retool.notebook`), the sandbox runs it
(:mod:`recipes.retool.sandbox_client`), and the model reads output or an explicit status note
(:mod:`recipes.retool.tool_output`). verl creates one tool object per AgentLoopWorker process; its requests run in a
thread pool of ``max_concurrency`` threads, which is the per-worker concurrency bound.

Config keys (defaults; the first two's in :mod:`recipes.retool.tool_defaults`, which the launcher reads too):
``default_timeout`` (30 s), ``max_concurrency`` (64; verl's ``num_workers`` is accepted as an alias),
``sandbox_fusion_url`` (required), ``memory_limit_mb`` (-1: the sandbox's own default),
``max_retries`` (3), ``retry_backoff_s`` (1.0), ``max_output_chars`` (2000), ``default_language`` (python).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from recipes.retool import tool_defaults
from recipes.retool.notebook import prepare_code
from recipes.retool.sandbox_client import SandboxClient, SandboxResult
from recipes.retool.schema import TOOL_SCHEMA
from recipes.retool.tool_output import render_result

logger = logging.getLogger(__name__)

_COUNTERS = ("calls", "errors", "timeouts", "sandbox_errors", "unavailable", "retries")


class CodeInterpreterTool(BaseTool):
    """Runs the model's Python in the sandbox and returns what a notebook cell would show."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        if tool_schema is None:
            tool_schema = OpenAIFunctionToolSchema.model_validate(TOOL_SCHEMA)
        super().__init__(config, tool_schema)
        self.run_timeout_s = tool_defaults.run_timeout_s(config)
        self.max_output_chars = int(config.get("max_output_chars", 2000))
        self.max_concurrency = tool_defaults.max_concurrency(config)
        self.client = SandboxClient(
            str(config.get("sandbox_fusion_url") or ""),
            language=str(config.get("default_language", "python")),
            run_timeout_s=self.run_timeout_s,
            memory_limit_mb=int(config.get("memory_limit_mb", -1)),
            max_retries=int(config.get("max_retries", 3)),
            retry_backoff_s=float(config.get("retry_backoff_s", 1.0)),
        )
        self._executor = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="retool-sandbox")
        self._lock = threading.Lock()
        self._totals: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self._totals["latency_s_sum"] = 0.0
        self._totals["latency_s_max"] = 0.0

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        return instance_id or str(uuid4()), ToolResponse()

    def _metrics(self, result: SandboxResult | None, latency_s: float) -> dict[str, Any]:
        """Per-call counters (sum them across calls) plus the call's latency; also added to :meth:`totals`."""
        kind = result.kind if result is not None else "invalid_call"
        metrics: dict[str, Any] = {
            "calls": 1,
            "errors": int(kind == "finished" and result.return_code not in (0, None)),
            "timeouts": int(kind == "timeout"),
            "sandbox_errors": int(kind in ("sandbox_error", "invalid_call")),
            "unavailable": int(kind == "unavailable"),
            "retries": result.retries if result is not None else 0,
            "latency_s": latency_s,
            "status": kind,
        }
        with self._lock:
            for key in _COUNTERS:
                self._totals[key] += metrics[key]
            self._totals["latency_s_sum"] += latency_s
            self._totals["latency_s_max"] = max(self._totals["latency_s_max"], latency_s)
        return metrics

    def totals(self) -> dict[str, float]:
        """Counters over every call this tool object served (for logs and tests)."""
        with self._lock:
            totals = dict(self._totals)
        totals["latency_s_mean"] = totals["latency_s_sum"] / totals["calls"] if totals["calls"] else 0.0
        return totals

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        start = time.monotonic()
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str) or not code.strip():
            text = f"[invalid call: {self.name} needs a non-empty string argument 'code']"
            return ToolResponse(text=text), None, self._metrics(None, time.monotonic() - start)
        script = prepare_code(code)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor, self.client.run, script, self.run_timeout_s)
        if result.kind in ("sandbox_error", "unavailable"):
            logger.warning("code interpreter: %s: %s", result.kind, result.message)
        text = render_result(result, self.run_timeout_s, self.max_output_chars)
        return ToolResponse(text=text), None, self._metrics(result, time.monotonic() - start)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        return None
