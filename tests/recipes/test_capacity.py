"""The dry run's sandbox capacity check (issue 14 item 2): in-flight tool calls per sandbox vs workers + queue.

A fake sandbox (stdlib HTTP server on loopback) answers ``print(1)`` and a ``/health`` with chosen numbers, so the
check is exercised exactly as the dry run runs it, without starting the real sandbox.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kit_testing import interpreter_stack
from omegaconf import OmegaConf

from recipes.launch import cli as launch_cli
from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.launch.sizing import capacity
from recipes.launch.sizing.capacity import KIT_TOOL, VERL_SANDBOX_TOOL, Capacity, Demand, ToolLimit
from recipes.retool import TOOL_CONFIG_PATH

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves


class FakeSandbox:
    """Loopback HTTP server: /run_code prints "1", /health says what ``health`` holds."""

    def __init__(self) -> None:
        self.health: dict[str, Any] = {"status": "ok", "workers": 8, "max_queue": 256}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _json(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._json(fake.health)

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                run = {"status": "Finished", "stdout": "1\n", "stderr": "", "return_code": 0, "execution_time": 0.01}
                self._json({"status": "Success", "message": "", "run_result": run, "compile_result": None})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"


@pytest.fixture
def fake_sandbox() -> Iterator[FakeSandbox]:
    fake = FakeSandbox()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def _cfg(name: str, hw: str, *overrides: str, home: str = "/nonexistent/kit-home"):
    """The composed config (the kit's own checks may object to the odd override here: only the numbers matter)."""
    built = plan.build(RECIPES[name], hw, STACK, overrides, path_check=False, environ={"HOME": home})
    assert built.cfg is not None, built.errors
    return built.cfg


def test_the_kit_tool_config_allows_64_per_agent_worker() -> None:
    assert capacity.tool_limits(TOOL_CONFIG_PATH) == [ToolLimit(KIT_TOOL, 64, None, 70.0)]


@pytest.mark.parametrize(
    "extra", ["", ", default_timeout: 5", ", num_workers: 8", ", max_concurrency: 4, default_timeout: 2.5"]
)
def test_the_check_counts_what_the_kit_tool_runs(extra: str, tmp_path: Path) -> None:
    """The check's defaults are the tool's (recipes/retool/tool_defaults.py): its thread pool and HTTP timeout."""
    from recipes.retool.tool import CodeInterpreterTool

    path = tmp_path / "tools.yaml"
    path.write_text(
        f"tools:\n  - class_name: {KIT_TOOL}\n    config: {{sandbox_fusion_url: 'http://x:1/run_code'{extra}}}\n"
    )
    [limit] = capacity.tool_limits(path)
    tool = CodeInterpreterTool(OmegaConf.to_container(OmegaConf.load(path))["tools"][0]["config"])  # type: ignore[index]
    waited: list[float] = []

    def post_once(body: bytes, timeout: float) -> tuple[int, bytes]:
        waited.append(timeout)
        raise TimeoutError

    tool.client._post_once = post_once  # type: ignore[method-assign]
    assert tool.client.run("print(1)").kind == "unavailable"
    assert (limit.per_worker, limit.http_timeout_s) == (tool._executor._max_workers, waited[0])


def test_verls_sandbox_fusion_tool_has_a_global_rate_limit(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    entry = "  - class_name: {cls}\n    config: {{sandbox_fusion_url: 'http://x:1/run_code'{extra}}}\n"
    path.write_text(
        "tools:\n"
        + entry.format(cls=VERL_SANDBOX_TOOL, extra="")
        + entry.format(cls=VERL_SANDBOX_TOOL, extra=", num_workers: 32, rate_limit: 100")
        + entry.format(cls=VERL_SANDBOX_TOOL, extra=", num_workers: 32, enable_global_rate_limit: false")
        + "  - class_name: some.other.Tool\n    config: {type: native}\n"
    )
    assert capacity.tool_limits(path) == [
        ToolLimit(VERL_SANDBOX_TOOL, 10, 10),
        ToolLimit(VERL_SANDBOX_TOOL, 32, 100),
        ToolLimit(VERL_SANDBOX_TOOL, 32, None),
    ]


@pytest.mark.parametrize(
    ("name", "hw", "overrides", "url", "expected"),
    [
        ("qwen3_4b_dapo", "a3", (), "http://127.0.0.1:8080/run_code", 1024),  # 16 x 64 on one node
        ("qwen2.5_32b_dapo", "a3", (), "http://localhost:8080/run_code", 512),  # 2 nodes, a sandbox per node
        ("qwen2.5_32b_dapo", "a3", (), "http://10.0.0.5:8080/run_code", 1024),  # one shared sandbox
        # 5 workers round-robin over 2 nodes: the busiest node's sandbox serves 3 of them
        ("qwen2.5_32b_dapo", "a3", ("actor_rollout_ref.rollout.agent.num_workers=5",), "http://[::1]:1/", 192),
        ("qwen3_4b_dapo", "cpu", (), "http://127.0.0.1:8080/run_code", 64),  # the smoke: one agent worker
    ],
)
def test_in_flight_per_sandbox(name, hw, overrides, url, expected) -> None:
    need = capacity.demand(_cfg(name, hw, *overrides), url)
    assert need is not None and need.per_sandbox == expected, need
    assert f"= {expected} tool calls in flight per sandbox" in need.explain()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--recipe", "qwen3_4b_dapo", "--hw", "a3"], 1024),
        (["--recipe", "qwen2.5_32b_dapo", "--hw", "a3"], 512),  # per-node: the busiest of 2 sandboxes
        (["--recipe", "qwen2.5_32b_dapo", "--hw", "a3", "--layout", "shared"], 1024),
    ],
)
def test_launch_demand_prints_the_number_the_sandbox_bench_takes(argv, expected, capsys) -> None:
    """``retool-sandbox bench --burst "$(retool-launch demand ...)"``: stdout is the number alone (docs/sandbox.md)."""
    assert launch_cli.main(["demand", *argv]) == 0
    out, err = capsys.readouterr()
    assert out == f"{expected}\n"
    assert f"= {expected} tool calls in flight per sandbox" in err


