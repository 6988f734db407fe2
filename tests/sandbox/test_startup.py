"""Start-up messages people meet (issue 14 items 10 and 12): "ready" at INFO and only after the bind, a busy port
or unusable bwrap as one line and a non-zero exit, and KIT_REQUIRE_BWRAP turning a bwrap skip into a failure."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from kit_testing import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def _serve(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sandbox", "serve", "--workers", "1", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO_ROOT,
        timeout=timeout,
    )


def test_busy_port_is_one_line_and_exit_1() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = _serve("--port", str(port), timeout=30)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 1
    assert lines == [
        f"retool-sandbox: error: cannot listen on 127.0.0.1:{port}: the port is in use (another sandbox? stop it "
        "or pick --port)"
    ], lines


def test_required_bwrap_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    proc = _serve("--port", str(free_port()), "--isolation", "bwrap", env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "INFO" not in line]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "--isolation bwrap requested but unusable" in lines[0], proc.stderr
    assert "No permissions to create new namespace" in lines[0] and "Traceback" not in proc.stderr


def test_ready_is_logged_at_info_once_serving(helpers, tmp_path: Path) -> None:
    with helpers.start_server(tmp_path, workers=1) as srv:
        log = srv.log()
        ready = [line for line in log.splitlines() if "retool-sandbox ready" in line]
        assert len(ready) == 1 and " INFO " in ready[0], log
        assert "max_queue=1024" in ready[0] and "filesystem=" in ready[0]
        assert requests.get(f"{srv.base}/v1/ping", timeout=5).json() == "pong"
        health = srv.get_health()
        assert health["capacity"] == health["workers"] + health["max_queue"] == 1 + 1024
        metrics = requests.get(f"{srv.base}/metrics", timeout=5).text
        assert "retool_sandbox_max_queue 1024" in metrics
        # the launcher's dry run reads the same numbers (recipes/launch/sizing/capacity.py)
        pytest.importorskip("omegaconf")
        from recipes.launch.sizing.capacity import read_capacity

        assert read_capacity(srv.url).total == 1025


@pytest.mark.parametrize(("required", "outcome"), [("1", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_require_bwrap_turns_the_skip_into_a_failure(helpers, monkeypatch, required, outcome) -> None:
    monkeypatch.setenv("KIT_REQUIRE_BWRAP", required)
    with pytest.raises(outcome, match="cannot create namespaces"):
        helpers.bwrap_unavailable("bwrap cannot create namespaces here: test")
