"""The code-interpreter tool's config defaults, defined once: the tool (:mod:`recipes.retool.tool`), its client
(:mod:`recipes.retool.sandbox_client`) and the launcher's sandbox-capacity check (:mod:`recipes.launch.sizing.capacity`)
read them from here. Stdlib only, so the launcher can count a tool config's requests without importing verl (which
``tool.py`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``default_timeout``: seconds the sandbox may compile and run one call.
DEFAULT_TIMEOUT_S = 30.0
#: ``max_concurrency``: threads, so requests in flight, per tool object (one per AgentLoopWorker).
DEFAULT_MAX_CONCURRENCY = 64
#: The HTTP timeout's slack beyond compile + run (:func:`http_timeout_s`).
REQUEST_MARGIN_S = 10.0


def run_timeout_s(config: Mapping[str, Any]) -> float:
    """A tool config's ``default_timeout``."""
    return float(config.get("default_timeout", DEFAULT_TIMEOUT_S))


def max_concurrency(config: Mapping[str, Any]) -> int:
    """A tool config's ``max_concurrency``; verl's ``num_workers`` is accepted as an alias."""
    return int(config.get("max_concurrency", config.get("num_workers", DEFAULT_MAX_CONCURRENCY)))


def http_timeout_s(run_timeout: float, margin_s: float = REQUEST_MARGIN_S) -> float:
    """How long the client waits for one answer: compile + run + slack, as verl computes it."""
    return 2 * run_timeout + margin_s
