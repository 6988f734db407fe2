"""retool-doctor on this plain CPU machine (no torch_npu, no CANN, no Ray cluster), plus its in-process API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import CPU, NPU, PROFILES, HardwareProfile, stacks
from platforms.cpu import CpuPlatform
from platforms.doctor.cli import CHECKS, REGISTRY, render_table, run_checks
from platforms.doctor.host import _dist_backend
from platforms.doctor.network import selects
from platforms.doctor.probes import FAIL, INFO, OK, WARN, Options, Probes, Result
from platforms.doctor.run import sandbox_base
from platforms.netprobe import parse_ip_addr

# Variables of the developer's shell that would change what the doctor checks here.
NO_NPU_ENV = {"KIT_DEVICE": "", "ASCEND_RT_VISIBLE_DEVICES": "", "KIT_HW": "", "RETOOL_SANDBOX_URL": ""}


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = kit_env()
    for key in NO_NPU_ENV:
        run_env.pop(key, None)
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "platforms.doctor", *args],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )


@pytest.fixture(scope="module")
def cpu_json() -> tuple[int, dict]:
    proc = _doctor("--json", "--dev-root", "/nonexistent-dev")
    return proc.returncode, json.loads(proc.stdout)


def test_cpu_json_exits_0_with_platform_cpu(cpu_json: tuple[int, dict]) -> None:
    code, report = cpu_json
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert code == 0, failed
    assert report["platform"] == "cpu" and report["hardware"] == "cpu" and report["ok"] is True
    platform = next(c for c in report["checks"] if c["check"] == "platform")
    assert platform["status"] == "OK" and "no NPU" in platform["summary"]
    skipped = {c["check"] for c in report["checks"] if c["status"] == "SKIP"}
    assert {"cann", "npu-smi", "ray"} <= skipped, "NPU-only checks must be skipped cleanly on CPU"
    dist = next(c for c in report["checks"] if c["check"] == "platform.dist")
    assert dist["status"] == "INFO" and dist["details"] == {"backend": CPU.dist_backend}


def test_cpu_checks_this_venv_against_the_pins(cpu_json: tuple[int, dict]) -> None:
    _, report = cpu_json
    by_name = {c["check"]: c for c in report["checks"]}
    for name in ("versions.torch", "versions.transformers", "versions.ray", "versions.verl"):
        assert by_name[name]["status"] == "OK", by_name[name]
    patches = sorted(p.name[:4] for p in (REPO_ROOT / "patches").glob("*.patch"))
    assert [by_name[f"patches.{p}"]["status"] for p in patches] == ["OK"] * len(patches)


# KIT_DEVICE=cpu below only saves the torch import of CUDA probing; auto-detection is covered by cpu_json.


def test_cpu_table_says_no_npu() -> None:
    proc = _doctor("--only", "platform,versions", env={"KIT_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("retool-doctor: platform cpu, hardware cpu")
    assert any(line.startswith("OK") and "no NPU" in line for line in proc.stdout.splitlines())
    assert "cann" not in proc.stdout, "--only must restrict the groups"


@pytest.mark.parametrize("option", ["--hw", "--profile", None])
def test_asking_for_a3_on_cpu_fails_with_a_fix(option: str | None) -> None:
    """--profile, its alias --hw, and KIT_HW (default_hardware, the default of every entry point) all pick a3."""
    args = [option, "a3"] if option else []
    proc = _doctor("--json", *args, "--only", "platform", env={"KIT_DEVICE": "cpu", "KIT_HW": "" if option else "a3"})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert report["platform"] == "cpu" and report["hardware"] == "a3" and report["target"] == "npu"
    (platform,) = report["checks"]
    assert platform["status"] == "FAIL" and "docker/run_npu.sh" in platform["fix"]
    assert "ascend-toolkit/set_env.sh" in platform["fix"], "the fix names the platform's setup scripts"


def test_usage_errors_exit_2() -> None:
    assert _doctor("--only", "bogus").returncode == 2
    for env in ({"KIT_DEVICE": "tpu"}, {"KIT_DEVICE": "cpu", "KIT_HW": "a9"}):
        proc = _doctor("--json", env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, env
        assert proc.stderr.startswith("retool-doctor: error: ")


def test_help_names_the_profile_option_and_the_sandbox_variable() -> None:
    proc = _doctor("--help")
    assert proc.returncode == 0
    for text in ("--profile", "--hw", "RETOOL_SANDBOX_URL", "--node-ip", "network"):
        assert text in proc.stdout, text


def test_import_is_light() -> None:
    """The doctor must load where torch/vLLM/Ray are broken: importing it imports none of them."""
    code = (
        "import sys, platforms.doctor.cli; "
        "print([m for m in ('torch', 'torch_npu', 'vllm', 'ray') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=kit_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_problem_carries_a_fix() -> None:
    with pytest.raises(ValueError, match="must say how to fix it"):
        Result("x", FAIL, "broken")
    with pytest.raises(ValueError, match="must say how to fix it"):
        Result("x", WARN, "odd")
    assert Result("x", OK, "fine").fix == ""


def test_in_process_probes_sandbox_and_disk(tmp_path: Path) -> None:
    """Probes/Options are the API the CLI sits on: a run with only injected inputs, no subprocess."""
    no_userns = "bwrap: No permissions to create new namespace"
    probes = Probes(env={}, dev_root=tmp_path, detect_platform=lambda: CPU, bwrap_probe=lambda: no_userns)
    opts = Options(profile="cpu", only=frozenset({"sandbox", "disk", "paths"}), ckpt_dir=tmp_path / "ckpt")
    opts.sandbox_url = "http://127.0.0.1:9/run_code"  # discard port: nothing listens
    opts.min_free_gb = 1e12
    opts.data = [tmp_path / "missing.parquet"]
    report = run_checks(opts, probes)
    status = {r.check: r.status for r in report.results}
    assert status == {
        "sandbox": "FAIL",
        "sandbox.bwrap": "WARN",  # the sandbox would fall back to its own isolation: said, with how to get bwrap
        "paths.data.missing.parquet": "FAIL",
        "disk": "FAIL",
    }
    bwrap = next(r for r in report.results if r.check == "sandbox.bwrap")
    assert no_userns in bwrap.summary and "user namespaces" in bwrap.fix
    assert report.exit_code == 1
    assert "fix: " in render_table(report)


def test_sandbox_flag_wins_over_the_environment(tmp_path: Path) -> None:
    probes = Probes(env={"RETOOL_SANDBOX_URL": "http://127.0.0.1:9/run_code"}, detect_platform=lambda: CPU)
    opts = Options(profile="cpu", only=frozenset({"sandbox"}), sandbox_url="http://127.0.0.1:7/run_code")
    result, _bwrap = run_checks(opts, probes).results
    assert result.status == FAIL and result.details == {
        "url": "http://127.0.0.1:7/v1/ping",
        "given_by": "--sandbox-url",
    }
    opts.sandbox_url = None
    result, _bwrap = run_checks(opts, probes).results
    assert result.details["url"] == "http://127.0.0.1:9/v1/ping" and "RETOOL_SANDBOX_URL" in result.fix


def test_sandbox_base_url() -> None:
    assert sandbox_base("http://h:8080/run_code") == "http://h:8080"
    assert sandbox_base("http://h:8080/") == "http://h:8080"
    assert sandbox_base("http://h:8080/v1/ping") == "http://h:8080"


# -- the registry: which groups run where comes from platform/profile facts, not names


def test_registry_applies_groups_by_platform_facts() -> None:
    assert [group.name for group in REGISTRY][:3] == ["platform", "image", "cann"]
    assert CHECKS["cann"].platforms() == CHECKS["npu-smi"].platforms() == ["npu"]  # the platform with setup scripts
    assert CHECKS["ray"].platforms() == ["cuda", "npu"]  # profiles with devices per node
    for name in ("platform", "image", "network", "versions", "patches", "env", "sandbox", "paths", "disk"):
        assert CHECKS[name].applies is None, name
    for profile in PROFILES.values():
        assert CHECKS["cann"].applies(profile) == bool(profile.platform.setup_scripts), profile.name
        assert CHECKS["ray"].applies(profile) == (profile.devices_per_node is not None), profile.name


def test_forbidden_packages_come_from_the_platform(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "triton-3.4.0.dist-info").mkdir(parents=True)
    (site / "triton-3.4.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.4.0\n")
    probes = Probes(env={}, search_path=[str(site)], detect_platform=lambda: CPU)
    by_profile = {}
    for profile in ("a3", "cpu"):
        report = run_checks(Options(profile=profile, only=frozenset({"versions"})), probes)
        by_profile[profile] = {r.check: r for r in report.results}
    forbidden = by_profile["a3"]["versions.forbidden"]
    assert forbidden.status == WARN and "triton 3.4.0" in forbidden.summary
    assert forbidden.fix.startswith("pip uninstall -y triton ") and forbidden.details == {
        "present": {"triton": "3.4.0"}
    }
    assert "versions.forbidden" not in by_profile["cpu"], "the cpu platform forbids nothing"
    assert [c for c in by_profile["a3"] if c not in ("versions.forbidden", "versions.stack")][
        : len(NPU.pinned_stack)
    ] == [f"versions.{p.dist}" for p in NPU.pinned_stack], (
        "the stack rows are the platform's pinned_stack, in its order"
    )


@pytest.mark.parametrize(("asked", "nodes", "hint"), [("a3", 8, "--profile a2"), ("a2", 16, "--profile a3")])
def test_device_count_hint_names_the_profile_that_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str, nodes: int, hint: str
) -> None:
    for i in range(nodes):
        (tmp_path / f"davinci{i}").touch()
    monkeypatch.setenv(NPU.visible_devices_env or "", ",".join(map(str, range(nodes))))  # no torch_npu needed
    probes = Probes(env={}, dev_root=tmp_path, detect_platform=lambda: NPU)
    report = run_checks(Options(profile=asked, only=frozenset({"platform"})), probes)
    devices = next(r for r in report.results if r.check == "platform.devices")
    assert devices.status == WARN and f"{nodes} /dev/davinciN nodes" in devices.summary
    assert hint in devices.fix and "docker/run_npu.sh" in devices.fix


# -- the platform's distributed backend (torch imported lazily, failures reported)


class _NoSuchBackend(CpuPlatform):
    dist_backend = "no-such-backend"


class _BrokenTorch(CpuPlatform):
    def torch_module(self):  # noqa: ANN201
        raise OSError("libtorch_cpu.so: cannot open shared object file")


@pytest.mark.parametrize(
    ("platform", "status", "text"),
    [
        (CPU, INFO, "has the gloo backend"),
        (_NoSuchBackend(), WARN, "has no no-such-backend backend"),
        (_BrokenTorch(), WARN, "OSError: libtorch_cpu.so"),
    ],
)
def test_dist_backend_line(platform: CpuPlatform, status: str, text: str) -> None:
    result = _dist_backend(HardwareProfile("test", platform, None, None, "test profile"), stacks.REFERENCE)
    assert result.check == "platform.dist" and result.status == status and text in result.summary
    if status == WARN:
        assert ".venv/" in result.fix


# -- network: the interface that carries this node's address


IP_ADDR = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: bond0    inet 10.0.0.5/16 brd 10.0.255.255 scope global bond0\\       valid_lft forever preferred_lft forever
3: eth1@if9    inet 192.168.1.20/24 brd 192.168.1.255 scope global eth1\\       valid_lft forever preferred_lft forever
"""


