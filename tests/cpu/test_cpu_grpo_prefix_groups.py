"""GRPO on CPU through verl's vLLM async server with groups that share no first block (issue 30 item 9).

vLLM's CPU build with prefix caching on dies in IPEX's decode kernel ("Sliding window unsupported",
vllm/v1/attention/backends/cpu_attn.py:909 -> intel_extension_for_pytorch mha_fusion.py:424, then EngineDeadError)
when the sequences of a decode batch share cached prompt blocks in groups: GRPO with n >= 4 whose group members
find their prompt's first 128-token block (the CPU block size with IPEX, vllm/platforms/cpu.py:147-148) cached,
as every turn after the first of a multi-turn rollout does. A replay of the failing call (block tables
[[1, 5], [1, 6], [1, 7], [1, 8], [3, 9], ...]) fails with 1 and with 2 OpenMP threads; giving every sequence its own
first block makes it pass. The cpu platform turns prefix caching off for RL on the reference
(``CpuPlatform.prefix_caching_overrides``), which reaches vLLM only with patch 0026.

The run: ``main_ppo`` GRPO, ``rollout.n=4``, four prompts of ~150 tokens that differ from their first user token
on, one rank (one vLLM replica serves all four groups), 2 steps, with the platform's overrides, and a prefill budget
of one prompt per engine step (``max_num_batched_tokens=256``), so a group's later members are prefilled after its
first and share its cached block. It must log both steps. ``KIT_TEST_PREFIX_CACHING=1`` runs it with prefix caching
on: the engine died with "Sliding window unsupported" in step 1 in both runs tried (2 of 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import interpreter_stack, require_vllm, step_metrics, tiny_model_dir, trainer_env

from platforms import CPU
from platforms.base import RL_PREFIX_CACHING_KEY

pytestmark = pytest.mark.slow

GROUPS, N, STEPS = 4, 4, 2
REWARD_PY = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return (sum(map(ord, solution_str)) % 97) / 97  # response-dependent: GRPO groups get non-zero advantages
"""
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma omega".split()


def _prompt(i: int) -> str:
    """~150 user tokens after the ~20-token default system block (more than one 128-token block), different from the
    first word on: no two prompts share their first KV block."""
    words = [WORDS[(i * 5 + k * (i + 3)) % len(WORDS)] for k in range(120)]
    return f"Problem {i}: " + " ".join(words) + ". Count the words."


def _assets(root: Path) -> tuple[Path, Path]:
    import pandas as pd

    rows = [
        {
            "data_source": "kit_prefix_groups",
            "prompt": [{"role": "user", "content": _prompt(i)}],
            "ability": "count",
            "reward_model": {"style": "rule", "ground_truth": "120"},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(GROUPS)
    ]
    pd.DataFrame(rows).to_parquet(root / "prompts.parquet")
    (root / "reward.py").write_text(REWARD_PY)
    return root / "prompts.parquet", root / "reward.py"


def grpo_overrides(data: Path, reward: Path, ckpt: Path) -> list[str]:
    return [
        *CPU.verl_overrides("rl", interpreter_stack()),
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={GROUPS}",
        "data.max_prompt_length=256",
        "data.max_response_length=32",
        "data.return_raw_chat=True",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={tiny_model_dir()}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={GROUPS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={GROUPS * N}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.rollout.n={N}",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        # one prompt's prefill per engine step, so a group's later members find its first member's prompt blocks
        # cached and share them, as every turn after the first of a multi-turn rollout does
        "actor_rollout_ref.rollout.max_num_batched_tokens=256",
        "actor_rollout_ref.rollout.max_num_seqs=64",  # vLLM: max_num_batched_tokens >= max_num_seqs
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={GROUPS * N}",
        f"custom_reward_function.path={reward}",
        "custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.logger=['console']",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.default_local_dir={ckpt}",
        "trainer.project_name=kit-cpu-prefix-groups",
        "trainer.experiment_name=tiny",
    ]


# Issue 51: opt-in. Every main job checks that its rollout engine started with its stack's prefix caching (off on
# the reference: tests/kit_main_job.py check_rollout_engine_prefix_caching); this run shows the crash it avoids.
@pytest.mark.covered_e2e
def test_grpo_groups_without_a_shared_first_block(tmp_path: Path) -> None:
    require_vllm()
    assert f"{RL_PREFIX_CACHING_KEY}=False" in CPU.verl_overrides("rl", interpreter_stack()), (
        "the cpu platform no longer turns it off"
    )
    data, reward = _assets(tmp_path)
    overrides = grpo_overrides(data, reward, tmp_path / "ckpt")
    if os.environ.get("KIT_TEST_PREFIX_CACHING") == "1":
        overrides.append(f"{RL_PREFIX_CACHING_KEY}=True")
    log = tmp_path / "grpo.log"
    env = trainer_env("rl", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1")
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            env=env,
            cwd=tmp_path,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=480,
        )
    text = log.read_text()
    crashed = "Sliding window unsupported" in text
    assert proc.returncode == 0 and not crashed, (
        f"GRPO n={N} over {GROUPS} prompts without a shared first block failed (rc={proc.returncode}"
        f"{', IPEX: Sliding window unsupported' if crashed else ''}):\n{text[-6000:]}"
    )
    assert "enable_prefix_caching=False" in text, "the engine log does not show prefix caching off"
    assert sorted(step_metrics(text)) == list(range(1, STEPS + 1)), text[-4000:]
