"""How many code-tool requests a recipe keeps in flight against one sandbox, and whether the sandbox takes them.

Issue 14 item 2: the tool allows ``max_concurrency`` (64) requests per AgentLoopWorker and the recipes run
``agent.num_workers`` (16) of them, so up to 1,024 requests arrive at once; a sandbox started as the README used to
say (``--workers 8 --max-queue 256``) takes 264 and answers the rest 503, which the model reads as "sandbox
unavailable". The arithmetic, with its sources:

* per AgentLoopWorker: the kit's tool runs requests in a thread pool of ``max_concurrency`` threads
  (``CodeInterpreterTool.__init__`` in ``recipes/retool/tool.py``; the default in ``recipes/retool/tool_defaults.py``,
  read here too); verl's own SandboxFusionTool uses ``num_workers`` threads (default 10)
  behind one cluster-wide rate limiter of ``rate_limit`` (default 10) (verl 0.6.1
  ``verl/tools/sandbox_fusion_tools.py`` L65-71, L88-94, L134-142);
* per node: verl 0.6.1 places AgentLoopWorker i on node ``i % nodes`` (``verl/experimental/agent_loop/
  agent_loop.py`` L736-739), so with one sandbox per node (a loopback URL) the busiest node's sandbox serves
  ceil(num_workers / nnodes) workers; a shared sandbox (a routable URL) serves all of them;
* the sandbox takes ``workers + max_queue`` at once (its ``/health``: ``workers``, ``max_queue``, ``capacity``).

The dry run warns with both numbers and the fix; it is an error when the sandbox answered and holds at most half of
what the recipe sends (then most of a step's tool calls would be refused).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import math
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf

from recipes.launch.run_inputs.paths import Problem
from recipes.retool import tool_defaults

KIT_TOOL = "recipes.retool.tool.CodeInterpreterTool"
VERL_SANDBOX_TOOL = "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
VERL_TOOL_DEFAULTS = {"num_workers": 10, "rate_limit": 10}  # verl 0.6.1 verl/tools/sandbox_fusion_tools.py L134-135
#: Enough finished requests in /health for its mean run time to say something about draining a burst.
MIN_SAMPLES_FOR_DRAIN = 20


@dataclass(frozen=True)
class ToolLimit:
    """One sandbox-backed tool of a tool config: what a single AgentLoopWorker keeps in flight."""

    class_name: str
    per_worker: int
    global_cap: int | None = None  # a cluster-wide limit on top (verl's SandboxFusionTool rate limiter)
    http_timeout_s: float | None = None  # how long the client waits for one answer, when known


def tool_limits(path: str | Path) -> list[ToolLimit]:
    """The sandbox-backed tools of a verl tool config (entries with a ``sandbox_fusion_url``)."""
    data = OmegaConf.to_container(OmegaConf.load(str(path)), resolve=True)
    limits: list[ToolLimit] = []
    for tool in (data or {}).get("tools") or []:  # type: ignore[union-attr]
        config = tool.get("config") or {}
        if not config.get("sandbox_fusion_url"):
            continue
        name = str(tool.get("class_name", ""))
        if name == VERL_SANDBOX_TOOL:
            per_worker = int(config.get("num_workers", VERL_TOOL_DEFAULTS["num_workers"]))
            cap = int(config.get("rate_limit", VERL_TOOL_DEFAULTS["rate_limit"]))
            limits.append(ToolLimit(name, per_worker, cap if config.get("enable_global_rate_limit", True) else None))
            continue
        timeout = tool_defaults.http_timeout_s(tool_defaults.run_timeout_s(config)) if name == KIT_TOOL else None
        limits.append(ToolLimit(name, tool_defaults.max_concurrency(config), None, timeout))
    return limits


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Demand:
    """Tool requests in flight against one sandbox at the peak of a rollout."""

    tool_config: str
    nnodes: int
    agent_workers: int
    per_worker: int
    shared: bool  # one sandbox for the cluster (routable URL) rather than one per node (loopback URL)
    global_cap: int | None = None
    http_timeout_s: float | None = None

    @property
    def workers_served(self) -> int:
        return self.agent_workers if self.shared else math.ceil(self.agent_workers / self.nnodes)

    @property
    def per_sandbox(self) -> int:
        total = self.workers_served * self.per_worker
        return min(total, self.global_cap) if self.global_cap else total

    def explain(self) -> str:
        where = (
            "one sandbox for the cluster"
            if self.shared or self.nnodes == 1
            else f"one sandbox per node, {self.nnodes} nodes: the busiest serves {self.workers_served} workers"
        )
        text = f"{self.workers_served} agent-loop workers x max_concurrency {self.per_worker}"
        if self.global_cap and self.global_cap < self.workers_served * self.per_worker:
            text += f", capped by the tool's global rate_limit {self.global_cap}"
        return f"{text} = {self.per_sandbox} tool calls in flight per sandbox ({where})"


def demand(cfg: DictConfig, url: str) -> Demand | None:
    """The recipe's peak in-flight tool calls per sandbox; None when the config runs no sandbox tool."""
    rollout = cfg.actor_rollout_ref.rollout
    path = OmegaConf.select(rollout, "multi_turn.tool_config_path")
    if not OmegaConf.select(rollout, "multi_turn.enable") or not path:
        return None
    limits = tool_limits(str(path))
    if not limits:
        return None
    caps = [t.global_cap for t in limits if t.global_cap]
    timeouts = [t.http_timeout_s for t in limits if t.http_timeout_s]
    return Demand(
        tool_config=str(path),
        nnodes=max(1, int(cfg.trainer.nnodes)),
        agent_workers=int(OmegaConf.select(rollout, "agent.num_workers") or 1),
        per_worker=sum(t.per_worker for t in limits),
        shared=not is_loopback(url),
        global_cap=sum(caps) if caps else None,
        http_timeout_s=min(timeouts) if timeouts else None,
    )