def test_parse_ip_addr() -> None:
    found = [(a.interface, a.ip) for a in parse_ip_addr(IP_ADDR)]
    assert found == [("lo", "127.0.0.1"), ("bond0", "10.0.0.5"), ("eth1", "192.168.1.20")]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("HCCL_SOCKET_IFNAME", "bond", True),  # prefix
        ("HCCL_SOCKET_IFNAME", "eth,bond", True),
        ("HCCL_SOCKET_IFNAME", "=bond", False),  # exact: bond != bond0
        ("HCCL_SOCKET_IFNAME", "=eth1,bond0", True),
        ("HCCL_SOCKET_IFNAME", "^docker,lo", True),  # exclusion that spares bond0
        ("HCCL_SOCKET_IFNAME", "^bond", False),
        ("HCCL_SOCKET_IFNAME", "^=bond0", False),
        ("NCCL_SOCKET_IFNAME", "bo", True),
        ("GLOO_SOCKET_IFNAME", "bond", False),  # Gloo and TensorPipe: exact names only
        ("GLOO_SOCKET_IFNAME", "eth1,bond0", True),
        ("TP_SOCKET_IFNAME", "bond0", True),
    ],
)
def test_socket_ifname_syntax(variable: str, value: str, expected: bool) -> None:
    assert selects(variable, value, "bond0") is expected


