"""Issue 43: the main job on either stack, as composed (no trainer runs here; tests/stack091 runs them on 0.9.1).

What differs between the stacks in the main job's commands: the reward settings of the learning task and of the
sabotage bench go to the key the stack's verl reads; RL on CPU runs one rank on 0.9.1 (a vLLM 0.23 CPU replica holds
~5 GB); the tiny model is 128 wide on 0.9.1 (vLLM 0.23's CPU attention refuses head_dim 16); SmolLM2 is cached per
stack; the SFT -> RL merge drops the trainer-only attention that verl 0.9.1 saves into the checkpoint's config.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms import PROFILES, stacks, verl_selectors
from recipes.launch.merger import forget_trainer_attention
from recipes.smoke import commands
from recipes.smoke.commands import FULL, SmokeCommands
from recipes.smoke.learn import LEARN_TASK
from recipes.smoke.sabotage import REWARD_FILE, REWARD_SIGN

SHAPING = "reward_kwargs.shaping=none"


@pytest.mark.parametrize("stack", ["0.6.1", "0.9.1"])
def test_the_learning_tasks_reward_goes_where_the_stacks_verl_reads_it(
    stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIT_STACK", stack)
    key, ignored = stacks.get(stack).verl.reward_key, stacks.get(stack).verl.ignored_reward_key
    argv = SmokeCommands(tmp_path, FULL, PROFILES["cpu"], task=LEARN_TASK).rl_command("http://x").argv
    assert f"{key}.{SHAPING}" in argv
    assert not [word for word in argv if word.startswith(f"{ignored}.")], argv
    assert REWARD_SIGN.rl_overrides == [f"{key}.path={REWARD_FILE}", f"{key}.name=compute_score"]


def test_rl_on_cpu_runs_one_rank_on_091_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "trainer.n_gpus_per_node=1" in verl_selectors.rl_overrides("0.9.1")
    assert verl_selectors.rl_overrides("0.6.1") == []
    monkeypatch.setenv("KIT_STACK", "0.9.1")
    assert "trainer.n_gpus_per_node=1" in PROFILES["cpu"].verl_overrides("rl")
    assert not [o for o in PROFILES["cpu"].verl_overrides("sft") if o.startswith("trainer.n_gpus_per_node")]


def test_each_stack_keeps_its_own_smollm2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_SMOLLM2_DIR", raising=False)
    monkeypatch.setenv("KIT_STACK", "0.6.1")
    reference = commands.smollm2_dir()
    monkeypatch.setenv("KIT_STACK", "0.9.1")
    current = commands.smollm2_dir()
    assert reference == REPO_ROOT / "build" / "models" / "smollm2-135m-instruct"
    assert current == REPO_ROOT / "build" / "models" / "smollm2-135m-instruct-0.9.1"


def test_the_tiny_models_head_dim_per_stack() -> None:
    from recipes.smoke.tiny_model import NUM_HEADS

    assert stacks.get("0.6.1").tiny_hidden_size // NUM_HEADS == 16  # what the reference's numbers were measured on
    assert stacks.get("0.9.1").tiny_hidden_size // NUM_HEADS == 32  # vLLM 0.23 CPU_ATTN's smallest head size


def test_the_merge_drops_the_trainers_own_attention() -> None:
    from transformers import Qwen3Config

    config = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    config._attn_implementation = "kit_packed_sdpa"  # what verl 0.9.1's engine saved into huggingface/config.json
    forget_trainer_attention(config)
    assert config._attn_implementation is None
    assert "kit_packed_sdpa" not in config.to_json_string()
    config._attn_implementation = "eager"  # a library attention the user chose stays
    forget_trainer_attention(config)
    assert config._attn_implementation == "eager"
