"""vLLM's CPU build in the kit's venv: the install facts (platforms/vllm_cpu.py) and the cpu platform's
rollout facts, checked against the real package where it is installed.

* the ``vllm`` alias wheel is what vLLM's platform detection and verl's version gate read;
* the requirement list drops exactly what the venv pins itself (torch, triton), nothing else;
* the engine falls back to the hf rollout with a reason when vllm-cpu is missing;
* the platform's sleep-mode fact is real: verl's server with vLLM's sleep mode on (verl hard-codes it) is refused by
  vLLM on CPU, which is why the cpu platform turns it off (a run with it on stops before its first step);
* the batch limits the cpu platform hands verl are vLLM's own for a CPU API server.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kit_testing import kit_env, require_vllm, tiny_model_dir, vllm_server

from platforms import CPU, CUDA, NPU, stacks, vllm_cpu
from platforms.base import (
    RL_PREFIX_CACHING_KEY,
    RL_ROLLOUT_NAME_KEY,
    RL_VLLM_BLOCK_SIZE_KEY,
    RL_VLLM_SLEEP_MODE_KEY,
)
from platforms.cpu import VLLM_CPU_BATCH_LIMITS


def test_alias_wheel_is_a_valid_metadata_only_wheel(tmp_path: Path) -> None:
    wheel = vllm_cpu.alias_wheel(tmp_path, "0.11.0")
    assert wheel.name == "vllm-0.11.0+cpu-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert names == {f"vllm-0.11.0+cpu.dist-info/{n}" for n in ("METADATA", "WHEEL", "RECORD")}, names
        metadata = archive.read("vllm-0.11.0+cpu.dist-info/METADATA").decode()
        record = archive.read("vllm-0.11.0+cpu.dist-info/RECORD").decode()
    assert "Name: vllm\n" in metadata and "Version: 0.11.0+cpu\n" in metadata
    assert "vllm-0.11.0+cpu.dist-info/METADATA,sha256=" in record  # pip verifies and uninstalls by RECORD


def test_the_venv_carries_vllms_cpu_build_under_both_names() -> None:
    require_vllm()
    version = stacks.REFERENCE.pin("VLLM_VERSION")
    assert importlib.metadata.version(stacks.REFERENCE.pin("VLLM_CPU_DIST")) == version
    assert importlib.metadata.version("vllm") == f"{version}+cpu"  # what vLLM's platform detection looks for
    engine = CPU.rollout_engine(stacks.REFERENCE)
    assert (engine.name, engine.version) == ("vllm", f"{version}+cpu"), engine


def test_vllm_detects_its_cpu_platform_and_verl_accepts_the_version() -> None:
    require_vllm()
    code = (
        "from vllm.platforms import current_platform; print(current_platform.device_type); "
        "import verl.third_party.vllm as v; print(v.vllm_version)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=kit_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["cpu", f"{stacks.REFERENCE.pin('VLLM_VERSION')}+cpu"], out.stdout


def test_requirements_leave_out_only_what_the_venv_pins() -> None:
    require_vllm()
    listed = vllm_cpu.requirements()
    names = [line.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip() for line in listed]
    assert not [n for n in names if n.lower().startswith(("torch", "triton"))], listed
    assert "intel_extension_for_pytorch==2.8.0" in listed  # CPU prefill imports IPEX
    assert "transformers>=4.55.2" in listed  # an ordinary requirement stays


def test_engine_falls_back_to_hf_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_cpu, "installed_version", lambda dist: None)
    engine = vllm_cpu.engine()
    assert engine.name == "hf" and engine.version is None
    assert "hf rollout" in engine.note and ("not installed" in engine.note or "wheel" in engine.note), engine.note
    monkeypatch.setattr(vllm_cpu.platform, "machine", lambda: "aarch64")
    assert "no aarch64 wheel" in vllm_cpu.engine().note
    monkeypatch.setattr(vllm_cpu, "engine", lambda: engine)
    assert f"{RL_ROLLOUT_NAME_KEY}=hf" in CPU.verl_overrides("rl", stacks.REFERENCE)


def test_sleep_mode_is_off_on_cpu_and_prefix_caching_where_the_stacks_vllm_breaks_it() -> None:
    cpu = CPU.verl_overrides("rl", stacks.REFERENCE)
    assert f"{RL_VLLM_SLEEP_MODE_KEY}=False" in cpu and "actor_rollout_ref.rollout.enforce_eager=True" in cpu
    assert f"{RL_PREFIX_CACHING_KEY}=False" in cpu  # IPEX's decode kernel (tests/cpu/test_cpu_grpo_prefix_groups.py)
    assert not [o for o in cpu if RL_VLLM_BLOCK_SIZE_KEY in o], cpu  # vLLM 0.11 with IPEX keeps its own block size
    current = CPU.verl_overrides("rl", stacks.CURRENT)  # vLLM 0.23's own CPU attention, in blocks of 32
    assert f"{RL_PREFIX_CACHING_KEY}=True" in current and f"{RL_VLLM_BLOCK_SIZE_KEY}=32" in current, current
    assert f"{RL_PREFIX_CACHING_KEY}=False" not in current, current
    for platform, stack in itertools.product((NPU, CUDA), stacks.STACKS.values()):  # vLLM's sleep mode is what
        overrides = platform.verl_overrides("rl", stack)  # frees the device for training there: keep verl's
        changed = ("enable_sleep_mode", RL_ROLLOUT_NAME_KEY, RL_PREFIX_CACHING_KEY, RL_VLLM_BLOCK_SIZE_KEY)
        assert not [o for o in overrides if any(key in o for key in changed)], overrides


def test_vllm_refuses_verls_sleep_mode_on_cpu() -> None:
    """Finding 1 of the engine issue, reproduced on the real server: without the platform's override it stops."""
    require_vllm()
    overrides = [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
    ]
    with pytest.raises(Exception, match="Sleep mode is not supported"), vllm_server(tiny_model_dir(), overrides):
        pass