def _network(env: dict[str, str], route: dict[str, str | None], text: str | None = IP_ADDR, **opts: str) -> list:
    asked: list[str] = []

    def local_address(peer: str) -> str | None:
        asked.append(peer)
        return route.get(peer)

    probes = Probes(env=env, detect_platform=lambda: CPU, ip_addr_text=lambda: text, local_address=local_address)
    report = run_checks(Options(profile="a3", only=frozenset({"network"}), **opts), probes)
    return [asked, {r.check: r for r in report.results}]


def test_network_uses_the_route_to_master_addr_and_warns_on_a_wrong_interface() -> None:
    env = {"MASTER_ADDR": "10.0.0.1", "HCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "bond0"}
    asked, results = _network(env, {"10.0.0.1": "10.0.0.5", "8.8.8.8": "192.168.1.20"})
    assert asked == ["10.0.0.1"], "MASTER_ADDR is the peer whose route names this node's address"
    main = results["network"]
    assert main.status == INFO and main.details["interface"] == "bond0" and "TP_SOCKET_IFNAME=bond0" in main.summary
    wrong = results["network.ifname.HCCL_SOCKET_IFNAME"]
    assert wrong.status == WARN and wrong.fix.startswith("export HCCL_SOCKET_IFNAME=bond0")
    assert set(results) == {"network", "network.ifname.HCCL_SOCKET_IFNAME"}, "GLOO names bond0: no warning"


def test_network_default_route_node_ip_option_and_degraded_probes() -> None:
    asked, results = _network({}, {"8.8.8.8": "192.168.1.20"})
    assert asked == ["8.8.8.8"] and results["network"].details["interface"] == "eth1"
    asked, results = _network({}, {}, node_ip="10.0.0.5")
    assert asked == [] and results["network"].details["found_by"] == "--node-ip"
    assert _network({}, {})[1]["network"].status == "SKIP", "no route and no --node-ip: nothing to tell"
    assert _network({}, {"8.8.8.8": "127.0.1.1"})[1]["network"].summary.startswith("this node's address is loopback")
    assert "iproute2" in _network({}, {"8.8.8.8": "10.0.0.5"}, text=None)[1]["network"].summary
    assert "none of this host's interfaces" in _network({}, {"8.8.8.8": "172.31.0.9"})[1]["network"].summary
