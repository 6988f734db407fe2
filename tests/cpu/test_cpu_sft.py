"""End to end on CPU: verl's multi-turn SFT trainer on ReTool-shaped tool-calling data, then the FSDP model merger.

``torchrun --standalone --nproc_per_node 2 -m verl.trainer.fsdp_sft_trainer`` with ``trainer.device=cpu``,
``model.strategy=fsdp2``, ``model.attn_implementation=sdpa`` (and remove-padding) on the kit's tiny random Qwen3 with
the real Qwen tokenizer; a few steps must give finite, decreasing loss and a checkpoint that
``python -m verl.model_merger merge --backend fsdp`` turns into a loadable Hugging Face model.

Needs the patched verl (gloo process group, configurable attn_implementation, CPU loss all-reduce, CPU pad/unpad).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_testing import interpreter_stack, step_metrics, tiny_model_dir, trainer_env

from platforms import CPU
from recipes.launch.handoffs.handoff import merger_command
from recipes.retool.schema import TOOL_SCHEMA

STEPS = 3

pytestmark = pytest.mark.slow


def _write_sft_data(path: Path, rows: int = 16) -> Path:
    """ReTool-SFT-shaped rows (as recipe/retool/retool_sft_preprocess.py writes them): user, assistant with a
    code_interpreter tool call whose ``arguments`` is a dict, tool output, final assistant answer in \\boxed{};
    plus the ``tools`` schema column."""
    import pandas as pd

    records = []
    for i in range(rows):
        a, b = i + 2, 2 * i + 5
        records.append(
            {
                "messages": [
                    {"role": "user", "content": f"Compute {a} * {b}."},
                    {
                        "role": "assistant",
                        "content": "Let me compute it with Python.",
                        "tool_calls": [
                            {
                                "type": "function",
                                "function": {"name": "code_interpreter", "arguments": {"code": f"print({a} * {b})"}},
                            }
                        ],
                    },
                    {"role": "tool", "content": str(a * b)},
                    {"role": "assistant", "content": f"The product is \\boxed{{{a * b}}}."},
                ],
                "tools": [TOOL_SCHEMA],
            }
        )
    pd.DataFrame(records).to_parquet(path)
    return path


def _env() -> dict[str, str]:
    return trainer_env("sft", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", OMP_NUM_THREADS="1")


def _run(cmd: list[str], log: Path, timeout: float) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=_env(), cwd=log.parent, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, f"{cmd[:6]} failed (rc={proc.returncode}):\n{log.read_text()[-6000:]}"
    return wall


# Issue 51: opt-in; the main job's sft and merge stages run verl's multi-turn SFT trainer (2 ranks, FSDP2, remove-
# padding, the same patches) and the merger on tool-calling trajectories, on each stack (tests/kit_main_job.py).
@pytest.mark.covered_e2e
def test_cpu_sft_multiturn_tools_and_merge(tmp_path: Path) -> None:
    model = tiny_model_dir()
    data = _write_sft_data(tmp_path / "retool_sft.parquet")
    ckpt = tmp_path / "ckpt"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "verl.trainer.fsdp_sft_trainer",
        # the platform's own settings (device, FSDP2, sdpa, fp32 compute)
        *CPU.verl_overrides("sft", interpreter_stack()),
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.max_length=320",
        "data.truncation=error",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=2",
        "data.multiturn.enable=true",
        "data.multiturn.messages_key=messages",
        "data.multiturn.tools_key=tools",
        f"model.partial_pretrain={model}",
        "use_remove_padding=true",
        "optim.lr=1e-3",
        f"trainer.default_local_dir={ckpt}",
        "trainer.logger=['console']",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.save_freq={STEPS}",
        "trainer.project_name=kit-cpu-sft",
        "trainer.experiment_name=tiny",
    ]
    wall = _run(cmd, tmp_path / "sft.log", timeout=300)
    log = (tmp_path / "sft.log").read_text()

    steps = step_metrics(log)
    assert sorted(steps) == list(range(1, STEPS + 1)), f"steps {sorted(steps)}:\n{log[-4000:]}"
    losses = [steps[s]["train/loss"] for s in range(1, STEPS + 1)]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0], f"loss did not decrease: {losses}"
    assert math.isfinite(steps[STEPS]["val/loss"])
    step_times = [round(steps[s]["train/time(s)"], 2) for s in range(1, STEPS + 1)]
    print(f"\n[cpu-sft] wall {wall:.1f}s, train/time(s) per step {step_times}, train/loss {losses}")

    step_dir = ckpt / f"global_step_{STEPS}"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    for rank in (0, 1):
        assert (step_dir / f"model_world_size_2_rank_{rank}.pt").is_file()
    assert (step_dir / "huggingface" / "config.json").is_file()

    merged = tmp_path / "merged"
    merge_wall = _run(merger_command(step_dir, merged), tmp_path / "merge.log", timeout=180)
    print(f"[cpu-sft] model_merger wall {merge_wall:.1f}s")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trained = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32)
    assert type(trained).__name__ == "Qwen3ForCausalLM"
    changed = [
        name
        for name, p in trained.state_dict().items()
        if not torch.allclose(p, initial.state_dict()[name].float(), atol=1e-6)
    ]
    assert changed, "the merged model has the initial weights: training or merging lost the update"
    tokenizer = AutoTokenizer.from_pretrained(merged)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Compute 3 * 4."}], tools=[TOOL_SCHEMA], add_generation_prompt=True
    )
    with torch.no_grad():
        logits = trained(input_ids=torch.tensor([ids])).logits
    assert torch.isfinite(logits).all()
