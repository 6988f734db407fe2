"""Tests for platforms: platforms, hardware profiles, their environments and the CLI.

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
from pathlib import Path

import pytest

from platforms.stacks import REFERENCE

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # importlib mode does not put the rootdir on sys.path
    sys.path.insert(0, str(REPO_ROOT))

import platforms as plat  # noqa: E402
from platforms import PHASES, PROFILE_NAMES, EnvVar, profiles, render_shell  # noqa: E402
from platforms.cpu import CPU_RAY_NUM_CPUS  # noqa: E402

HARDWARE = PROFILE_NAMES
#: Modules of platforms/ that are not the platform layer itself: held to the rule like the rest of the kit.
OUTSIDE_THE_LAYER = ("pins.py", "cli_errors.py", "ascend_probe.py")


def preset(phase: str, hw: str) -> list[EnvVar]:
    return plat.get_profile(hw).env(phase, REFERENCE)


def known_bad_combinations(env: dict[str, str], phase: str, hw: str) -> list[str]:
    return plat.get_profile(hw).env_problems(env, phase)


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
        [sys.executable, "-m", "platforms", *args],
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
    assert plat.detect().name == _expected_auto_platform()
    assert not plat.NPU.is_available()
    assert plat.import_torch_npu()[0] is None


def test_detect_on_a_host_without_torch(no_torch_npu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 33: retool-doctor, scripts/sft_to_rl.sh and ray_cluster.sh run on a host's python, which may have no
    torch; CUDA's probe raised ModuleNotFoundError there, so every default --hw was a traceback."""
    monkeypatch.setitem(sys.modules, "torch", None)  # ``import torch`` raises ModuleNotFoundError(name="torch")
    assert not plat.CUDA.is_available()
    assert plat.detect() is plat.CPU and plat.default_hardware({}) == "cpu"


