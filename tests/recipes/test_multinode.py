"""Multi-node launch without a cluster: the node's interface (one source for Ray and torchrun), torchrun's rendezvous
variables, the sandbox every node must reach, and the per-node sandbox's lifecycle.

Network facts come from fake probes (a multi-NIC node: management NIC, business NIC ``bond0``, docker0); the
per-node sandbox is a stand-in process that serves /health, started and stopped by the real code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, child_pids, free_port, interpreter_stack
from omegaconf import OmegaConf

from platforms.cli_errors import UsageError
from platforms.cpu import CPU_RAY_NUM_CPUS
from recipes.launch.cluster import node_sandbox, nodenet, ray_cluster, ray_node
from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import RECIPES

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

IP_ADDR = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eno1    inet 192.168.1.7/24 brd 192.168.1.255 scope global eno1\\       valid_lft forever preferred_lft forever
5: bond0    inet 10.0.0.2/16 brd 10.0.255.255 scope global bond0\\       valid_lft forever preferred_lft forever
7: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever preferred_lft forever
"""
#: Routes of the fake node: the cluster network (10.0.x.x) goes over bond0, everything else over the management NIC.
ROUTES = {"10.0.0.1": "10.0.0.2", "10.0.0.2": "10.0.0.2", "8.8.8.8": "192.168.1.7"}
FAKE_HOME = "/nonexistent/kit-home"


def fake_probes(routes: dict[str, str] | None = None, ip_text: str | None = IP_ADDR) -> nodenet.NetProbes:
    table = ROUTES if routes is None else routes
    return nodenet.NetProbes(
        ip_addr_text=lambda: ip_text,
        route_source=table.get,
        host_addresses=lambda: ["fd00::2", "192.168.1.7", "10.0.0.2"],
    )


# -- this node's address and interface --------------------------------------------------------------------------


def test_the_interface_is_the_one_that_holds_the_node_address() -> None:
    probes = fake_probes()
    assert nodenet.interface_of("10.0.0.2", probes) == "bond0"
    assert nodenet.interface_of("10.9.9.9", probes) is None
    assert nodenet.interface_of("10.0.0.2", fake_probes(ip_text=None)) is None  # no iproute2
    assert nodenet.head_address(probes) == "192.168.1.7"  # first IPv4 of `hostname -I`
    assert nodenet.address_toward("10.0.0.1", probes) == "10.0.0.2"
    found = nodenet.interface_toward("10.0.0.1", {}, probes)
    assert (found.name, found.node_ip) == ("bond0", "10.0.0.2")
    assert nodenet.interface_toward("10.0.0.1", {"KIT_IFNAME": "ib0"}, probes).name == "ib0"
    lost = nodenet.interface_toward("10.5.5.5", {}, probes)
    assert lost.name is None and "no route from here to 10.5.5.5" in lost.how