def test_no_tool_no_demand() -> None:
    cfg = _cfg("qwen3_4b_dapo", "a3", "actor_rollout_ref.rollout.multi_turn.enable=false")
    assert capacity.demand(cfg, "http://127.0.0.1:8080/run_code") is None


NEED = Demand(str(TOOL_CONFIG_PATH), nnodes=1, agent_workers=16, per_worker=64, shared=False, http_timeout_s=70.0)


def test_the_readmes_old_sizing_is_an_error_naming_both_numbers_and_the_fix() -> None:
    [problem] = capacity.compare(NEED, Capacity(8, 256), "U")
    assert problem.error
    assert "takes 264 requests at once (8 workers + max-queue 256)" in problem.message
    assert "sends up to 1024" in problem.message and "--max-queue 1016" in problem.message


def test_verdicts() -> None:
    assert capacity.compare(NEED, Capacity(2, 1024), "U") == []  # the sandbox's default queue covers the recipe
    [short] = capacity.compare(NEED, Capacity(2, 700), "U")  # short, but not by half: a warning
    assert not short.error and "takes 702" in short.message
    [unknown] = capacity.compare(NEED, None, "U")
    assert not unknown.error and "capacity unknown" in unknown.message and "1024" in unknown.message
    # 512 rounds of 0.5 s on 2 workers: far beyond the tool's 70 s HTTP timeout
    [slow] = capacity.compare(NEED, Capacity(2, 1024, answered=100, mean_execution_s=0.5), "U")
    assert not slow.error and "~256 s to drain" in slow.message and "70 s HTTP timeout" in slow.message
    assert capacity.compare(NEED, Capacity(2, 1024, answered=5, mean_execution_s=0.5), "U") == []  # too few samples
    capped = Demand("t", 1, 16, 10, shared=True, global_cap=10)
    assert capped.per_sandbox == 10 and "global rate_limit 10" in capped.explain()


def test_read_capacity(fake_sandbox: FakeSandbox) -> None:
    assert capacity.read_capacity(fake_sandbox.url) == Capacity(8, 256)
    fake_sandbox.health = {"status": "ok"}  # a SandboxFusion-like server: no numbers
    assert capacity.read_capacity(fake_sandbox.url) is None
    fake_sandbox.server.server_close()
    assert capacity.read_capacity("http://127.0.0.1:9/run_code", timeout_s=2) is None


def test_the_dry_run_compares_the_recipe_with_the_running_sandbox(
    fake_sandbox: FakeSandbox, tmp_path: Path, make_model: Callable[..., Path]
) -> None:
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "m", heads=32, kv_heads=8)),
        "RETOOL_SANDBOX_URL": fake_sandbox.url,
    }
    built = plan.build(RECIPES["qwen3_4b_dapo"], "a3", STACK, environ=environ)
    short = [e for e in built.errors if "requests at once" in e]
    assert len(short) == 1 and "takes 264" in short[0] and "sends up to 1024" in short[0], built.errors
    fake_sandbox.health = {"status": "ok", "workers": 2, "max_queue": 1024}
    built = plan.build(RECIPES["qwen3_4b_dapo"], "a3", STACK, environ=environ)
    assert not any("requests at once" in m or "capacity" in m for m in built.errors + built.warnings), built.warnings


# -- the rollout servers (issue 30 item 5): what the plan says a server admits is what patch 0028 makes Ray allow


@pytest.mark.parametrize("max_num_seqs", [64, 984, 985, 1024, 4096])
def test_server_admits_what_the_patched_replica_asks_ray_for(max_num_seqs: int) -> None:
    from types import SimpleNamespace

    from verl.workers.rollout.replica import RolloutReplica

    replica = SimpleNamespace(config=SimpleNamespace(max_num_seqs=max_num_seqs))
    assert capacity.server_admits(max_num_seqs) == RolloutReplica.max_concurrency.fget(replica)


def test_the_plan_shows_generate_calls_per_replica_against_the_server() -> None:
    from recipes.launch.planning import report

    built = plan.build(
        RECIPES["qwen2.5_32b_dapo"], "h200", STACK, [], path_check=False, environ={"HOME": "/nonexistent"}
    )
    assert built.facts is not None and built.facts.in_flight is not None  # 512 x 16 trajectories, 2 replicas of TP 4
    assert (built.facts.layout.replicas, built.facts.in_flight.per_replica) == (2, 4096)
    row = dict(report.rows(built))["in flight"]
    assert row.startswith("4,096 generate calls per replica"), row
    assert "admits 1,040 at once" in row and "max_num_seqs 1,024" in row, row
    sync = plan.build(
        RECIPES["qwen2.5_32b_dapo"],
        "h200",
        STACK,
        ["actor_rollout_ref.rollout.mode=sync"],
        environ={"HOME": "/nonexistent"},
    )
    assert sync.facts is not None and sync.facts.in_flight is None and "in flight" not in dict(report.rows(sync))
