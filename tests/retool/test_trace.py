"""Rollout traces (recipes/launch/supervision/trace.py): the launcher's environment makes verl's mlflow tracing write a
file store beside the checkpoints, offline, and the kit tool's calls appear in it as spans."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit_testing import interpreter_stack, kit_env
from omegaconf import OmegaConf

from recipes.launch.planning import plan, report
from recipes.launch.run_inputs import inputs
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.launch.supervision import trace

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

TRACED = (f"{trace.BACKEND_KEY}=mlflow",)


def _plan(*overrides: str, **environ: str) -> plan.Plan:
    env = {"HOME": "/nonexistent/kit-home", "CKPT_DIR": "/shared/ckpt/run1", **environ}
    built = plan.build(RECIPES["qwen3_4b_dapo"], "a3", STACK, overrides, path_check=False, environ=env)
    assert built.cfg is not None, built.errors
    return built


def _job_env(built: plan.Plan) -> dict:
    return dict(OmegaConf.select(built.cfg, inputs.RL_ENV_KEY) or {})


def test_mlflow_traces_go_to_a_file_store_beside_the_checkpoints() -> None:
    built = _plan(*TRACED)
    uri = "file:///shared/ckpt/run1/mlruns"
    assert _job_env(built)[trace.URI_ENV] == uri and _job_env(built)[trace.ALLOW_FILE_STORE_ENV] == "true"
    assert built.env[trace.URI_ENV] == uri  # the driver too (trainer.logger=mlflow reads the same variable)
    row = dict(report.rows(built))["rollout trace"]
    assert row.startswith(f"mlflow -> {uri}") and "mlflow ui --backend-store-uri" in row
    assert not any("trace" in e for e in built.errors)


def test_a_users_tracking_uri_wins_and_non_file_stores_need_no_opt_in() -> None:
    built = _plan(*TRACED, MLFLOW_TRACKING_URI="http://mlflow.internal:5000")
    assert _job_env(built)[trace.URI_ENV] == "http://mlflow.internal:5000"
    assert trace.ALLOW_FILE_STORE_ENV not in _job_env(built)


def test_no_backend_no_environment() -> None:
    built = _plan()
    assert trace.URI_ENV not in _job_env(built) and trace.URI_ENV not in built.env
    assert dict(report.rows(built))["rollout trace"].startswith("off")


def test_backend_that_cannot_start_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert any("verl 0.6.1 traces to mlflow or weave" in e for e in _plan(f"{trace.BACKEND_KEY}=zipkin").errors)
    real = trace.importlib.util.find_spec
    monkeypatch.setattr(trace.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name))
    assert any("pip install mlflow-skinny" in e for e in _plan(*TRACED).errors)


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr
    from recipes.retool.tool import CodeInterpreterTool

    RolloutTraceConfig.init("retool", "trace-test", "mlflow")
    tool = CodeInterpreterTool({"type": "native", "sandbox_fusion_url": sys.argv[1], "default_timeout": 10})

    async def rollout():
        with rollout_trace_attr(sample_index=0, step=1, rollout_n=0, name="agent_loop"):
            instance_id, _ = await tool.create()
            response, _, _ = await tool.execute(instance_id, {"code": "print(6 * 7)"})
            await tool.release(instance_id)
            print(response.text)

    asyncio.run(rollout())
    """
)


def test_a_traced_tool_call_lands_in_the_file_store(tmp_path: Path, stub_sandbox) -> None:
    """The environment the launcher sets, verl's own tracing, the kit tool: one trace with the tool's span."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"trace": {"backend": "mlflow"}}}})
    env = kit_env(**trace.job_env(cfg, str(tmp_path / "ckpt"), {}))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, stub_sandbox.url], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("42")
    assert trace.rollout_traces(tmp_path / "ckpt" / "mlruns") == (1, 1)
    assert not (tmp_path / "mlruns").exists()  # not mlflow's own default beside the working directory


def test_trace_reader_counts_traces_without_the_tool(tmp_path: Path) -> None:
    for name, spans in [("a", ["agent_loop", "CodeInterpreterTool.execute"]), ("b", ["agent_loop"]), ("c", None)]:
        folder = tmp_path / "123" / "traces" / name
        (folder / "artifacts").mkdir(parents=True)
        (folder / "trace_info.yaml").write_text("x: 1\n")
        if spans is not None:
            body = {"spans": [{"name": s} for s in spans]}
            (folder / "artifacts" / "traces.json").write_text(json.dumps(body))
    assert trace.rollout_traces(tmp_path) == (3, 1)