def test_socket_env_is_the_platforms_variables_and_keeps_the_users() -> None:
    from platforms import PROFILES

    npu, gpu = PROFILES["a3"].platform, PROFILES["cuda"].platform
    assert nodenet.socket_env(npu, "bond0", {}) == {
        "HCCL_SOCKET_IFNAME": "bond0",
        "GLOO_SOCKET_IFNAME": "bond0",
        "TP_SOCKET_IFNAME": "bond0",
    }
    assert "NCCL_SOCKET_IFNAME" in nodenet.socket_env(gpu, "bond0", {})
    mine = {"GLOO_SOCKET_IFNAME": "eth1"}
    assert set(nodenet.socket_env(npu, "bond0", mine)) == {"HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}
    assert nodenet.socket_env(npu, "bond0", mine, force=True)["GLOO_SOCKET_IFNAME"] == "bond0"
    assert nodenet.short_names(npu) == "HCCL/GLOO/TP" and nodenet.short_names(gpu) == "NCCL/GLOO/TP"


# -- ray_cluster.sh head|worker in-process: what `ray start` is run with ---------------------------------------


def _start(request: ray_node.NodeRequest, environ: dict[str, str], probes: nodenet.NetProbes) -> tuple[list, dict]:
    seen: dict[str, object] = {}

    def run(command: list[str], env: dict[str, str]) -> int:
        seen.update(command=command, env=env)
        return 0

    assert ray_node.start_node(request, environ, probes, run) == 0
    return seen["command"], seen["env"]  # type: ignore[return-value]


def test_worker_joins_over_the_nic_that_routes_to_the_head(capsys: pytest.CaptureFixture[str]) -> None:
    request = ray_node.NodeRequest("worker", "cpu", STACK, address="10.0.0.1")
    command, env = _start(request, {"PATH": "/usr/bin", "GLOO_SOCKET_IFNAME": "eth9"}, fake_probes())
    assert command[1:] == [
        "start",
        "--address=10.0.0.1:6379",
        "--node-ip-address=10.0.0.2",
        f"--num-cpus={CPU_RAY_NUM_CPUS}",
    ]
    assert env["TP_SOCKET_IFNAME"] == "bond0" and env["GLOO_SOCKET_IFNAME"] == "eth9"  # the user's is kept
    assert env["OMP_NUM_THREADS"] == "1"  # the profile's RL environment reaches the raylet
    assert env["PYTHONPATH"].split(":")[0] == str(REPO_ROOT)
    out = capsys.readouterr().out
    assert "node 10.0.0.2, GLOO/TP socket interface bond0 (kept from the environment: GLOO_SOCKET_IFNAME=eth9" in out
    forced = ray_node.NodeRequest("worker", "cpu", STACK, address="10.0.0.1", ifname="eno1")
    _, env = _start(forced, {"GLOO_SOCKET_IFNAME": "eth9"}, fake_probes())
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "eno1"
    for request in (forced, replace(forced, dry_run=True)):  # issue 21, finding 9: the dry run took it too
        with pytest.raises(UsageError, match=r"--ifname ib0: no interface of that name") as refused:
            _start(replace(request, ifname="ib0"), {}, fake_probes())
        assert refused.value.fix.startswith("bond0, docker0")


def test_head_dashboard_stays_local_and_next_steps_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    command, env = _start(ray_node.NodeRequest("head", "cpu", STACK, port=6390), {}, fake_probes())
    assert command[1:] == [
        "start",
        "--head",
        "--port=6390",
        "--node-ip-address=192.168.1.7",
        "--dashboard-host=127.0.0.1",
        f"--num-cpus={CPU_RAY_NUM_CPUS}",
    ]
    assert env["GLOO_SOCKET_IFNAME"] == "eno1"
    out = capsys.readouterr().out
    assert "worker --hw cpu --address 192.168.1.7:6390" in out


def test_a_start_that_cannot_tell_the_node_stops_with_one_line() -> None:
    no_route = fake_probes(routes={})
    with pytest.raises(UsageError, match="cannot tell this node's address"):
        _start(ray_node.NodeRequest("worker", "cpu", STACK, address="10.0.0.1"), {}, no_route)
    with pytest.raises(UsageError, match=r"no interface holds 10.0.0.2"):
        _start(ray_node.NodeRequest("worker", "cpu", STACK, address="10.0.0.1"), {}, fake_probes(ip_text=None))
    failed = ray_node.NodeRequest("head", "cpu", STACK)
    with pytest.raises(ray_node.NodeError, match="`ray start` exited with status 3"):
        ray_node.start_node(failed, {}, fake_probes(), lambda command, env: 3)


# -- torchrun (multi-node SFT): rendezvous variables and the socket interface ------------------------------------


def _sft(environ: dict[str, str], hw: str = "a3", **kwargs: object) -> plan.Plan:
    """qwen2.5_32b_sft: 2 nodes on a3, 4 on a2, 2 on cuda."""
    return plan.build(
        RECIPES["qwen2.5_32b_sft"], hw, STACK, path_check=False, environ={"HOME": FAKE_HOME, **environ}, **kwargs
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("environ", "error"),
    [
        ({"NODE_RANK": "2"}, "NODE_RANK='2' must be an integer in 0..1 (trainer.nnodes=2"),
        ({"NODE_RANK": "abc"}, "NODE_RANK='abc' must be an integer in 0..1"),
        ({"NODE_RANK": "-1"}, "NODE_RANK='-1' must be an integer in 0..1"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT='0' must be a TCP port, 1..65535"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000' must be a TCP port"),
        ({"MASTER_ADDR": "10.0.0.1:29500"}, "MASTER_ADDR='10.0.0.1:29500' is not an IP address or host name"),
        ({"MASTER_ADDR": "http://node0"}, "is not an IP address or host name"),
    ],
)
def test_bad_rendezvous_values_fail_the_dry_run(environ: dict[str, str], error: str) -> None:
    built = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1", **environ})
    assert any(error in e for e in built.errors), built.errors


def test_good_rendezvous_values_pass() -> None:
    for environ in ({"NODE_RANK": "0"}, {"NODE_RANK": "1", "MASTER_PORT": "65535"}, {"MASTER_ADDR": "localhost"}):
        assert _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "0", **environ}).errors == []
    unknown = _sft({"MASTER_ADDR": "no-such-host.invalid", "NODE_RANK": "1"})
    assert unknown.errors == [] and any("does not resolve on this machine" in w for w in unknown.warnings)


