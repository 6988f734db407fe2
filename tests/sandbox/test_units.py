"""Unit tests of the pieces that need no server: wire format, path checks, output cap, bwrap argv, CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.api_models import RunCodeRequest, check_relative_path, overall_status
from sandbox.bench import format_table, percentile, run_bench
from sandbox.output_capture import CappedPipeReader

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("run_result", "expected"),
    [
        ({"status": "Finished", "return_code": 0}, "Success"),
        ({"status": "Finished", "return_code": 1}, "Failed"),
        ({"status": "Finished", "return_code": -11}, "Failed"),
        ({"status": "TimeLimitExceeded", "return_code": None}, "Failed"),
        ({"status": "Error", "return_code": None}, "SandboxError"),
        (None, "SandboxError"),
    ],
)
def test_overall_status_follows_sandboxfusion(run_result, expected) -> None:
    assert overall_status(run_result) == expected


def test_request_defaults_and_extra_fields() -> None:
    req = RunCodeRequest.model_validate({"code": "x", "unknown": 1, "run_timeout": "3"})
    assert (req.language, req.run_timeout, req.memory_limit_MB, req.files) == ("python", 3.0, -1, {})


@pytest.mark.parametrize("path", ["", "/abs", "../up", "a/../../up", "nul\x00"])
def test_bad_relative_paths(path) -> None:
    with pytest.raises(ValueError):
        check_relative_path(path)


@pytest.mark.parametrize("path", ["a.txt", "dir/b.txt", "./c", "a/../d"])
def test_good_relative_paths(path) -> None:
    check_relative_path(path)


def test_capped_reader_drains_everything_and_marks_truncation() -> None:
    async def scenario() -> CappedPipeReader:
        read_fd, write_fd = os.pipe()
        reader = await CappedPipeReader.attach(read_fd, 1000)

        def write() -> None:
            with os.fdopen(write_fd, "wb") as f:
                f.write(b"y" * 300_000)  # far above the 64 KiB pipe buffer: must not block

        await asyncio.get_running_loop().run_in_executor(None, write)
        await asyncio.wait_for(reader.done, 5)
        return reader

    reader = asyncio.run(scenario())
    assert reader.truncated and reader.dropped == 299_000
    assert reader.text().startswith("y" * 1000) and "299000 more bytes" in reader.text()


def test_percentile_interpolates() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([10.0], 0.95) == 10.0


def test_cli_help_lists_the_documented_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    serve = subprocess.run(
        [sys.executable, "-m", "sandbox", "serve", "--help"], capture_output=True, text=True, env=env, cwd=REPO_ROOT
    )
    assert serve.returncode == 0
    for option in ("--host", "--port", "--workers", "--max-queue", "--output-limit-kb", "--isolation", "--cold"):
        assert option in serve.stdout
    bench = subprocess.run(
        [sys.executable, "-m", "sandbox", "bench", "--help"], capture_output=True, text=True, env=env, cwd=REPO_ROOT
    )
    assert bench.returncode == 0 and "--concurrency" in bench.stdout and "--requests" in bench.stdout
    for option in ("--burst", "--rounds", "--deadline", "retool-launch"):
        assert option in bench.stdout


def test_bench_recipe_says_where_the_recipe_number_comes_from_now() -> None:
    """The sandbox reads no recipe (issue 22 item 5): ``--recipe`` is one usage line naming the kit's command."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "sandbox", "bench", "--recipe", "qwen3_4b_dapo"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert '--burst "$(retool-launch demand --recipe qwen3_4b_dapo)"' in proc.stderr


def test_bench_against_a_server(server) -> None:
    rows = asyncio.run(run_bench(server.url, ["print", "sympy"], [1, 2], requests=4, warmup=1, timeout=60))
    assert [(r.snippet, r.concurrency) for r in rows] == [("print", 1), ("print", 2), ("sympy", 1), ("sympy", 2)]
    assert all(r.errors == 0 and r.ok == 4 and r.req_per_s > 0 and r.p95_ms >= r.p50_ms for r in rows)
    assert "req/s" in format_table(rows)


def test_burst_cli_reports_p50_p99_and_exit_status(server) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "sandbox", "bench", "--url", server.url, "--burst", "16", "--rounds", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "p50 ms" in proc.stdout and "p99 ms" in proc.stdout and "16 clients at once x 2 round(s)" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("print "))
    assert row.split()[1:6] == ["16", "2", "32", "0", "0"]  # clients, rounds, ok, failed, unavailable
    assert f"{server.health['workers']} workers + {server.health['max_queue']} queue" in proc.stdout


def test_every_module_the_worker_loads_by_path_is_mounted_beside_it() -> None:
    """Inside bubblewrap the worker sees only the files sandbox/isolation.py binds (WORKER_FILES): a sibling it
    loads by path but nobody mounts is a FileNotFoundError at start-up, under bwrap only."""
    import ast

    from sandbox import isolation

    mounted = {path.name for path in isolation.WORKER_FILES}
    loaded = set()
    for script in isolation.WORKER_FILES:
        for node in ast.walk(ast.parse(script.read_text())):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "id", "") == "_load_sibling":
                loaded.add(f"{node.args[0].value}.py")
    assert {"worker_os.py", "worker_reap.py", "worker_landlock.py"} <= loaded  # the scan found the calls
    assert loaded <= mounted, f"loaded by path but not mounted: {sorted(loaded - mounted)}"
    assert all(path.is_file() for path in isolation.WORKER_FILES)