@dataclass(frozen=True)
class Capacity:
    """What the kit's sandbox reports in /health."""

    workers: int
    max_queue: int
    answered: int = 0
    mean_execution_s: float = 0.0

    @property
    def total(self) -> int:
        return self.workers + self.max_queue


def read_capacity(url: str, timeout_s: float = 5.0) -> Capacity | None:
    """GET the sandbox's /health (no proxy: it is an internal service); None if unreachable or not the kit's."""
    found = probe_capacity(url, timeout_s)
    return found if isinstance(found, Capacity) else None


def probe_capacity(url: str, timeout_s: float = 5.0) -> Capacity | str:
    """The sandbox's capacity from its /health, or why there is none: it does not answer, or it is not the kit's."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL"
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), timeout=timeout_s)
    try:
        conn.request("GET", "/health")
        raw = conn.getresponse().read()
    except (OSError, http.client.HTTPException) as exc:
        return f"it does not answer ({type(exc).__name__}: {exc}): is it running?"
    finally:
        conn.close()
    try:
        body = json.loads(raw)
        return Capacity(
            int(body["workers"]),
            int(body["max_queue"]),
            int(body.get("answered", 0)),
            float(body.get("mean_execution_s", 0.0)),
        )
    except (ValueError, KeyError, TypeError):
        return "its /health reports no workers/max_queue (not the kit's sandbox?)"


def compare(need: Demand, have: Capacity | str | None, url: str) -> list[Problem]:
    """The verdict for one sandbox: nothing, a warning, or an error (reachable and at most half of the need).
    ``have`` is the capacity, or why it is unknown (:func:`probe_capacity`)."""
    n = need.per_sandbox
    if not isinstance(have, Capacity):
        why = have or "its /health reports no workers/max_queue"
        return [
            Problem(
                f"sandbox {url}: capacity unknown ({why}); the recipe sends up to "
                f"{n} at once: {need.explain()}\n  -> make sure it queues that many, e.g. the kit's sandbox: "
                f"retool-sandbox serve --workers W --max-queue {n} (workers + max-queue >= {n})",
                error=False,
            )
        ]
    problems: list[Problem] = []
    if have.total < n:
        problems.append(
            Problem(
                f"sandbox {url} takes {have.total} requests at once ({have.workers} workers + max-queue "
                f"{have.max_queue}) but the recipe sends up to {n}: {need.explain()}; the rest get 503 and the model "
                f"reads 'sandbox unavailable'\n  -> restart it with --max-queue {n - have.workers} (or more "
                f"--workers), or lower max_concurrency in {need.tool_config}",
                error=2 * have.total <= n,
            )
        )
    if need.http_timeout_s and have.answered >= MIN_SAMPLES_FOR_DRAIN and have.mean_execution_s > 0:
        drain = math.ceil(n / have.workers) * have.mean_execution_s
        if drain > need.http_timeout_s:
            problems.append(
                Problem(
                    f"sandbox {url}: {n} calls at its mean run time of {have.mean_execution_s:.2f} s on "
                    f"{have.workers} workers take ~{drain:.0f} s to drain, longer than the tool's "
                    f"{need.http_timeout_s:.0f} s HTTP timeout: the last ones would read 'no answer'\n"
                    f"  -> give it more --workers (about {math.ceil(n * have.mean_execution_s / need.http_timeout_s)})",
                    error=False,
                )
            )
    return problems


def check(cfg: DictConfig, url: str) -> list[Problem]:
    """The dry run's capacity check (``recipes.launch.planning.plan._check_paths``, RL, after the sandbox answered)."""
    try:
        need = demand(cfg, url)
    except Exception as exc:  # noqa: BLE001  (an unreadable tool config is reported, not a planner crash)
        return [Problem(f"tool config: could not count the sandbox requests in flight: {exc}", error=False)]
    if need is None:
        return []
    return compare(need, probe_capacity(url), url)


# -- the rollout servers: generate calls in flight per replica against what one server actor runs at once

#: Ray runs at most this many calls of an async actor at once unless the actor is created with ``max_concurrency``
#: (ray.actor.ActorClass.options: "1000 for asyncio execution").
RAY_ASYNC_ACTOR_CONCURRENCY = 1000
#: Calls a rollout server actor keeps for its control methods (verl ``replica.py`` CONTROL_METHOD_CONCURRENCY, 16,
#: added by patch 0028 with ``RolloutReplica.max_concurrency``).
SERVER_CONTROL_CALLS = 16


def server_admits(max_num_seqs: int) -> int:
    """Generate calls one rollout server actor runs at once: patch 0028's ``RolloutReplica.max_concurrency``
    (tests/recipes/test_capacity.py holds the two to the same numbers)."""
    return max(RAY_ASYNC_ACTOR_CONCURRENCY, max_num_seqs + SERVER_CONTROL_CALLS)