def test_the_run_script_dry_run_fails_on_a_rank_past_the_last_node(launch_env: dict[str, str]) -> None:
    launch_env.update(MASTER_ADDR="127.0.0.1", NODE_RANK="2", KIT_HW="a3")
    proc = subprocess.run(
        ["bash", "recipes/run_qwen2.5_32b_sft_npu.sh", "--dry-run", "--no-path-check"],
        cwd=REPO_ROOT,
        env=launch_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "NODE_RANK='2' must be an integer in 0..1" in proc.stdout


def test_torchrun_gets_the_socket_interface_of_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodenet, "LOCAL", fake_probes())
    built = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"})
    assert built.errors == []
    assert (
        built.env["HCCL_SOCKET_IFNAME"] == built.env["GLOO_SOCKET_IFNAME"] == built.env["TP_SOCKET_IFNAME"] == "bond0"
    )
    prefix = built.command[: built.command.index(built.argv[0])]
    assert prefix[0] == "env" and "HCCL_SOCKET_IFNAME=bond0" in prefix  # what the launch execs
    assert any("socket interface bond0" in c for c in built.checked)
    # node 0 itself: the route to its own address is its own address, on bond0 too
    assert _sft({"MASTER_ADDR": "10.0.0.2", "NODE_RANK": "0"}).env["HCCL_SOCKET_IFNAME"] == "bond0"
    gpu = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"}, hw="cuda")
    assert gpu.env["NCCL_SOCKET_IFNAME"] == "bond0" and "HCCL_SOCKET_IFNAME" not in gpu.env
    mine = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1", "HCCL_SOCKET_IFNAME": "=bond0"})
    assert "HCCL_SOCKET_IFNAME" not in mine.env and mine.env["GLOO_SOCKET_IFNAME"] == "bond0"  # the user's stays
    named = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1", "KIT_IFNAME": "ib0"})
    assert named.env["TP_SOCKET_IFNAME"] == "ib0"
    single = plan.build(RECIPES["qwen3_4b_sft"], "a3", STACK, path_check=False, environ={"HOME": FAKE_HOME})
    assert not any(name.endswith("_SOCKET_IFNAME") for name in single.env)  # one node: nothing to bind