def test_kit_device_override(
    no_torch_npu: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KIT_DEVICE", " CPU ")
    assert plat.detect() is plat.CPU
    monkeypatch.setenv("KIT_DEVICE", "npu")
    profiles.warn_once.cache_clear()
    assert plat.detect() is plat.NPU
    # issue 44: one kit line, not Python's RuntimeWarning with its file, line number and source line
    assert capsys.readouterr().err == (
        "kit: warning: KIT_DEVICE=npu forces a platform that is not available here; commands will be generated for "
        "it, but running them on this machine will fail\n"
    )


def test_kit_device_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"npu, cuda, cpu") as info:
        plat.detect()
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
        import platforms as plat
        p = plat.detect()
        print(json.dumps({"name": p.name, "count": p.device_count(), "hw": plat.profile_of(p),
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
        "import platforms as plat; print(plat.detect().name, plat.NPU.is_available())",
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
    assert plat.count_davinci(dev) == 16
    assert plat.NPU.device_count(dev_root=dev) == 16 > ray_style
    assert plat.profile_of(plat.NPU, dev) == "a3"
    assert plat.count_davinci(tmp_path / "missing") == 0


def test_visible_devices_mask_wins(tmp_path: Path, no_torch_npu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _fake_dev(tmp_path / "dev")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    assert plat.NPU.device_count(dev_root=dev) == 4
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")
    assert plat.NPU.device_count(dev_root=dev) == 0


def test_cpu_count() -> None:
    assert plat.CPU.device_count() == (os.cpu_count() or 1)
    assert plat.CPU.is_available()


# --- platform data and overrides ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (plat.NPU, ("npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES", "NPU", "flash_attention_2", False)),
        (plat.CUDA, ("cuda", "nccl", "CUDA_VISIBLE_DEVICES", "GPU", "flash_attention_2", True)),
        (plat.CPU, ("cpu", "gloo", None, "CPU", "kit_packed_sdpa", False)),
    ],
)
def test_platform_properties(platform: plat.Platform, expected: tuple) -> None:
    got = (
        platform.verl_device,
        platform.dist_backend,
        platform.visible_devices_env,
        platform.ray_resource,
        platform.attn_implementation,
        platform.use_torch_compile,
    )
    assert got == expected
    assert plat.PLATFORMS[platform.name] is platform
    with pytest.raises(TypeError, match="abstract"):
        plat.Platform()  # type: ignore[abstract]


def test_cpu_torch_module() -> None:
    import torch

    assert plat.CPU.torch_module() is torch.cpu


def test_rl_overrides_cpu() -> None:
    overrides = plat.CPU.verl_overrides("rl", REFERENCE)
    assert overrides[0] == "trainer.device=cpu"
    for expected in (
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "+actor_rollout_ref.model.override_config.attn_implementation=kit_packed_sdpa",
        "actor_rollout_ref.actor.use_torch_compile=False",
        f"ray_kwargs.ray_init.num_cpus={CPU_RAY_NUM_CPUS}",
    ):
        assert expected in overrides
    assert len({o.split("=", 1)[0] for o in overrides}) == len(overrides), "duplicate Hydra keys"


def test_rl_overrides_cpu_on_the_current_stack_bound_its_memory() -> None:
    """verl 0.9.1's CPU run: one TransferQueue unit, one rank, one reward worker (its default 8 took 5.4 GB of a 24 GB
    machine: platforms/verl_selectors.py); the reference's run has none of those keys."""
    from platforms.stacks import STACKS

    current = plat.CPU.verl_overrides("rl", STACKS["0.9.1"])
    for expected in (
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "trainer.n_gpus_per_node=1",
        "reward.num_workers=1",
    ):
        assert expected in current, current
    assert not any(o.startswith(("reward.", "transfer_queue.")) for o in plat.CPU.verl_overrides("rl", REFERENCE))
    assert len({o.split("=", 1)[0] for o in current}) == len(current), "duplicate Hydra keys"


def test_rl_threads_fill_the_cores_of_the_current_stacks_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: on 0.9.1 one trainer rank trains RL on CPU, so each RL process gets the machine's cores (with one
    thread its update took 85 s of a 128 s step on 2 cores); the reference's two ranks keep one each, and SFT (two
    torchrun ranks on both stacks) too."""
    from platforms.stacks import STACKS

    def threads(phase: str, stack: str) -> str:
        (entry,) = [e for e in plat.CPU.env(phase, STACKS[stack], environ={}) if e.name == "OMP_NUM_THREADS"]
        return entry.value

    for cores in (2, 16):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)))
        assert threads("rl", "0.9.1") == str(cores)
        assert (threads("rl", "0.6.1"), threads("sft", "0.9.1"), threads("sft", "0.6.1")) == ("1", "1", "1")


def test_sft_overrides_cpu_use_sft_keys() -> None:
    overrides = plat.CPU.verl_overrides("sft", REFERENCE)
    assert overrides == [
        "trainer.device=cpu",
        "model.strategy=fsdp2",
        "model.attn_implementation=kit_packed_sdpa",
        "model.fsdp_config.mixed_precision.param_dtype=fp32",
        "model.fsdp_config.mixed_precision.reduce_dtype=fp32",
        "model.fsdp_config.mixed_precision.buffer_dtype=fp32",
    ]
    assert not any(o.startswith("actor_rollout_ref") for o in overrides)


def test_cpu_computes_in_fp32_accelerators_in_bf16() -> None:
    assert plat.CPU.compute_dtype == "fp32"
    assert plat.NPU.compute_dtype == plat.CUDA.compute_dtype == plat.VERL_DEFAULT_DTYPE == "bf16"
    rl = plat.CPU.dtype_overrides("rl", REFERENCE)
    for role in ("actor", "ref"):
        assert f"actor_rollout_ref.{role}.fsdp_config.dtype=float32" in rl
        for field in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            assert f"++actor_rollout_ref.{role}.fsdp_config.mixed_precision.{field}=fp32" in rl
    assert "actor_rollout_ref.rollout.dtype=float32" in rl
    # accelerators keep verl's bf16 defaults: no dtype override at all
    for platform in (plat.NPU, plat.CUDA):
        for phase in PHASES:
            assert platform.dtype_overrides(phase, REFERENCE) == []
            assert not any("dtype" in o for o in platform.verl_overrides(phase, REFERENCE))


def test_npu_overrides() -> None:
    rl = plat.NPU.verl_overrides("rl", REFERENCE)
    assert "trainer.device=npu" in rl and "actor_rollout_ref.actor.use_torch_compile=False" in rl
    assert not any("sdpa" in o or "num_cpus" in o or "strategy" in o for o in rl)
    assert plat.NPU.verl_overrides("sft", REFERENCE) == ["trainer.device=npu"]
    with pytest.raises(ValueError, match="sft, rl"):
        plat.NPU.verl_overrides("ppo", REFERENCE)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_overrides_cli(phase: str, hw: str) -> None:
    proc = _cli("overrides", "--phase", phase, "--hw", hw)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == plat.PROFILES[hw].platform.verl_overrides(phase, REFERENCE)


def test_hardware_profiles() -> None:
    profiles = plat.PROFILES
    assert set(profiles) == set(HARDWARE)
    assert (profiles["a2"].platform.name, profiles["a2"].devices_per_node, profiles["a2"].memory_gb_per_device) == (
        "npu",
        8,
        64,
    )
    assert (profiles["a3"].platform.name, profiles["a3"].devices_per_node, profiles["a3"].memory_gb_per_device) == (
        "npu",
        16,
        64,
    )
    assert (profiles["cuda"].devices_per_node, profiles["cuda"].memory_gb_per_device) == (8, 80)
    assert profiles["cpu"].platform is plat.CPU and profiles["a2"].platform is profiles["a3"].platform is plat.NPU


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
    with pytest.raises(ValueError, match="a2, a3, cuda, h200, cpu"):
        preset("rl", "a4")
    with pytest.raises(ValueError, match="sft, rl"):
        preset("train", "a2")
    with pytest.raises(ValueError, match="sft, rl"):
        plat.NPU.env_problems({}, "train")


def test_known_bad_combinations() -> None:
    good = {e.name: e.value for e in preset("rl", "a3") if e.value is not None}
    assert known_bad_combinations({**good, "VLLM_ASCEND_ENABLE_NZ": "1"}, "rl", "a3")[0].startswith(
        "VLLM_ASCEND_ENABLE_NZ"
    )
    assert any(
        "unset" in p for p in known_bad_combinations({k: v for k, v in good.items() if "NZ" not in k}, "rl", "a3")
    )
    bad_alloc = {**good, "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256,expandable_segments:True"}
    assert len(known_bad_combinations(bad_alloc, "rl", "a3")) == 1
    assert known_bad_combinations({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}, "sft", "a3") == []
    graph = {**good, "TASK_QUEUE_ENABLE": "2", "VLLM_ENABLE_GRAPH_MODE": "1"}
    assert any("graph mode" in p for p in known_bad_combinations(graph, "rl", "a2"))
    assert known_bad_combinations({**good, "TASK_QUEUE_ENABLE": "1", "VLLM_ENABLE_GRAPH_MODE": "1"}, "rl", "a2") == []
    # verl's A2 ReTool doc's environment (ascend_retool_best_pratice.rst:122-129) is a valid pair, not a fault; the
    # kit declines its graph mode, MLP optimize and jemalloc (platforms/npu.py) and says why.
    doc_a2 = {"TASK_QUEUE_ENABLE": "1", "VLLM_ENABLE_GRAPH_MODE": "1", "HCCL_OP_EXPANSION_MODE": "AIV"}
    doc_a2 |= {"VLLM_ASCEND_ENABLE_MLP_OPTIMIZE": "1", "LD_PRELOAD": "/usr/local/lib/libjemalloc.so.2"}
    assert known_bad_combinations({**good, **doc_a2}, "rl", "a2") == []
    kit = {e.name: e for e in preset("rl", "a2")}
    aiv, mlp = kit["HCCL_OP_EXPANSION_MODE"], kit["VLLM_ASCEND_ENABLE_MLP_OPTIMIZE"]
    assert aiv.value == "AIV" and "ascend_retool_best_pratice" in aiv.reason
    assert mlp.value is None and "linear_op.py" in mlp.reason
    assert kit["TASK_QUEUE_ENABLE"].value == "2" and "enforce_eager=False" in kit["TASK_QUEUE_ENABLE"].reason
    from platforms import npu

    assert "LD_PRELOAD" not in kit and "jemalloc" in (npu.__doc__ or "")
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

    env = _env()
    for entry in preset(phase, hw):  # leftovers from the user's shell: unset entries must really go away
        env[entry.name] = "stale" if entry.value is None else "wrong"
    # what the kit recommends for that shell (an existing LD_PRELOAD is kept after the CPU allocator, say)
    entries = plat.get_profile(hw).env(phase, REFERENCE, env)
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    cmd = f"{sys.executable} -m platforms env --phase {phase} --hw {hw}"
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


def test_default_hardware(no_torch_npu: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KIT_HW", raising=False)
    assert plat.default_hardware(platform=plat.CPU) == "cpu"
    # a dry run on a machine without NPU or GPU plans the reference run
    assert plat.default_hardware(platform=plat.CPU, planning=True) == plat.REFERENCE_PROFILE == "a3"
    assert plat.default_hardware(platform=plat.CUDA) == plat.default_hardware(platform=plat.CUDA, planning=True)
    assert plat.default_hardware(platform=plat.CUDA) == "cuda"
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(8):
        (dev / f"davinci{i}").touch()
    assert plat.default_hardware(platform=plat.NPU, dev_root=dev, planning=True) == "a2"
    monkeypatch.setenv("KIT_HW", "a2")
    assert plat.default_hardware(platform=plat.CPU, planning=True) == "a2"
    monkeypatch.setenv("KIT_HW", "a9")
    with pytest.raises(ValueError, match="a2, a3, cuda, h200, cpu"):
        plat.default_hardware(platform=plat.CPU)


def test_default_hardware_cli(tmp_path: Path) -> None:
    assert _cli("default-hardware").stdout.strip() == _expected_auto_platform()
    assert _cli("default-hardware", env=_env(KIT_HW="a2")).stdout.strip() == "a2"
    stub = _cli("default-hardware", env=_env(_write_stub(tmp_path, devices=16)))
    assert stub.stdout.strip() == "a3", stub.stderr  # the stub's SoC is an Ascend910_93 (A3)
    bad = _cli("default-hardware", env=_env(KIT_HW="a9"))
    assert bad.returncode == 2 and "a9" in bad.stderr and "Traceback" not in bad.stderr


# --- facts shell scripts ask for -----------------------------------------------------------------------------------


def _fake_ascend(root: Path, *scripts: str) -> Path:
    for script in scripts:
        path = root / script
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("export KIT_TEST_SOURCED=${KIT_TEST_SOURCED:-}:" + script + "\n")
    return root


def test_setup_scripts(tmp_path: Path) -> None:
    root = _fake_ascend(tmp_path / "Ascend", "ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh")
    proc = _cli("setup-scripts", env=_env(KIT_ASCEND_ROOT=str(root)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(root / "ascend-toolkit/set_env.sh"), str(root / "nnal/atb/set_env.sh")]
    # nothing installed: nothing to source, not an error unless required for an NPU profile
    empty = _env(KIT_ASCEND_ROOT=str(tmp_path / "none"))
    assert _cli("setup-scripts", env=empty).stdout == ""
    assert _cli("setup-scripts", "--hw", "cuda", "--required", env=empty).returncode == 0
    required = _cli("setup-scripts", "--hw", "a3", "--required", env=empty)
    assert required.returncode == 1
    assert "ascend-toolkit/set_env.sh not found" in required.stderr and "KIT_ASCEND_ROOT" in required.stderr


def test_shell_helper_sources_the_setup_scripts(tmp_path: Path) -> None:
    """scripts/lib/platform_env.sh: the one place shell entry points source CANN/ATB, with `set -u` restored."""
    root = _fake_ascend(tmp_path / "Ascend", "ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh")
    script = (
        f"set -euo pipefail; KIT_ROOT={REPO_ROOT}; source {REPO_ROOT}/scripts/lib/kit_python.sh; "
        f"source {REPO_ROOT}/scripts/lib/platform_env.sh; kit_source_setup_scripts; "
        'echo "$KIT_TEST_SOURCED"; [[ $- == *u* ]] && echo "nounset kept"'
    )
    proc = _bash(script, _env(KIT_ASCEND_ROOT=str(root), KIT_PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [":ascend-toolkit/set_env.sh:nnal/atb/set_env.sh", "nounset kept"]
    missing = f"set -euo pipefail; KIT_ROOT={REPO_ROOT}; source {REPO_ROOT}/scripts/lib/kit_python.sh; "
    missing += f"source {REPO_ROOT}/scripts/lib/platform_env.sh; kit_source_setup_scripts --hw a2 --required; echo no"
    proc = _bash(missing, _env(KIT_ASCEND_ROOT=str(tmp_path / "none"), KIT_PYTHON=sys.executable))
    assert proc.returncode != 0 and "no" not in proc.stdout.split()
    assert "set_env.sh not found" in proc.stderr


def test_facts() -> None:
    proc = _cli("facts", "--hw", "a3", "--json")
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["platform"] == "npu" and facts["devices_per_node"] == 16 and facts["ray_resource"] == "NPU"
    assert facts["dockerfile"] == "docker/Dockerfile.npu"

    assert facts["base_image"] == f"{REFERENCE.pin('VLLM_ASCEND_IMAGE')}:{REFERENCE.pin('VLLM_ASCEND_TAG_A3')}"
    assert facts["image"] == f"retool-npu-kit:{REFERENCE.pin('VLLM_ASCEND_TAG_A3')}"
    assert facts["socket_ifname_vars"].split() == ["HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"]
    cuda = json.loads(_cli("facts", "--hw", "cuda", "--json").stdout)
    assert cuda["image"] == f"retool-npu-kit:cuda-{REFERENCE.pin('VLLM_CUDA_TAG')}"
    assert "NCCL_SOCKET_IFNAME" in cuda["socket_ifname_vars"]
    cpu = json.loads(_cli("facts", "--hw", "cpu", "--json").stdout)
    assert cpu["devices_per_node"] is None and cpu["dockerfile"] == "docker/Dockerfile.cpu"
    assert cpu["image"] == f"retool-npu-kit:cpu-{REFERENCE.pin('CPU_BASE_TAG')}"
    assert cpu["base_image"] == f"{REFERENCE.pin('CPU_BASE_IMAGE')}:{REFERENCE.pin('CPU_BASE_TAG')}"


def test_ray_start_args_and_kernel_backends() -> None:
    assert plat.NPU.ray_start_args(16) == ['--resources={"NPU":16}']
    assert plat.CUDA.ray_start_args(8) == ["--num-gpus=8"]
    assert plat.CPU.ray_start_args(0) == [f"--num-cpus={CPU_RAY_NUM_CPUS}"]
    assert plat.NPU.kernel_backends[0] == "npu" and plat.CUDA.kernel_backends[0] == "liger"
    assert all(p.kernel_backends[-1] == "reference" for p in plat.PLATFORMS.values())


def test_cpu_allocator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tcmalloc is preloaded in the CPU runs when installed; KIT_CPU_TCMALLOC=0 or its absence keeps glibc."""
    lib = tmp_path / "libtcmalloc_minimal.so.4"
    lib.write_bytes(b"")
    monkeypatch.setattr("platforms.cpu.TCMALLOC_CANDIDATES", (str(tmp_path / "missing.so"), str(lib)))

    def preload(environ: dict[str, str]) -> str | None:
        return {e.name: e.value for e in plat.CPU.env("sft", REFERENCE, environ)}.get("LD_PRELOAD")

    assert preload({}) == str(lib)
    assert preload({"LD_PRELOAD": "/opt/other.so"}) == f"{lib}:/opt/other.so"  # kept, after tcmalloc
    assert preload({"LD_PRELOAD": str(lib)}) == str(lib)  # not twice
    assert preload({"KIT_CPU_TCMALLOC": "0"}) is None
    monkeypatch.setattr("platforms.cpu.TCMALLOC_CANDIDATES", (str(tmp_path / "missing.so"),))
    assert preload({}) is None
    # accelerators never get it
    assert all(e.name != "LD_PRELOAD" for hw in ("a2", "a3", "cuda") for e in preset("sft", hw))


def test_nothing_outside_the_package_branches_on_platform_or_profile_names() -> None:
    """The issue's rule, checked on the source: no comparison against a platform or profile name outside it."""
    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](npu|cuda|cpu|a2|a3)["']|["'](npu|cuda|a2|a3)["']\s*(==|!=)""")
    offenders = []
    for path in [
        *REPO_ROOT.glob("platforms/**/*.py"),
        *REPO_ROOT.glob("npu_kernels/**/*.py"),
        *REPO_ROOT.glob("recipes/**/*.py"),
        *REPO_ROOT.glob("sandbox/**/*.py"),
    ]:
        if path.parent == REPO_ROOT / "platforms" and path.name not in OUTSIDE_THE_LAYER:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
