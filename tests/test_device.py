"""Tests for npu_kernels.device and npu_kernels.env_presets.

No NPU exists here, so NPU behaviour is exercised with a stub ``torch_npu`` written to tmp_path and imported in a
fresh interpreter (the real package registers ``torch.npu`` once per process, so in-process stubs would leak).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # importlib mode does not put the rootdir on sys.path
    sys.path.insert(0, str(REPO_ROOT))

from npu_kernels import device  # noqa: E402
from npu_kernels.env_presets import HARDWARE, PHASES, EnvVar, known_bad_combinations, preset, render_shell  # noqa: E402

# Variables that would change detection if the developer's shell happened to set them.
_DETECTION_VARS = ("KIT_DEVICE", "ASCEND_RT_VISIBLE_DEVICES")


def _env(*extra_paths: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a fresh interpreter: no torch_npu autoload, the kit (and stubs) importable."""
    env = {k: v for k, v in os.environ.items() if k not in _DETECTION_VARS}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in extra_paths), str(REPO_ROOT)])
    env.update(extra)
    return env


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_kernels.device", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def _write_stub(root: Path, *, devices: int = 16, register: bool = True, raises: str | None = None) -> Path:
    """A fake ``torch_npu``: ``torch_npu.npu.is_available/device_count/get_device_name``; like the real package it
    renames the PrivateUse1 backend and registers ``torch.npu`` on import, unless ``register`` is False. ``raises``
    makes the import fail the way torch_npu without CANN does (OSError / RuntimeError from the C extension)."""
    pkg = root / "torch_npu"
    (pkg / "npu").mkdir(parents=True)
    if raises:
        (pkg / "__init__.py").write_text(f"raise {raises}('libascendcl.so: cannot open shared object file')\n")
        return root
    (pkg / "npu" / "__init__.py").write_text(
        textwrap.dedent(
            f"""
            def device_count():
                return {devices}

            def is_available():
                return device_count() > 0

            def get_device_name(index=0):
                return "Ascend910_9391"
            """
        )
    )
    registration = (
        "torch.utils.rename_privateuse1_backend('npu')\ntorch._register_device_module('npu', npu)\n" if register else ""
    )
    (pkg / "__init__.py").write_text(f"import torch\n__version__ = '2.7.1.stub'\nfrom . import npu\n{registration}")
    return root


