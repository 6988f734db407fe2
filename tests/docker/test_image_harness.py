"""scripts/test_images.sh (docker/test_images.py) and the stand-in builders, without a docker daemon: their help,
their table, and that every stand-in answers for a pinned base. The builds themselves need a daemon and ~10 GB a
image: `bash scripts/test_images.sh` (docs/images.md, "Images built and run here")."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    cluster = two_node.Cluster("retool-npu-kit:cpu-x", tmp_path, tmp_path, (3, 2))
    (tmp_path / "run").mkdir()
    script = two_node.rl_script(cluster, tmp_path / "smoke", tmp_path / "run", "172.18.0.2").read_text()
    assert "export RAY_ADDRESS=172.18.0.2:6379" in script and "RETOOL_SANDBOX_URL=http://127.0.0.1:8080" in script
    assert "--max-restarts 1" in script and "trainer.nnodes=2" in script and "trainer.n_gpus_per_node=1" in script
    assert "/opt/retool-kit/recipes/run_qwen3_4b_dapo_npu.sh --hw cpu" in script


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


@pytest.mark.parametrize("stack", list(stacks.STACKS.values()), ids=list(stacks.STACKS))
def test_the_harness_hands_its_stack_to_the_stand_in_builder(stack: stacks.Stack, monkeypatch, tmp_path) -> None:
    """``--stack 0.9.1`` must stand in for that stack's base (vllm-ascend v0.23.0), and the builder must be told the
    stack: it reads the base's torch, CANN and vLLM from the stack's pins (KIT_STACK, kit_use_stack)."""
    harness = _harness()
    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(harness, "image_present", lambda tag: False)
    monkeypatch.setattr(harness, "run", lambda cmd, log, timeout, env=None: calls.append((cmd, env or {})) or (0, ""))
    made: list[str] = []
    described = harness.ensure_base("a2", tmp_path, made, {"KIT_STACK": "not-this-one"}, stack)
    base = f"{stack.pin('VLLM_ASCEND_IMAGE')}:{stack.pin('VLLM_ASCEND_TAG_A2')}"
    assert described == f"{base} (stand-in)" and made == [base]
    ((cmd, env),) = calls
    assert cmd[-2:] == [str(REPO_ROOT / "docker/standin/vllm_ascend.sh"), base] and env["KIT_STACK"] == stack.name


def _fake_docker_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH directory whose docker records its arguments and says every image exists (so the shared Debian root is
    not debootstrapped), with root's id and an apt-get that installs nothing."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "docker.log"
    bin_dir.mkdir()
    for name, body in (("docker", f'printf "%s\\n" "$*" >>{calls}'), ("id", "echo 0"), ("apt-get", "true")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    for name in ("debootstrap", "chroot"):  # present, never called: the root "exists"
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir, calls


def _stand_in_build_args(script: str, tag: str, stack: stacks.Stack, tmp_path: Path) -> dict[str, str]:
    bin_dir, calls = _fake_docker_bin(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "KIT_PYTHON")}
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "docker/standin" / script), tag],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PATH": f"{bin_dir}:{env['PATH']}", "KIT_STACK": stack.name},
    )
    assert proc.returncode == 0, proc.stderr
    build = next(line.split() for line in calls.read_text().splitlines() if line.startswith("build "))
    return dict(build[i + 1].split("=", 1) for i, word in enumerate(build) if word == "--build-arg")


@pytest.mark.parametrize("stack", list(stacks.STACKS.values()), ids=list(stacks.STACKS))
def test_the_npu_stand_in_is_built_at_its_stacks_pins(stack: stacks.Stack, tmp_path) -> None:
    """The stand-in sourced pins.env itself, so ``--stack 0.9.1`` tagged a CANN 8.3 / torch 2.7.1 / vLLM 0.11 root
    quay.io/ascend/vllm-ascend:v0.23.0; its numpy constraint was vllm-ascend 0.11's numpy<2, which the 0.9.1
    stack's numpy 2.2.6 contradicts."""
    tag = f"{stack.pin('VLLM_ASCEND_IMAGE')}:{stack.pin('VLLM_ASCEND_TAG_A3')}"
    args = _stand_in_build_args("vllm_ascend.sh", tag, stack, tmp_path)
    assert args["STANDIN_FOR"] == tag and args["SOC_VERSION"] == "ascend910_9391"
    for arg, key in (
        ("CANN_VERSION", "CANN_VERSION"),
        ("TORCH_VERSION", "NPU_TORCH_VERSION"),
        ("TORCH_NPU_VERSION", "TORCH_NPU_VERSION"),
        ("VLLM_VERSION", "VLLM_VERSION"),
        ("VLLM_ASCEND_VERSION", "VLLM_ASCEND_VERSION"),
    ):
        assert args[arg] == stack.pin(key), arg
    assert args["NUMPY_SPEC"] == f"numpy=={stack.python_requirements()['numpy']}"


