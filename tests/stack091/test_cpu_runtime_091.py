"""Issue 43: the kit's SFT recipe trains on verl 0.9.1 on a plain CPU, through the launcher, and hands off to RL.

``bash recipes/run_qwen3_4b_sft_npu.sh --stack 0.9.1 --hw cpu`` (verl 0.9.1's engine-based ``sft_trainer``) for two
steps on a tiny random Qwen3 with the kit's CPU platform for verl's registry (platforms/verl_platform.py) and the
0.9.1 series, then ``scripts/sft_to_rl.sh`` on its checkpoint. The RL recipe runs through the same launcher in the
main job (tests/stack091/test_main_job_091.py: ``scripts/smoke.sh --stack 0.9.1``), whose SFT and merge stages run
this file's SFT test too: that test is opt-in (``-m covered_e2e``), a quicker diagnosis.

Why one rank for RL on CPU (platforms/verl_selectors.py): each vLLM 0.23 CPU replica holds ~5 GB (server, engine
core, worker) next to its ~2 GB trainer rank; two of each ran out of memory in step 2 on a 24 GB machine (Ray's
monitor killed the job), one of each took ~1 GB of this process tree's own memory and 3.3 min for two GRPO steps
(measured here, 2 cores, 2026-11-28, with this file's former RL test).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, installed_verl, kit_env, needs_verl_09

from platforms import stacks

VERL = installed_verl()
pytestmark = [
    needs_verl_09(),
    pytest.mark.slow,
]

DATA = REPO_ROOT / "recipes" / "smoke" / "data"
TINY_HIDDEN = stacks.get("0.9.1").tiny_hidden_size  # what the main job's model stage builds on this stack


def test_the_main_jobs_tiny_model_is_one_vllm_023s_cpu_attention_takes() -> None:
    """The main job's --fast model on this stack: head_dim (hidden / 4 heads) among the CPU attention's head sizes,
    which refuse the reference's 16 (vllm/v1/attention/backends/cpu_attn.py:62-63)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from recipes.smoke.tiny_model import NUM_HEADS

    assert TINY_HIDDEN // NUM_HEADS in CPUAttentionBackend.get_supported_head_sizes()
    assert stacks.get("0.6.1").tiny_hidden_size // NUM_HEADS not in CPUAttentionBackend.get_supported_head_sizes()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The smoke's SFT fixture prepared by the kit (retool-prepare), and the main job's tiny Qwen3 on this stack."""
    root = tmp_path_factory.mktemp("k091")
    files = {"sft": root / "sft.parquet"}
    for what, source in (("sft", "retool_sft.jsonl"),):
        subprocess.run(
            [sys.executable, "-m", "recipes.retool.prepare", what, "--input", str(DATA / source),
             "--output", str(files[what])],
            cwd=REPO_ROOT, env=kit_env(), check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    model = root / "model"
    subprocess.run(
        [sys.executable, "-m", "recipes.smoke.tiny_model", "--out", str(model), "--hidden-size", str(TINY_HIDDEN)],
        cwd=REPO_ROOT, env=kit_env(), check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return {**files, "model": model, "root": root}


def _launch(recipe: str, env: dict[str, str], overrides: list[str], log: Path) -> str:
    argv = ["bash", f"recipes/run_{recipe}_npu.sh", "--stack", "0.9.1", "--hw", "cpu", "--scale", "smoke", *overrides]
    full = kit_env(KIT_PYTHON=sys.executable, KIT_ALLOW_EPHEMERAL_CKPT="1", **env)
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=full, capture_output=True, text=True, timeout=1500)
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{recipe} on stack 0.9.1 failed (log {log}):\n{(proc.stdout + proc.stderr)[-6000:]}"
    return proc.stdout + proc.stderr


@pytest.mark.covered_e2e  # issue 51: the learning run's sft and merge stages (test_main_job_091.py) run both
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
    _hands_off_to_rl(ckpt, inputs["root"] / "hf_merged")


def _hands_off_to_rl(ckpt: Path, target: Path) -> None:
    """scripts/sft_to_rl.sh on verl 0.9.1's engine checkpoint: a plain HF model any process loads (its config names
    the trainer's kit_packed_sdpa, which exists only inside the kit's trainers: the merge drops it), in fp32."""
    import json

    import torch
    from transformers import AutoModelForCausalLM

    argv = ["bash", "scripts/sft_to_rl.sh", "--recipe", "qwen3_4b", "--hw", "cpu", "--ckpt-dir", str(ckpt),
            "--target", str(target)]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=kit_env(KIT_PYTHON=sys.executable), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "run_qwen3_4b_dapo_npu.sh --stack 0.9.1 --hw cpu" in proc.stdout  # the next step names the stack
    assert "kit_packed_sdpa" in (ckpt / "global_step_2" / "huggingface" / "config.json").read_text()
    config = json.loads((target / "config.json").read_text())
    assert "kit_packed_sdpa" not in json.dumps(config)
    model = AutoModelForCausalLM.from_pretrained(target)
    assert model.dtype == torch.float32 and config["dtype"] == "float32"