#: vLLM 0.11's auto binding of one TP-1 CPU worker, as its worker computes it (vllm/v1/worker/cpu_worker.py:143-147),
#: with and without the reserved-core setting: printed as JSON by a fresh interpreter (the venv's vLLM imported here
#: would change later tests' import order)
_AUTOBIND_011 = """
import json, os
from types import SimpleNamespace
from vllm.v1.worker.cpu_worker import CPUWorker
worker = SimpleNamespace(parallel_config=SimpleNamespace(world_size=1, data_parallel_size_local=1), local_rank=0)
name = "VLLM_CPU_NUM_OF_RESERVED_CPU"
given = CPUWorker._get_autobind_cpu_ids(worker, lambda cpus: cpus[-1:])
os.environ.pop(name)
print(json.dumps({"given": given, "default": CPUWorker._get_autobind_cpu_ids(worker, lambda cpus: cpus[-1:])}))
"""


def test_the_reserved_core_setting_is_vllm_011s_own_default() -> None:
    """The cpu platform's VLLM_CPU_NUM_OF_RESERVED_CPU=0 gives vLLM 0.23's worker the core it kept for its scheduler
    (tests/stack091/test_vllm_cpu_binding_091.py); the row is shared by both stacks, and on the reference it must
    change nothing: vLLM 0.11 keeps no core for a TP-1 worker, which runs inside a trainer rank."""
    require_vllm()
    rl = {e.name: e.value for e in CPU.env("rl", stacks.REFERENCE, environ={})}
    env = {**kit_env(), "VLLM_CPU_NUM_OF_RESERVED_CPU": rl["VLLM_CPU_NUM_OF_RESERVED_CPU"]}
    proc = subprocess.run(
        [sys.executable, "-c", _AUTOBIND_011], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lists = json.loads(proc.stdout.strip().splitlines()[-1])
    assert lists["given"] == lists["default"] and lists["given"], lists


def test_the_batch_limits_are_vllms_own_for_a_cpu_api_server() -> None:
    """The cpu platform hands verl vLLM 0.11's own CPU limits, not verl's GPU-sized 8192 tokens and 1024 sequences:
    vLLM's CPU worker warms up on a batch of max_num_seqs tokens before it serves (scripts/bench_vllm_cpu.py)."""
    require_vllm()
    from vllm_cpu_defaults import vllm_api_server_limits

    assert vllm_api_server_limits(tiny_model_dir()) == VLLM_CPU_BATCH_LIMITS
    for stack in stacks.STACKS.values():
        cpu = CPU.verl_overrides("rl", stack)
        for key, value in VLLM_CPU_BATCH_LIMITS.items():
            assert f"actor_rollout_ref.rollout.{key}={value}" in cpu, cpu
    for platform, stack in itertools.product((NPU, CUDA), stacks.STACKS.values()):  # the recipes' own there
        assert not [o for o in platform.verl_overrides("rl", stack) if "max_num_" in o]
