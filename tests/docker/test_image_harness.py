"""scripts/test_images.sh (docker/test_images.py) and the stand-in builders, without a docker daemon: their help,
their table, and that every stand-in answers for a pinned base. The builds themselves need a daemon and ~10 GB a
image: `bash scripts/test_images.sh` (docs/images.md, "Images built and run here")."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from kit_testing import REPO_ROOT

from platforms import PROFILES, stacks


def _harness():
    spec = importlib.util.spec_from_file_location("kit_test_images", REPO_ROOT / "docker" / "test_images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_help_names_what_it_checks() -> None:
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "test_images.sh"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "stand-in" in proc.stdout and "--keep" in proc.stdout and "--hw" in proc.stdout


def test_every_stand_in_is_for_a_pinned_base_and_has_help() -> None:
    harness = _harness()
    repo_keys = {p.image.base_repo_key for p in PROFILES.values() if p.image}
    assert set(harness.STANDINS) == repo_keys  # every pinned base can be stood in for
    for key, script in harness.STANDINS.items():
        assert key in repo_keys and all(stack.pin(key) for stack in stacks.STACKS.values()), key
        proc = subprocess.run(["bash", str(REPO_ROOT / script), "--help"], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and "STAND-IN" in proc.stdout, proc.stdout + proc.stderr
        bare = subprocess.run(["bash", str(REPO_ROOT / script)], capture_output=True, text=True, timeout=30)
        assert bare.returncode == 2  # no tag: usage, not a debootstrap


def test_the_table_row() -> None:
    row = _harness().Row("retool-npu-kit:cpu-x", "python:x (stand-in)", 308.4, 9.42, {"build": "ok", "doctor": "ok"})
    assert row.line() == "| retool-npu-kit:cpu-x | python:x (stand-in) | 308 | 9.42 GB | build ok, doctor ok |"
    assert _harness().Row("i", "b").line() == "| i | b | - | - | - |"


def _two_node():
    _harness()  # puts docker/ on sys.path the way the script runs
    sys.path.insert(0, str(REPO_ROOT / "docker"))
    import two_node

    return two_node


RAY_LOG = """\
(WorkerDict pid=3913) something
(WorkerDict pid=2524, ip=172.18.0.3) something
(vLLMHttpServer pid=3977) up
(vLLMHttpServer pid=2609, ip=172.18.0.3) up
(TaskRunner pid=3827) step:1 - x
"""


def test_two_node_placement_reads_rays_prefixes() -> None:
    """Measured: the driver's own node's lines carry no ip, a remote node's do (scripts/test_images.sh --two-node)."""
    two_node = _two_node()
    assert two_node.placement(RAY_LOG, "172.18.0.3") == {
        "WorkerDict": {"head", "worker"},
        "vLLMHttpServer": {"head", "worker"},
    }
    one_side = two_node.placement(RAY_LOG.replace(", ip=172.18.0.3", ""), "172.18.0.3")
    assert one_side["WorkerDict"] == {"head"}


def test_two_node_verdicts() -> None:
    two_node = _two_node()
    good = {
        "cluster_ready": True,
        "preflight": True,
        "placement": {"WorkerDict": ["head", "worker"], "vLLMHttpServer": ["head", "worker"]},
        "failed_in_s": 4.2,
        "rc": 0,
        "last_step": two_node.STEPS,
        "seconds": 500.0,
        "lines": ["restart 1/1: trainer exited with status 1 after step 2; resuming from global_step_2 (lost 0 ...)"],
    }
    verdicts = two_node.verdicts(good)
    assert all(v.startswith("ok") for v in verdicts.values()), verdicts
    assert set(verdicts) == {"cluster", "preflight", "ranks on both", "kill", "resume"}
    for key, bad in (("placement", {"WorkerDict": ["worker"]}), ("failed_in_s", None), ("lines", []), ("rc", 1)):
        assert any("FAILED" in v for v in two_node.verdicts({**good, key: bad}).values()), key
    assert two_node.verdicts({"cluster_ready": False, "status": ["1 live node(s)"]})["cluster"].startswith("FAILED")


def test_two_node_run_is_the_launchers_multi_node_rl(tmp_path) -> None:
    two_node = _two_node()
    cluster = two_node.Cluster("retool-npu-kit:cpu-x", tmp_path, tmp_path)
    (tmp_path / "run").mkdir()
    script = two_node.rl_script(cluster, tmp_path / "smoke", tmp_path / "run", "172.18.0.2").read_text()
    assert "export RAY_ADDRESS=172.18.0.2:6379" in script and "RETOOL_SANDBOX_URL=http://127.0.0.1:8080" in script
    assert "--max-restarts 1" in script and "trainer.nnodes=2" in script and "trainer.n_gpus_per_node=1" in script
    assert "/opt/retool-kit/recipes/run_qwen3_4b_dapo_npu.sh --hw cpu" in script
    assert [slots for _, slots in two_node.NODES] == [3, 2]  # 5 = the run's Ray CPUs: no node holds both ranks


def test_the_doctor_check_accepts_only_the_fails_a_stand_in_causes(monkeypatch, tmp_path) -> None:
    """The NPU stand-in sets TORCH_DEVICE_BACKEND_AUTOLOAD=0 (no CANN to load torch_npu with), which the doctor
    refuses on an NPU host: that FAIL is the stand-in's, any other FAIL is the image's."""
    harness = _harness()
    said = "WARN    image.base   STAND-IN base: not quay.io/...\n"
    autoload = "FAIL    env.bad.TORCH_DEVICE_BACKEND_AUTOLOAD  TORCH_DEVICE_BACKEND_AUTOLOAD=0 on an NPU host\n"
    for text, rc, base, good in (
        (said + autoload, 1, "q (stand-in)", True),
        (said + autoload + "FAIL    versions.torch  2.7.0\n", 1, "q (stand-in)", False),
        (autoload, 1, "q (real)", False),  # on a real base nothing is excused
        ("all OK\n", 0, "q (real)", True),
        ("all OK\n", 0, "q (stand-in)", False),  # a stand-in the doctor did not tell
    ):
        monkeypatch.setattr(harness, "run_in_image", lambda *a, text=text, rc=rc: (rc, text))
        row = harness.Row("img", base)
        harness.check_doctor("a2", row, tmp_path, tmp_path)
        assert row.checks["doctor"].startswith("ok") is good, (text, row.checks)