def test_the_launch_warns_when_the_interface_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the node itself (not a dry run planned elsewhere) an unknown interface is said, not silently skipped."""
    monkeypatch.setattr(nodenet, "LOCAL", fake_probes(routes={}))
    dry = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"})
    assert not any("interface" in w for w in dry.warnings)
    launch = _sft({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"}, for_launch=True)
    assert any("cannot tell which interface carries this node's address" in w for w in launch.warnings)
    assert not any(name.endswith("_SOCKET_IFNAME") for name in launch.env)


# -- the sandbox every node calls ------------------------------------------------------------------------------


def _rl(environ: dict[str, str], *overrides: str, **kwargs: object) -> plan.Plan:
    return plan.build(
        RECIPES["qwen2.5_32b_dapo"],
        "a3",
        STACK,
        overrides,
        path_check=False,
        environ={"HOME": FAKE_HOME, **environ},
        **kwargs,
    )  # type: ignore[arg-type]


def test_dry_run_warns_on_a_loopback_sandbox_with_several_nodes() -> None:
    for url in ("http://127.0.0.1:8080/run_code", "http://localhost:18080/run_code"):
        built = _rl({"RETOOL_SANDBOX_URL": url})
        note = [w for w in built.warnings if "is loopback and trainer.nnodes=2" in w]
        assert len(note) == 1 and "--with-sandbox" in note[0] and url in note[0]
    assert any("is loopback" in w for w in _rl({}).warnings)  # the default URL is loopback too
    assert not any("is loopback" in w for w in _rl({"RETOOL_SANDBOX_URL": "http://10.0.0.5:8080/run_code"}).warnings)
    one_node = plan.build(RECIPES["qwen3_4b_dapo"], "a3", STACK, path_check=False, environ={"HOME": FAKE_HOME})
    assert not any("is loopback" in w for w in one_node.warnings)


def test_sandbox_reach_problems_name_the_node_and_the_fix() -> None:
    answers = {"10.0.0.1 (node0)": None, "10.0.0.2 (node1)": "URLError: <urlopen error [Errno 111] refused>"}
    asked = []

    def probe(health: str, address: str | None, timeout_s: float) -> dict[str, str | None]:
        asked.append((health, address))
        return answers

    problems = ray_cluster.sandbox_reach_problems("http://127.0.0.1:8080/run_code", "10.0.0.1:6379", probe=probe)
    assert asked == [("http://127.0.0.1:8080/health", "10.0.0.1:6379")]
    assert len(problems) == 1 and problems[0].startswith("node 10.0.0.2 (node1) cannot reach the sandbox")
    assert "scripts/ray_cluster.sh head|worker --with-sandbox" in problems[0]
    routable = ray_cluster.sandbox_reach_problems("http://10.0.0.9:8080/run_code", None, probe=probe)
    assert "--host 0.0.0.0" in routable[0]
    assert ray_cluster.sandbox_reach_problems("http://h:1/run_code", None, probe=lambda *a: {"n": None}) == []

    def broken(*args: object) -> dict[str, str | None]:
        raise ConnectionError("nothing answers at 10.0.0.1:6379")

    assert ray_cluster.sandbox_reach_problems("http://h:1/run_code", None, probe=broken) == [
        "could not ask the Ray nodes whether they reach http://h:1/health (ConnectionError: nothing answers at "
        "10.0.0.1:6379)"
    ]


def test_the_launch_asks_every_node_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan's real-launch path (cpu, so this machine's platform is available) with the Ray checks replaced."""
    monkeypatch.setattr(ray_cluster, "cluster_problems", lambda hw, nodes, address: [])
    seen = []

    def reach(url: str, address: str | None) -> list[str]:
        seen.append((url, address))
        return ["node 10.0.0.2 (node1) cannot reach the sandbox: GET http://127.0.0.1:8080/health: refused"]

    monkeypatch.setattr(ray_cluster, "sandbox_reach_problems", reach)
    built = plan.build(
        RECIPES["qwen3_4b_dapo"],
        "cpu",
        STACK,
        ["trainer.nnodes=2"],
        path_check=False,
        for_launch=True,
        environ={"HOME": FAKE_HOME, "RAY_ADDRESS": "10.0.0.1:6379"},
    )
    assert seen == [("http://127.0.0.1:8080/run_code", "10.0.0.1:6379")]
    assert "sandbox: node 10.0.0.2 (node1) cannot reach the sandbox: GET http://127.0.0.1:8080/health: refused" in (
        built.errors
    )
    monkeypatch.setattr(
        ray_cluster, "cluster_problems", lambda hw, nodes, address: ["1 live node(s) joined, expected 2"]
    )
    seen.clear()
    built = plan.build(
        RECIPES["qwen3_4b_dapo"], "cpu", STACK, ["trainer.nnodes=2"], path_check=False, for_launch=True, environ={}
    )
    assert seen == [] and "Ray: 1 live node(s) joined, expected 2" in built.errors  # no cluster, nothing to ask
    assert not any(item.startswith("Ray cluster:") for item in built.checked)
    monkeypatch.setattr(ray_cluster, "cluster_problems", lambda hw, nodes, address: [])
    monkeypatch.setattr(ray_cluster, "sandbox_reach_problems", lambda url, address: [])
    built = plan.build(
        RECIPES["qwen3_4b_dapo"], "cpu", STACK, ["trainer.nnodes=2"], path_check=False, for_launch=True, environ={}
    )
    assert "Ray cluster: 2 live nodes, each reaches the sandbox" in built.checked, (built.errors, built.checked)