@pytest.fixture
def no_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import torch_npu`` fail with ImportError in this process, whatever is installed."""
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    for var in _DETECTION_VARS:
        monkeypatch.delenv(var, raising=False)


def _expected_auto_platform() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# --- detection ---------------------------------------------------------------------------------------------------


def test_detect_without_torch_npu(no_torch_npu: None) -> None:
    assert device.detect().name == _expected_auto_platform()
    assert not device.NPU.is_available()
    assert device.import_torch_npu()[0] is None


def test_kit_device_override(no_torch_npu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_DEVICE", " CPU ")
    assert device.detect() is device.CPU
    monkeypatch.setenv("KIT_DEVICE", "npu")
    with pytest.warns(RuntimeWarning, match="not available"):
        assert device.detect() is device.NPU


def test_kit_device_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"npu, cuda, cpu") as info:
        device.detect()
    assert "tpu" in str(info.value)
    proc = _cli(env=_env(KIT_DEVICE="tpu"))
    assert proc.returncode == 2
    assert "npu, cuda, cpu" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("register", [True, False], ids=["torch.npu", "torch_npu.npu"])
def test_stub_torch_npu_16_devices(tmp_path: Path, register: bool) -> None:
    stub = _write_stub(tmp_path, devices=16, register=register)
    proc = _py(
        """
        import json, torch
        from npu_kernels import device
        p = device.detect()
        print(json.dumps({"name": p.name, "count": p.device_count(), "hw": device.guess_hardware(p),
                          "torch_npu_attr": hasattr(torch, "npu"), "module": p.torch_module().__name__}))
        """,
        _env(stub),
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["name"] == "npu"
    assert got["count"] == 16
    assert got["hw"] == "a3"
    assert got["torch_npu_attr"] is register  # detection must not need torch.npu to be registered
    assert got["module"] == "torch_npu.npu"


def test_stub_cli_reports_npu(tmp_path: Path) -> None:
    proc = _cli("--json", env=_env(_write_stub(tmp_path, devices=16)))
    assert proc.returncode == 0, proc.stderr
    props = json.loads(proc.stdout)
    assert props["platform"] == "npu" and props["device_count"] == 16
    assert props["dist_backend"] == "hccl" and props["ray_resource"] == "NPU"
    assert props["torch_npu"].startswith("ok 2.7.1.stub")


def test_stub_torch_npu_zero_devices_is_not_npu(tmp_path: Path) -> None:
    proc = _py(
        "from npu_kernels import device; print(device.detect().name, device.NPU.is_available())",
        _env(_write_stub(tmp_path, devices=0)),
    )
    assert proc.returncode == 0, proc.stderr
    name, available = proc.stdout.split()
    assert name != "npu" and available == "False"


@pytest.mark.parametrize("exc", ["OSError", "RuntimeError", "ImportError"])
def test_broken_torch_npu_does_not_crash(tmp_path: Path, exc: str) -> None:
    proc = _cli(env=_env(_write_stub(tmp_path, raises=exc)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"platform: {_expected_auto_platform()}"
    assert f"torch_npu: import failed: {exc}" in proc.stdout


# --- device counting ---------------------------------------------------------------------------------------------


def _fake_dev(root: Path) -> Path:
    root.mkdir()
    for name in [*(f"davinci{i}" for i in range(16)), "davinci_manager", "devmm_svm", "hisi_hdc"]:
        (root / name).touch()
    return root


def test_count_davinci_a3_not_undercounted(tmp_path: Path, no_torch_npu: None) -> None:
    dev = _fake_dev(tmp_path / "dev")
    ray_style = len(glob.glob(str(dev / "davinci?")))  # Ray's fallback
    assert ray_style == 10
    assert device.count_davinci(dev) == 16
    assert device.NPU.device_count(dev_root=dev) == 16 > ray_style
    assert device.guess_hardware(device.NPU, dev) == "a3"
    assert device.count_davinci(tmp_path / "missing") == 0


def test_visible_devices_mask_wins(tmp_path: Path, no_torch_npu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _fake_dev(tmp_path / "dev")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    assert device.NPU.device_count(dev_root=dev) == 4
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")
    assert device.NPU.device_count(dev_root=dev) == 0


def test_cpu_count() -> None:
    assert device.CPU.device_count() == (os.cpu_count() or 1)
    assert device.CPU.is_available()


# --- platform data and overrides ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (device.NPU, ("npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES", "NPU", "flash_attention_2", False)),
        (device.CUDA, ("cuda", "nccl", "CUDA_VISIBLE_DEVICES", "GPU", "flash_attention_2", True)),
        (device.CPU, ("cpu", "gloo", None, "CPU", "sdpa", False)),
    ],
)
def test_platform_properties(platform: device.Platform, expected: tuple) -> None:
    got = (
        platform.verl_device,
        platform.dist_backend,
        platform.visible_devices_env,
        platform.ray_resource,
        platform.attn_implementation,
        platform.use_torch_compile,
    )
    assert got == expected
    assert device.PLATFORMS[platform.name] is platform
    with pytest.raises(FrozenInstanceError):
        platform.name = "other"  # type: ignore[misc]


def test_cpu_torch_module() -> None:
    import torch

    assert device.CPU.torch_module() is torch.cpu


def test_rl_overrides_cpu() -> None:
    overrides = device.CPU.verl_overrides("rl")
    assert overrides[0] == "trainer.device=cpu"
    for expected in (
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "ray_kwargs.ray_init.num_cpus=4",
    ):
        assert expected in overrides
    assert len({o.split("=", 1)[0] for o in overrides}) == len(overrides), "duplicate Hydra keys"


def test_sft_overrides_cpu_use_sft_keys() -> None:
    overrides = device.CPU.verl_overrides("sft")
    assert overrides == ["trainer.device=cpu", "model.strategy=fsdp2", "model.attn_implementation=sdpa"]
    assert not any(o.startswith("actor_rollout_ref") for o in overrides)


def test_npu_overrides() -> None:
    rl = device.NPU.verl_overrides("rl")
    assert "trainer.device=npu" in rl and "actor_rollout_ref.actor.use_torch_compile=False" in rl
    assert not any("sdpa" in o or "num_cpus" in o or "strategy" in o for o in rl)
    assert device.NPU.verl_overrides("sft") == ["trainer.device=npu"]
    with pytest.raises(ValueError, match="sft, rl"):
        device.NPU.verl_overrides("ppo")


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_overrides_cli(phase: str, hw: str) -> None:
    proc = _cli("overrides", "--phase", phase, "--hw", hw)
    assert proc.returncode == 0, proc.stderr
    platform = device.PLATFORMS[device.PROFILES[hw].platform]
    assert proc.stdout.splitlines() == platform.verl_overrides(phase)


def test_hardware_profiles() -> None:
    profiles = device.PROFILES
    assert set(profiles) == set(HARDWARE)
    assert (profiles["a2"].platform, profiles["a2"].devices_per_node, profiles["a2"].memory_gb_per_device) == (
        "npu",
        8,
        64,
    )
    assert (profiles["a3"].platform, profiles["a3"].devices_per_node, profiles["a3"].memory_gb_per_device) == (
        "npu",
        16,
        64,
    )
    assert (profiles["cuda"].devices_per_node, profiles["cuda"].memory_gb_per_device) == (8, 80)
    assert profiles["cpu"].platform == "cpu"


# --- environment presets -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_preset_entries_well_formed(phase: str, hw: str) -> None:
    entries = preset(phase, hw)
    assert entries
    names = [e.name for e in entries]
    assert len(set(names)) == len(names), f"duplicate variables in {phase}/{hw}"
    for entry in entries:
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", entry.name)
        assert entry.reason.strip() and "\n" not in entry.reason, entry.name


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_preset_has_no_known_bad_combination(phase: str, hw: str) -> None:
    env = {e.name: e.value for e in preset(phase, hw) if e.value is not None}
    assert known_bad_combinations(env, phase=phase, hw=hw) == []


def test_rl_a3_preset() -> None:
    entries = {e.name: e.value for e in preset("rl", "a3")}
    assert entries["VLLM_ASCEND_ENABLE_NZ"] == "0"
    assert entries["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert entries["HCCL_HOST_SOCKET_PORT_RANGE"] == entries["HCCL_NPU_SOCKET_PORT_RANGE"] == "auto"
    assert entries["PYTORCH_NPU_ALLOC_CONF"] is None  # must be unset, not merely absent
    text = render_shell(preset("rl", "a3"))
    assert not [line for line in text.splitlines() if line.startswith("export") and "expandable_segments" in line]
    assert "unset PYTORCH_NPU_ALLOC_CONF" in text
    # SFT has no vLLM, so there the allocator setting is wanted: the rule is phase-specific, not a blanket ban.
    assert {e.name: e.value for e in preset("sft", "a3")}["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"


def test_preset_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="a2, a3, cuda, cpu"):
        preset("rl", "a4")
    with pytest.raises(ValueError, match="sft, rl"):
        preset("train", "a2")


def test_known_bad_combinations() -> None:
    good = {e.name: e.value for e in preset("rl", "a3") if e.value is not None}
    assert known_bad_combinations({**good, "VLLM_ASCEND_ENABLE_NZ": "1"}, "rl", "a3")[0].startswith(
        "VLLM_ASCEND_ENABLE_NZ"
    )
    assert any("unset" in p for p in known_bad_combinations({k: v for k, v in good.items() if "NZ" not in k}, "rl"))
    bad_alloc = {**good, "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256,expandable_segments:True"}
    assert len(known_bad_combinations(bad_alloc, "rl", "a3")) == 1
    assert known_bad_combinations({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}, "sft", "a3") == []
    graph = {**good, "TASK_QUEUE_ENABLE": "2", "VLLM_ENABLE_GRAPH_MODE": "1"}
    assert any("graph mode" in p for p in known_bad_combinations(graph, "rl", "a2"))
    assert known_bad_combinations({**good, "TASK_QUEUE_ENABLE": "1", "VLLM_ENABLE_GRAPH_MODE": "1"}, "rl", "a2") == []
    assert known_bad_combinations({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, "sft", "a2")
    assert known_bad_combinations({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, "sft", "cpu") == []
    assert known_bad_combinations({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "rl", "cuda")


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_env_cli_sources_in_bash(tmp_path: Path, phase: str, hw: str) -> None:
    proc = _cli("env", "--phase", phase, "--hw", hw)
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "env.sh"
    script.write_text(proc.stdout)
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr

    entries = preset(phase, hw)
    env = _env()
    for entry in entries:  # leftovers from the user's shell: unset entries must really go away
        env[entry.name] = "stale" if entry.value is None else "wrong"
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    cmd = f"{sys.executable} -m npu_kernels.device env --phase {phase} --hw {hw}"
    sourced = _bash(f"set -e; source <({cmd}); {dump}", env)
    assert sourced.returncode == 0, sourced.stderr
    got = json.loads(sourced.stdout)
    for entry in entries:
        assert got.get(entry.name) == entry.value, entry.name
    evaluated = _bash(f'set -e; eval "$({cmd})"; {dump}', env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert {e.name: json.loads(evaluated.stdout).get(e.name) for e in entries} == {e.name: e.value for e in entries}


def test_render_shell_quotes_awkward_values(tmp_path: Path) -> None:
    value = "a b'c $HOME; echo pwned # x"
    script = render_shell([EnvVar("KIT_TEST_VALUE", value, "reason with 'quotes' and $vars")], header="hdr")
    path = tmp_path / "x.sh"
    path.write_text(script)
    proc = _bash(f'source {path}; printf "%s" "$KIT_TEST_VALUE"', _env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == value


# --- CLI ---------------------------------------------------------------------------------------------------------


def test_cli_default_on_this_machine() -> None:
    proc = _cli()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"platform: {_expected_auto_platform()}"
    props = dict(line.split(": ", 1) for line in lines)
    assert props["source"] == "auto"
    assert {"verl_device", "dist_backend", "ray_resource", "attn_implementation", "device_count"} <= set(props)
    detect = _cli("detect", "--json")
    assert detect.returncode == 0, detect.stderr
    assert json.loads(detect.stdout)["platform"] == _expected_auto_platform()


def test_cli_forced_platform_warns(tmp_path: Path) -> None:
    proc = _cli(env=_env(_write_stub(tmp_path, devices=0), KIT_DEVICE="npu"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "platform: npu"
    assert "source: KIT_DEVICE" in proc.stdout and "available: False" in proc.stdout
    assert "KIT_DEVICE=npu" in proc.stderr  # the warning is visible


@pytest.mark.parametrize("args", [[], ["detect"], ["env"], ["overrides"]], ids=["main", "detect", "env", "overrides"])
def test_cli_help(args: list[str]) -> None:
    proc = _cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:")


def test_cli_rejects_bad_phase() -> None:
    proc = _cli("env", "--phase", "ppo", "--hw", "a2")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
