"""scripts/ray_cluster.sh: what `ray start` gets on each profile, the "all nodes joined" check, and the check that
every node reaches the sandbox.

The live checks run against a real one-node Ray head started here, once for the module (``ray start --head --block``
in its own session, stopped by its process id afterwards: never ``ray stop``, which would end other users' Ray
processes).
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit_testing import kit_env, run_kit_script

from platforms.cpu import CPU_RAY_NUM_CPUS
from recipes.launch.cluster import ray_cluster


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_kit_script("ray_cluster.sh", args, env, timeout)


def test_help_and_bad_usage(launch_env: dict[str, str]) -> None:
    proc = run(["--help"], launch_env)
    assert proc.returncode == 0
    for word in ("head", "worker", "status", "--nodes", "--ifname", "--dry-run", "HCCL", "--with-sandbox", "--hw"):
        assert word in proc.stdout, word
    assert run([], launch_env).returncode == 2
    assert run(["start"], launch_env).returncode == 2
    assert run(["head", "--hw", "a5"], launch_env).returncode == 2
    bad = run(["worker", "--hw", "cpu", "--address", "127.0.0.1", "--dashboard-public", "--dry-run"], launch_env)
    assert bad.returncode == 2 and "--dashboard-public is for head only" in bad.stderr


def test_head_dry_run_a3_declares_16_npus_and_the_interfaces(launch_env: dict[str, str]) -> None:
    launch_env["KIT_ASCEND_ROOT"] = "/nonexistent/Ascend"
    proc = run(["head", "--hw", "a3", "--node-ip", "127.0.0.1", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "/nonexistent/Ascend/ascend-toolkit/set_env.sh not found (dry run" in out
    assert "/nonexistent/Ascend/nnal/atb/set_env.sh not found (dry run" in out
    assert "kit environment for rl on a3 applied" in out
    assert "ray_cluster:   VLLM_ASCEND_ENABLE_NZ=0" in out  # the profile's RL environment, listed in a dry run
    assert "node 127.0.0.1, HCCL/GLOO/TP socket interface lo" in out
    assert out.rstrip().endswith(
        "ray start --head --port=6379 --node-ip-address=127.0.0.1 --dashboard-host=127.0.0.1 '--resources={\"NPU\":16}'"
    )
    assert "showing the profile's 16 per node" in proc.stderr  # no NPU on this machine
    assert "warning" not in proc.stderr


def test_public_dashboard_is_opt_in_with_a_warning(launch_env: dict[str, str]) -> None:
    proc = run(["head", "--hw", "cuda", "--node-ip", "127.0.0.1", "--dashboard-public", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    assert "node 127.0.0.1, NCCL/GLOO/TP socket interface lo" in proc.stdout
    assert proc.stdout.rstrip().endswith("--dashboard-host=0.0.0.0 --num-gpus=8")
    assert "warning: --dashboard-public" in proc.stderr and "without authentication" in proc.stderr


def test_default_profile_is_this_machines_not_a3(launch_env: dict[str, str]) -> None:
    """The old default (a3) made a CUDA or CPU box die on a missing CANN set_env.sh."""
    launch_env["KIT_ASCEND_ROOT"] = "/nonexistent/Ascend"
    proc = run(["head", "--node-ip", "127.0.0.1", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    assert "kit environment for rl on cpu applied" in proc.stdout  # this machine: no NPU, no GPU
    assert "set_env.sh" not in proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith(f"--dashboard-host=127.0.0.1 --num-cpus={CPU_RAY_NUM_CPUS}")


def test_real_start_without_cann_stops_before_ray(launch_env: dict[str, str]) -> None:
    launch_env["KIT_ASCEND_ROOT"] = "/nonexistent/Ascend"
    proc = run(["head", "--hw", "a2", "--node-ip", "127.0.0.1"], launch_env)
    assert proc.returncode == 1
    assert "/nonexistent/Ascend/ascend-toolkit/set_env.sh not found" in proc.stderr
    assert "set KIT_ASCEND_ROOT" in proc.stderr and "Traceback" not in proc.stderr
    assert "would run" not in proc.stdout


def test_setup_scripts_are_sourced_by_the_shell(launch_env: dict[str, str], tmp_path: Path) -> None:
    """The wrapper sources the platform's scripts (scripts/lib/platform_env.sh) before Python checks them."""
    root = tmp_path / "Ascend"
    for script in ("ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh"):
        (root / script).parent.mkdir(parents=True)
        (root / script).write_text(f'export KIT_TEST_SOURCED="${{KIT_TEST_SOURCED:-}}:{script}"\n')
    launch_env["KIT_ASCEND_ROOT"] = str(root)
    # a KIT_PYTHON that runs a probe instead of recipes.launch.cluster.ray_cluster: what the Python side inherits
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys; print(os.environ.get('KIT_TEST_SOURCED')); sys.exit(0)\n")
    launch_env["KIT_PYTHON"] = str(tmp_path / "python")
    (tmp_path / "python").write_text(
        f'#!/bin/sh\nif [ "$2" = recipes.launch.cluster.ray_cluster ]; then exec {sys.executable} {probe}; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    (tmp_path / "python").chmod(0o755)
    proc = run(["head", "--hw", "a3", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ":ascend-toolkit/set_env.sh:nnal/atb/set_env.sh"
    launch_env["KIT_PYTHON"] = sys.executable
    proc = run(["head", "--hw", "a3", "--node-ip", "127.0.0.1", "--dry-run"], launch_env)
    assert f"setup script {root}/ascend-toolkit/set_env.sh (sourced by scripts/ray_cluster.sh)" in proc.stdout


def test_worker_dry_run_and_missing_address(launch_env: dict[str, str]) -> None:
    proc = run(["worker", "--hw", "cpu", "--address", "127.0.0.1", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith(
        f"ray start --address=127.0.0.1:6379 --node-ip-address=127.0.0.1 --num-cpus={CPU_RAY_NUM_CPUS}"
    )
    proc = run(["worker", "--hw", "cpu"], launch_env)
    assert proc.returncode == 2 and "worker needs the head's address" in proc.stderr


def test_with_sandbox_dry_run_and_stop(launch_env: dict[str, str], tmp_path: Path) -> None:
    tmp_path = tmp_path / "run"
    args = ["worker", "--hw", "cpu", "--address", "127.0.0.1:6380", "--with-sandbox", "--sandbox-port", "18123"]
    proc = run([*args, "--run-dir", str(tmp_path), "--sandbox-arg=--max-queue=1024", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(line for line in lines if line.startswith("ray_cluster: would start sandbox: "))
    assert start.endswith(
        f"-m sandbox serve --keep-alive --host 127.0.0.1 --port 18123 --max-queue=1024 (log "
        f"{tmp_path}/sandbox-18123.log, "
        f"pid {tmp_path}/sandbox-18123.pid)"
    )
    assert any("RETOOL_SANDBOX_URL=http://127.0.0.1:18123/run_code is then right on every node" in x for x in lines)
    assert lines[-1].endswith(
        f"ray start --address=127.0.0.1:6380 --node-ip-address=127.0.0.1 --num-cpus={CPU_RAY_NUM_CPUS}"
    )
    assert not tmp_path.exists(), "a dry run starts nothing"
    moved = run([*args, "--sandbox-arg=--host=0.0.0.0", "--dry-run"], launch_env)
    assert moved.returncode == 2 and "cannot move the sandbox" in moved.stderr
    stop = run(["stop", "--run-dir", str(tmp_path), "--dry-run"], launch_env)
    assert stop.returncode == 0 and stop.stdout.rstrip().endswith("ray stop")


def _node(address: str, npus: float, alive: bool = True) -> dict:
    return {"NodeManagerAddress": address, "Alive": alive, "Resources": {"NPU": npus, "CPU": 192.0}}


@pytest.mark.parametrize(
    ("nodes", "problems"),
    [
        ([_node("10.0.0.1", 16), _node("10.0.0.2", 16)], []),
        ([_node("10.0.0.1", 16)], ["1 live node(s) joined, expected 2", "16 NPU in the cluster, expected 32"]),
        (
            [_node("10.0.0.1", 16), _node("10.0.0.2", 10)],  # Ray's own /dev/davinci? glob on an A3
            ["node 10.0.0.2 offers 10 NPU, expected 16", "26 NPU in the cluster, expected 32"],
        ),
        ([_node("10.0.0.1", 16), _node("10.0.0.2", 16, alive=False), _node("10.0.0.3", 16)], []),
    ],
)
def test_status_evaluation(nodes: list[dict], problems: list[str]) -> None:
    found = ray_cluster.evaluate(ray_cluster.node_states(nodes, "NPU"), "a3", 2)
    assert [p.split(" (start it")[0] for p in found] == problems


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A one-node CPU Ray cluster of this module's own; yields its address."""
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # short: Ray's socket paths have a length limit
    launch_env = kit_env()
    for name in ("RAY_ADDRESS", "RAY_HEAD_ADDRESS", "KIT_HW", "KIT_DEVICE"):
        launch_env.pop(name, None)
    ray = str(Path(sys.executable).parent / "ray")
    proc = subprocess.Popen(
        [ray, "start", "--head", "--block", f"--port={port}", "--num-cpus=4", "--include-dashboard=false"]
        + [f"--temp-dir={temp_dir}", "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
        env=launch_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the session this test created, by its id
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)  # the session's logs and sockets: MBs a run, on CI's disk


def test_status_against_a_live_cluster(launch_env: dict[str, str], ray_head: str) -> None:
    deadline = time.monotonic() + 90
    while True:
        proc = run(["status", "--hw", "cpu", "--nodes", "1", "--address", ray_head], launch_env)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alive  CPU 4" in proc.stdout and "cluster ready: 1 node(s), profile cpu" in proc.stdout
    proc = run(["status", "--hw", "cpu", "--nodes", "2", "--address", ray_head], launch_env)
    assert proc.returncode == 1 and "1 live node(s) joined, expected 2" in proc.stderr
    proc = run(["status", "--hw", "a2", "--nodes", "1", "--address", ray_head], launch_env)
    assert proc.returncode == 1 and "offers 0 NPU, expected 8" in proc.stderr


def test_launch_preflight_fails_fast_without_a_cluster() -> None:
    """The launcher's multi-node RL pre-flight: seconds, not ray.init's minutes of GCS retries."""
    port = _free_port()
    start = time.monotonic()
    problems = ray_cluster.cluster_problems("a3", 2, f"127.0.0.1:{port}")
    assert time.monotonic() - start < 30
    assert len(problems) == 1 and "no Ray cluster at" in problems[0] and "scripts/ray_cluster.sh" in problems[0]


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        body = b'{"status": "ok"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_every_node_is_asked_to_reach_the_sandbox(ray_head: str) -> None:
    """The launch pre-flight: a task pinned to each Ray node GETs the sandbox's /health from there."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/run_code"
        answers = ray_cluster.probe_every_node(ray_cluster.health_url_of(url), ray_head, 5.0)
        assert list(answers.values()) == [None], answers  # one node, and it reached the sandbox
        node = next(iter(answers))  # "<its address> (<its host name>)"
        assert node.endswith(f" ({socket.gethostname()})"), node
        assert ray_cluster.sandbox_reach_problems(url, ray_head, timeout_s=5.0) == []
    finally:
        server.shutdown()
        server.server_close()
    closed = f"http://127.0.0.1:{_free_port()}/run_code"
    problems = ray_cluster.sandbox_reach_problems(closed, ray_head, timeout_s=5.0)
    assert len(problems) == 1, problems
    assert (
        problems[0].startswith(f"node {node} cannot reach the sandbox")
        and f"cannot reach the sandbox: GET {closed[:-8]}health" in problems[0]
    )
    assert "--with-sandbox" in problems[0]