def test_a_run_that_joins_a_cluster_does_not_pass_num_cpus() -> None:
    """ray.init refuses num_cpus when it connects to a running cluster: the CPU platform's value stopped GRPO on two
    containers (scripts/test_images.sh --two-node). Dropped for nnodes > 1 and for RAY_ADDRESS; a user's refused."""
    key = "ray_kwargs.ray_init.num_cpus"
    alone = plan.build(RECIPES["qwen3_4b_dapo"], "cpu", STACK, [], path_check=False, environ={})
    assert any(arg.startswith(f"{key}=") for arg in alone.argv)
    for overrides, environ in ((["trainer.nnodes=2"], {}), ([], {"RAY_ADDRESS": "10.0.0.1:6379"})):
        joined = plan.build(RECIPES["qwen3_4b_dapo"], "cpu", STACK, overrides, path_check=False, environ=environ)
        assert not joined.errors, joined.errors
        assert not any(arg.startswith(f"{key}=") for arg in joined.argv)
        assert joined.cfg is not None and OmegaConf.select(joined.cfg, key) is None
    with pytest.raises(UsageError, match="joins a running Ray cluster"):
        plan.build(
            RECIPES["qwen3_4b_dapo"], "cpu", STACK, ["trainer.nnodes=2", f"{key}=4"], path_check=False, environ={}
        )
    sft = plan.build(
        RECIPES["qwen3_4b_sft"], "cpu", STACK, [], path_check=False, environ={"RAY_ADDRESS": "10.0.0.1:6379"}
    )
    assert not sft.errors


# -- the per-node sandbox's lifecycle -------------------------------------------------------------------------

