"""scripts/ray_cluster.sh: what `ray start` gets on each profile, and the "all nodes joined" check.

The status check runs against a real one-node Ray head started here (``ray start --head --block`` in its own
session, stopped by its process id afterwards: never ``ray stop``, which would end other users' Ray processes).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from recipes.launch import cluster


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/ray_cluster.sh", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_help_and_bad_usage(launch_env: dict[str, str]) -> None:
    proc = run(["--help"], launch_env)
    assert proc.returncode == 0
    for word in ("head", "worker", "status", "--nodes", "--ifname", "--dry-run", "HCCL"):
        assert word in proc.stdout, word
    assert run(["start"], launch_env).returncode == 2
    assert run(["head", "--hw", "a5"], launch_env).returncode == 2


def test_head_dry_run_a3_declares_16_npus_and_the_interfaces(launch_env: dict[str, str]) -> None:
    launch_env["KIT_ASCEND_ROOT"] = "/nonexistent/Ascend"
    proc = run(["head", "--hw", "a3", "--node-ip", "127.0.0.1", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "/nonexistent/Ascend/ascend-toolkit/set_env.sh not found (dry run" in out
    assert "/nonexistent/Ascend/nnal/atb/set_env.sh not found (dry run" in out
    assert "kit environment for rl on a3 applied" in out
    assert "node 127.0.0.1, HCCL/GLOO/TP socket interface lo" in out
    assert out.rstrip().endswith(
        "ray start --head --port=6379 --node-ip-address=127.0.0.1 --dashboard-host=0.0.0.0 '--resources={\"NPU\":16}'"
    )
    assert "showing the profile's 16 per node" in proc.stderr  # no NPU on this machine


def test_real_start_without_cann_stops_before_ray(launch_env: dict[str, str]) -> None:
    launch_env["KIT_ASCEND_ROOT"] = "/nonexistent/Ascend"
    proc = run(["head", "--hw", "a2", "--node-ip", "127.0.0.1"], launch_env)
    assert proc.returncode == 1
    assert "/nonexistent/Ascend/ascend-toolkit/set_env.sh not found" in proc.stderr


def test_worker_dry_run_and_missing_address(launch_env: dict[str, str]) -> None:
    proc = run(["worker", "--hw", "cpu", "--address", "127.0.0.1", "--dry-run"], launch_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("ray start --address=127.0.0.1:6379 --node-ip-address=127.0.0.1 --num-cpus=4")
    proc = run(["worker", "--hw", "cpu"], launch_env)
    assert proc.returncode == 1 and "worker needs the head's address" in proc.stderr


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
    found = cluster.evaluate(cluster.node_states(nodes, "NPU"), "a3", 2)
    assert [p.split(" (start it")[0] for p in found] == problems


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def ray_head(launch_env: dict[str, str]) -> Iterator[str]:
    """A one-node CPU Ray cluster of this test's own; yields its address."""
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray = str(Path(launch_env["KIT_PYTHON"]).parent / "ray")
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
    problems = cluster.cluster_problems("a3", 2, f"127.0.0.1:{port}")
    assert time.monotonic() - start < 30
    assert len(problems) == 1 and "no Ray cluster at" in problems[0] and "scripts/ray_cluster.sh" in problems[0]
