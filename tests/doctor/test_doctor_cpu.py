"""retool-doctor on this plain CPU machine (no torch_npu, no CANN, no Ray cluster), plus its in-process API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from npu_kernels import doctor

NO_NPU_ENV = {"KIT_DEVICE": "", "ASCEND_RT_VISIBLE_DEVICES": ""}


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = kit_env()
    for key in NO_NPU_ENV:
        run_env.pop(key, None)
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "npu_kernels.doctor", *args],
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


def test_asking_for_a3_on_cpu_fails_with_a_fix() -> None:
    proc = _doctor("--json", "--hw", "a3", "--only", "platform", env={"KIT_DEVICE": "cpu"})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert report["platform"] == "cpu" and report["target"] == "npu"
    (platform,) = report["checks"]
    assert platform["status"] == "FAIL" and "docker/run_npu.sh" in platform["fix"]


def test_usage_errors_exit_2() -> None:
    assert _doctor("--only", "bogus").returncode == 2
    proc = _doctor("--json", env={"KIT_DEVICE": "tpu"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_import_is_light() -> None:
    """The doctor must load where torch/vLLM/Ray are broken: importing it imports none of them."""
    code = (
        "import sys, npu_kernels.doctor; print([m for m in ('torch', 'torch_npu', 'vllm', 'ray') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=kit_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_problem_carries_a_fix() -> None:
    with pytest.raises(ValueError, match="must say how to fix it"):
        doctor.Result("x", doctor.FAIL, "broken")
    with pytest.raises(ValueError, match="must say how to fix it"):
        doctor.Result("x", doctor.WARN, "odd")
    assert doctor.Result("x", doctor.OK, "fine").fix == ""


def test_in_process_probes_sandbox_and_disk(tmp_path: Path) -> None:
    """Probes/Options are the API the CLI sits on: a run with only injected inputs, no subprocess."""
    probes = doctor.Probes(env={}, dev_root=tmp_path, detect_platform=lambda: doctor.device.CPU)
    opts = doctor.Options(hw="cpu", only=frozenset({"sandbox", "disk", "paths"}), ckpt_dir=tmp_path / "ckpt")
    opts.sandbox_url = "http://127.0.0.1:9/run_code"  # discard port: nothing listens
    opts.min_free_gb = 1e12
    opts.data = [tmp_path / "missing.parquet"]
    report = doctor.run_checks(opts, probes)
    status = {r.check: r.status for r in report.results}
    assert status == {"sandbox": "FAIL", "paths.data.missing.parquet": "FAIL", "disk": "FAIL"}
    assert report.exit_code == 1
    assert "fix: " in doctor.render_table(report)


def test_sandbox_base_url() -> None:
    assert doctor._sandbox_base("http://h:8080/run_code") == "http://h:8080"
    assert doctor._sandbox_base("http://h:8080/") == "http://h:8080"
    assert doctor._sandbox_base("http://h:8080/v1/ping") == "http://h:8080"
