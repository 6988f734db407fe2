"""Rollout traces (``actor_rollout_ref.rollout.trace.backend``): mlflow's file store, kept with the run, offline.

verl 0.6.1 traces every agent-loop rollout (the model's turns, each tool call and its output) when this key is set;
the AgentLoopWorkers call ``RolloutTraceConfig.init`` (verl/experimental/agent_loop/agent_loop.py:302-308), which
for ``mlflow`` reads ``MLFLOW_TRACKING_URI``, default ``sqlite:////tmp/mlruns.db`` (verl/utils/rollout_trace.py:78).
That default is lost with a ``--rm`` container, is a different file on every node, and needs SQLAlchemy. The launcher
therefore points ``MLFLOW_TRACKING_URI`` at ``file://<checkpoint dir>/mlruns`` (the checkpoint root is the mount
that survives, and shared between nodes in a multi-node run) in the Ray job's environment, unless the user set one.

mlflow 3.x refuses its file store unless ``MLFLOW_ALLOW_FILE_STORE=true`` ("The filesystem tracking backend ... is in
maintenance mode", raised by ``FileStore.__init__`` in mlflow/store/tracking/file_store.py of mlflow-skinny 3.17.2),
so that is set beside a ``file:`` URI. ``weave`` needs a W&B login and the network; the kit leaves it to verl.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

BACKEND_KEY = "actor_rollout_ref.rollout.trace.backend"
URI_ENV = "MLFLOW_TRACKING_URI"
ALLOW_FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
#: The distribution the kit pins for traces (pins.env PY_PINS): the tracking client without mlflow's server and UI.
MLFLOW_DIST = "mlflow-skinny"


def backend(cfg: DictConfig) -> str | None:
    value = OmegaConf.select(cfg, BACKEND_KEY)
    return str(value) if value not in (None, "", "null") else None


def store_uri(ckpt_dir: str, environ: Mapping[str, str]) -> str:
    """The user's ``MLFLOW_TRACKING_URI``, else the run's own file store beside its checkpoints."""
    return environ.get(URI_ENV, "").strip() or Path(ckpt_dir, "mlruns").absolute().as_uri()


def job_env(cfg: DictConfig, ckpt_dir: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What the Ray job's environment (and the driver's) needs for ``cfg``'s trace backend (empty: no mlflow)."""
    if backend(cfg) != "mlflow":
        return {}
    uri = store_uri(ckpt_dir, environ)
    env = {URI_ENV: uri}
    if uri.startswith("file:"):
        env[ALLOW_FILE_STORE_ENV] = "true"
    return env


def problems(cfg: DictConfig) -> list[str]:
    """A backend verl cannot start: every AgentLoopWorker would die at start-up with an ImportError."""
    name = backend(cfg)
    if name is None:
        return []
    if name not in ("mlflow", "weave"):
        return [f"{BACKEND_KEY}={name}: verl 0.6.1 traces to mlflow or weave"]
    if importlib.util.find_spec(name) is None:
        dist = MLFLOW_DIST if name == "mlflow" else name
        return [f"{BACKEND_KEY}={name} but {name} is not installed in this Python: pip install {dist} (pins.env)"]
    return []


def describe(cfg: DictConfig, env: Mapping[str, str]) -> str:
    """The dry-run row: where traces go and how to open them."""
    name = backend(cfg)
    if name is None:
        return f"off (set {BACKEND_KEY}=mlflow)"
    uri = env.get(URI_ENV)
    if name != "mlflow" or not uri:
        return name
    return f"mlflow -> {uri} (open: {ALLOW_FILE_STORE_ENV}=true mlflow ui --backend-store-uri {uri})"


def rollout_traces(store: Path, tool_span: str = "CodeInterpreterTool.execute") -> tuple[int, int]:
    """``(traces, traces with a span named tool_span)`` in a file store: what a traced run actually recorded.

    ``tool_span`` is the name verl's ``rollout_trace_op`` gives the kit tool's ``execute`` (its ``__qualname__``,
    verl/utils/rollout_trace.py); a span file that cannot be read counts as a trace without a tool call."""
    traces = with_tool = 0
    for info in store.glob("*/traces/*/trace_info.yaml"):
        traces += 1
        spans = info.parent / "artifacts" / "traces.json"
        try:
            names = {span.get("name") for span in json.loads(spans.read_text()).get("spans", [])}
        except (OSError, ValueError, AttributeError):
            continue
        with_tool += tool_span in names
    return traces, with_tool