@pytest.mark.parametrize("stack", list(stacks.STACKS.values()), ids=list(stacks.STACKS))
def test_the_cuda_stand_in_is_built_at_its_stacks_vllm(stack: stacks.Stack, tmp_path) -> None:
    tag = f"{stack.pin('VLLM_CUDA_IMAGE')}:{stack.pin('VLLM_CUDA_TAG')}"
    args = _stand_in_build_args("vllm_openai.sh", tag, stack, tmp_path)
    assert args["VLLM_VERSION"] == stack.pin("VLLM_VERSION") and args["STANDIN_FOR"] == tag


def test_two_node_slots_follow_the_stacks_task_runner() -> None:
    """verl 0.9.1's TaskRunner holds no Ray CPU (verl/trainer/main_ppo.py:102, a plain ``@ray.remote``; 0.6.1's holds
    one, main_ppo.py:77): on the reference's 3,2 slots Ray put both one-rank groups of a 0.9.1 run on the head
    (measured, and the head's memory ran out). The head's slots are one rank's share (a bundle and a vLLM server)
    plus the stack's TaskRunner CPUs, so no node has a spare slot by the TaskRunner on either stack."""
    two_node = _two_node()
    runners = {name: stack.verl.task_runner_cpus for name, stack in stacks.STACKS.items()}
    assert runners == {"0.6.1": 1, "0.9.1": 0}
    slots = {name: two_node.node_slots(stack.verl.task_runner_cpus) for name, stack in stacks.STACKS.items()}
    assert slots == {"0.6.1": (3, 2), "0.9.1": (2, 2)}


def test_two_node_slots_reach_the_cluster(monkeypatch, tmp_path) -> None:
    """The plain ``--two-node`` takes the stack's slots (:func:`two_node.node_slots`); ``--two-node-slots`` overrides
    the nodes' ``--num-cpus``."""
    harness, two_node = _harness(), _two_node()
    assert harness.parse_args(["--two-node", "--two-node-slots", "2,2"]).two_node_slots == (2, 2)
    assert harness.parse_args(["--two-node"]).two_node_slots is None
    for bad in ("2", "0,2", "a,b"):
        with pytest.raises(SystemExit):
            harness.parse_args(["--two-node-slots", bad])
    seen = []
    monkeypatch.setattr(two_node, "run_two_nodes", lambda c, smoke, env, say: seen.append(c.slots) or {})
    smoke = tmp_path / "ckpt" / "smoke" / "sft" / "hf_merged"
    smoke.mkdir(parents=True)
    row = harness.Row("retool-npu-kit:cpu-x", "b", checks={"smoke --fast": "ok (1 s)"})
    reference, current = stacks.STACKS["0.6.1"], stacks.STACKS["0.9.1"]
    harness.check_two_nodes(row, tmp_path, tmp_path, {}, reference, (2, 2))
    harness.check_two_nodes(row, tmp_path, tmp_path, {}, reference)
    harness.check_two_nodes(row, tmp_path, tmp_path, {}, current)
    assert seen == [(2, 2), (3, 2), (2, 2)]


def test_the_kill_waits_for_the_attempts_end_after_it(monkeypatch, tmp_path) -> None:
    """A restart spent before the kill (measured: Ray's memory monitor killed a rank at step 1 on this 23 GB machine)
    leaves "restart 1/1" in the log; the attempt's end is what the run writes after the kill, not that line."""
    two_node = _two_node()
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    (run / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    log = run / "rl.log"
    log.write_text("restart 1/1: trainer exited with status 1 after step 1; resuming from global_step_1\n")
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(two_node, "_docker", lambda *args, **kw: calls.append(args))
    monkeypatch.setattr(two_node, "ip_of", lambda name: "172.18.0.3")
    monkeypatch.setattr(two_node, "start_node", lambda *args: calls.append(("start",)))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:  # the run notices the lost node a few polls after the kill
            log.write_text(log.read_text() + "restart: waiting up to 300 s for 2 live nodes\n")

    monkeypatch.setattr(two_node.time, "sleep", sleep)

    class Running:
        def poll(self) -> None:
            return None

    cluster = two_node.Cluster("retool-npu-kit:cpu-x", tmp_path, tmp_path, (2, 2))
    facts = two_node.kill_and_resume(cluster, run, Running(), {}, lambda message: None)  # type: ignore[arg-type]
    assert facts["killed"] and isinstance(facts["failed_in_s"], float)
    assert len(sleeps) == 3 and calls[0][0] == "kill" and ("start",) in calls
