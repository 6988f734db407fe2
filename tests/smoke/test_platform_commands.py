"""The smoke on an accelerator host, proved on a CPU: the commands and environments it composes for npu (a2, a3) and
cuda, as the kit's launcher would accept them (nothing runs; the stub torch_npu stands in for an NPU image)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env, tiny_model_dir

from platforms import PROFILES, stacks
from platforms.stacks import REFERENCE
from recipes.smoke.commands import FAST, SCALE, SmokeCommands

STUBS = REPO_ROOT / "tests" / "kernels" / "stubs"
ACCELERATOR_PROFILES = [name for name, profile in PROFILES.items() if profile.devices_per_node]


def _smoke(tmp_path: Path, profile: str) -> SmokeCommands:
    return SmokeCommands(tmp_path / "run", FAST, PROFILES[profile], REFERENCE)


@pytest.mark.parametrize("name", ACCELERATOR_PROFILES)
def test_trainers_run_the_platforms_profile_at_smoke_scale_on_one_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # what the CPU venv's shells export
    profile = PROFILES[name]
    smoke = _smoke(tmp_path, name)
    for cmd, phase in ((smoke.sft_command(), "sft"), (smoke.rl_command("http://127.0.0.1:9"), "rl")):
        assert cmd.argv[:2] == ["bash", str(REPO_ROOT / f"recipes/run_{cmd.recipe}_npu.sh")]
        assert cmd.argv[2:6] == ["--hw", name, "--scale", SCALE], cmd.argv
        assert cmd.argv[-2:] == ["trainer.nnodes=1", "trainer.n_gpus_per_node=1"]
        assert not any(arg.startswith("trainer.device=") for arg in cmd.argv), "the launcher adds the platform's"
        # the platform's own environment, as the launcher applies it; the interpreter is this one (the image's)
        for var in profile.env(phase, REFERENCE, cmd.env):
            assert cmd.env.get(var.name) == var.value, (phase, var)
        assert profile.env_problems(cmd.env, phase) == [], phase
        assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in cmd.env, "verl 0.6.1 must see torch.npu: auto-load stays on"
        assert cmd.env["KIT_PYTHON"] == sys.executable
    helpers = [*smoke.data_commands(), smoke.merge_command(), smoke.eval_command(), smoke.plots_command()]
    assert all(cmd.env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0" for cmd in helpers), "helpers compute on the CPU"
    assert "--hw" in smoke.merge_command().argv and name in smoke.merge_command().argv


def test_cpu_trainers_keep_the_recipes_worker_count(tmp_path: Path) -> None:
    smoke = _smoke(tmp_path, "cpu")
    for cmd in (smoke.sft_command(), smoke.rl_command("http://127.0.0.1:9")):
        assert cmd.argv[2:6] == ["--hw", "cpu", "--scale", SCALE]
        assert not any(arg.startswith("trainer.n_gpus_per_node=") for arg in cmd.argv)
        assert cmd.env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"  # the cpu platform's own value, not the helpers'


def _launcher_plan(cmd, env: dict[str, str]):
    """The launcher's plan of a composed trainer command (what the run script would exec, minus the exec)."""
    from recipes.launch.cli import build_run_parser
    from recipes.launch.planning.plan import build
    from recipes.launch.run_inputs import catalog

    args = build_run_parser().parse_intermixed_args([cmd.recipe, *cmd.argv[2:]])
    stack = stacks.resolve(args.stack, env)  # as the launcher's entry point resolves it: --stack, else KIT_STACK
    recipe = catalog.get(args.recipe)
    return build(recipe, args.profile, stack, args.overrides, scale=args.scale, path_check=False, environ=env)


@pytest.mark.parametrize("name", ACCELERATOR_PROFILES)
def test_the_launcher_accepts_the_accelerator_smoke(tmp_path: Path, name: str) -> None:
    """Composed, validated and checked by verl and the kit's launcher rules with the tiny model, one device."""
    smoke = _smoke(tmp_path, name)
    for folder in (smoke.model_dir, smoke.merged):
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.symlink_to(tiny_model_dir(), target_is_directory=True)
    platform = PROFILES[name].platform
    for cmd in (smoke.sft_command(), smoke.rl_command("http://127.0.0.1:9")):
        plan = _launcher_plan(cmd, cmd.env)
        assert plan.errors == [], "\n".join(plan.errors)
        assert plan.scale == SCALE and plan.hw == name
        cfg = plan.cfg
        assert cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == 1
        assert cfg.trainer.device == platform.verl_device
        assert f"trainer.device={platform.verl_device}" in plan.argv
        if cmd.stage == "rl":
            assert cfg.actor_rollout_ref.rollout.name != "hf", "an accelerator rolls out with its engine, not hf"
            assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
            assert str(cfg.actor_rollout_ref.model.path) == str(smoke.merged)


@pytest.mark.parametrize(
    ("device", "profile", "marker"), [("npu", "a2", "VLLM_ASCEND_ENABLE_NZ=0"), ("cuda", "cuda", "NCCL_CUMEM_ENABLE=0")]
)
def test_dry_run_on_a_stub_accelerator_host(tmp_path: Path, device: str, profile: str, marker: str) -> None:
    """KIT_DEVICE forces the platform; the stub torch_npu reports an Ascend910B (an A2) for npu."""
    env = kit_env(KIT_DEVICE=device, PYTHONPATH=f"{STUBS}{os.pathsep}{REPO_ROOT}")
    env.pop("KIT_HW", None)
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.smoke", "run", "--dry-run", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert f"platform {device}, hardware profile {profile}, scale smoke, rollout vllm" in text
    assert f"python {sys.executable}" in text
    sections = text.split("\n== ")
    trainers = [s for s in sections if s.startswith(("sft", "rl"))]
    assert len(trainers) == 2
    for section in trainers:
        assert f"--hw {profile} --scale smoke" in section and "trainer.n_gpus_per_node=1" in section
        assert "env -u TORCH_DEVICE_BACKEND_AUTOLOAD" in section
        assert f"env KIT_PYTHON={sys.executable}" in section
    assert marker in trainers[1]
    assert not (tmp_path / "run").exists()


def test_trace_flag_reaches_the_launcher_and_names_the_store(tmp_path: Path) -> None:
    """--trace: verl's trace backend is set, and the launcher points mlflow at the store the RL stage checks."""
    from recipes.launch.supervision import trace
    from recipes.smoke.commands import TRACE_OVERRIDES

    smoke = SmokeCommands(tmp_path, FAST, PROFILES["cpu"], REFERENCE, trace=True)
    smoke.merged.parent.mkdir(parents=True, exist_ok=True)
    smoke.merged.symlink_to(tiny_model_dir(), target_is_directory=True)
    cmd = smoke.rl_command("http://127.0.0.1:9")
    assert set(TRACE_OVERRIDES) <= set(cmd.argv)
    plan = _launcher_plan(cmd, cmd.env)
    assert plan.errors == [], "\n".join(plan.errors)
    job_env = plan.cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert job_env[trace.URI_ENV] == smoke.trace_store.absolute().as_uri() == plan.env[trace.URI_ENV]
    untraced = SmokeCommands(tmp_path, FAST, PROFILES["cpu"], REFERENCE).rl_command("http://127.0.0.1:9")
    assert not set(TRACE_OVERRIDES) & set(untraced.argv)