STAND_IN = """\
import http.server, json, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
print("stand-in sandbox up", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_node_sandbox_starts_detached_and_stop_ends_it(tmp_path: Path) -> None:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    python = tmp_path / "python"  # `python -m sandbox serve ...` -> the stand-in, same arguments
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    python.chmod(0o755)
    box = node_sandbox.NodeSandbox(free_port(), tmp_path / "run", python=str(python))
    said: list[str] = []
    node_sandbox.start(box, {"PATH": "/usr/bin:/bin"}, said.append, ready_timeout_s=30)
    pid = node_sandbox.recorded_pid(box.pid_file)
    assert pid is not None and (node_sandbox.health(box.health_url) or {}).get("status") == "ok"
    assert said[-1] == f"sandbox ready: RETOOL_SANDBOX_URL=http://127.0.0.1:{box.port}/run_code on this node"
    node_sandbox.start(box, {}, said.append)  # again: kept, not a second one
    assert "already running" in said[-1] and node_sandbox.recorded_pid(box.pid_file) == pid
    assert node_sandbox.stop(box.run_dir, said.append, dry_run=True) == 0 and "would stop the sandbox" in said[-1]
    assert node_sandbox.stop(box.run_dir, said.append) == 1
    assert not box.pid_file.exists() and node_sandbox.health(box.health_url) is None
    assert "stand-in sandbox up" in box.log_file.read_text()


def test_node_sandbox_that_dies_reports_its_log(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'retool-sandbox: cannot listen on 127.0.0.1:1: busy' >&2\nexit 1\n")
    python.chmod(0o755)
    box = node_sandbox.NodeSandbox(1, tmp_path / "run", python=str(python))
    with pytest.raises(RuntimeError, match="exited with status 1:\nretool-sandbox: cannot listen"):
        node_sandbox.start(box, {}, lambda text: None, ready_timeout_s=30)
    assert not box.pid_file.exists()


def test_a_pid_file_of_another_process_is_not_ours(tmp_path: Path) -> None:
    (tmp_path / "sandbox-8080.pid").write_text("1\n")  # init: never the kit's sandbox
    assert node_sandbox.recorded_pid(tmp_path / "sandbox-8080.pid") is None
    assert node_sandbox.stop(tmp_path, lambda text: None) == 0
    assert not (tmp_path / "sandbox-8080.pid").exists()


def test_the_real_per_node_sandbox_answers_on_loopback(tmp_path: Path) -> None:
    """The command --with-sandbox runs is a working `retool-sandbox serve`, supervised: its server killed with
    SIGKILL comes back on the same port, and `stop` ends the supervisor and the server (about 20 s here)."""
    from recipes.retool.sandbox_client import SandboxClient
    from recipes.smoke.supervisor import kit_env

    box = node_sandbox.NodeSandbox(free_port(), tmp_path / "run")
    node_sandbox.start(box, kit_env(), lambda text: None, ready_timeout_s=120)
    supervisor = node_sandbox.recorded_pid(box.pid_file)
    try:
        client = SandboxClient(box.url, max_retries=6, retry_backoff_s=0.5)
        result = client.run("print(6 * 7)")
        assert (result.kind, result.stdout.strip()) == ("finished", "42")
        [server] = child_pids(supervisor)
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 60
        # waits for the restarted server; the client's retry path is tests/faults/test_sandbox_killed_mid_step.py's
        while (node_sandbox.health(box.health_url) or {}).get("status") != "ok" or child_pids(supervisor) == [server]:
            assert time.monotonic() < deadline, box.log_file.read_text()
            time.sleep(0.1)
        result = client.run("print(6 * 7)")  # the restarted server, on the same port
        client.close()
        assert (result.kind, result.stdout.strip()) == ("finished", "42"), result
        assert child_pids(supervisor) != [server]
        assert "killed by SIGKILL; restarting" in box.log_file.read_text()
    finally:
        assert node_sandbox.stop(box.run_dir, lambda text: None, ports=[box.port]) == 1
    assert not _alive(supervisor) and not _alive(server) and node_sandbox.health(box.health_url) is None


def _alive(pid: int) -> bool:
    """Running (a zombie the test process has not reaped yet is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# -- a node without iproute2 (the slim images) ---------------------------------------------------------------------


def test_without_iproute2_the_kernel_tells_the_interfaces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """python:3.11-slim has no ``ip``: ray_cluster.sh head then refused with "no interface holds 172.18.0.2"
    (scripts/test_images.sh --two-node). The kernel's answer must match iproute2's where both exist."""
    from platforms import netprobe

    with_ip = netprobe.run_ip_addr()
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip` here
    without = netprobe.run_ip_addr()
    assert without is not None
    found = {(item.interface, item.ip) for item in netprobe.parse_ip_addr(without)}
    assert ("lo", "127.0.0.1") in found
    if with_ip is not None:
        assert found == {(item.interface, item.ip) for item in netprobe.parse_ip_addr(with_ip)}
    node = nodenet.head_address(nodenet.NetProbes(host_addresses=lambda: []))
    if node is not None:  # a host with a route out: its interface is known without iproute2
        assert nodenet.interface_of(node) is not None
    assert netprobe.ioctl_ip_addr([(99, "kit-no-such0")]) is None
