"""Issue 43: the RL recipes compose against verl 0.9.1's own configs, on every profile, with the kit's reward at the
key 0.9.1 reads (``reward.custom_reward_function``); a reward set at the old top-level key is refused before any
work. Runs under the current stack's interpreter (``bash scripts/test.sh --stack 0.9.1``); skips under another verl.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dry_run_cases import PROFILES, Case, foreign_patches, run_case
from kit_testing import installed_verl, needs_verl_09, refused_in_one_line

from platforms import stacks

VERL = installed_verl()
pytestmark = needs_verl_09()

RL_RECIPES = ("qwen3_4b_dapo", "qwen2.5_7b_dapo", "qwen2.5_32b_dapo")


@pytest.mark.parametrize("hw", PROFILES)
@pytest.mark.parametrize("recipe", RL_RECIPES)
def test_every_rl_recipe_dry_runs_on_the_current_stack(recipe: str, hw: str, tmp_path: Path) -> None:
    args = (recipe, "--hw", hw, "--dry-run", "--no-path-check", "--stack", "0.9.1")
    rc, out = run_case(Case(f"{recipe}__{hw}__091", args), tmp_path)
    assert rc == 0, out
    assert "dry run OK" in out
    assert "stack 0.9.1: verl 0.9.1" in out  # the table names the stack
    command = out[out.index("-m verl.trainer.main_ppo") :]
    assert "stack=0.9.1" in command
    # the recipe's one reward spec, moved from the reference's key to 0.9.1's (recipes/launch/planning/reward_key.py)
    assert f"+reward_spec@reward.custom_reward_function={recipe}" in command
    assert "reward.custom_reward_function.path=<KIT>/recipes/retool/reward.py" in command
    assert " custom_reward_function." not in command  # nothing at the key 0.9.1 ignores
    assert foreign_patches(out, stacks.get("0.9.1")) == []  # no credit to the reference's series (issue 52 row 5)
    # the kit's agent loop as tool_agent, at the key 0.9.1 reads too (tests/stack091/test_agent_loop_091.py)
    assert "actor_rollout_ref.rollout.agent.agent_loop_config_path=<KIT>/recipes/retool/agent_loop.yaml" in command


def test_the_old_reward_key_is_refused_in_one_line_before_any_work() -> None:
    line = refused_in_one_line(
        [
            "bash",
            "recipes/run_qwen3_4b_dapo_npu.sh",
            "--stack",
            "0.9.1",
            "--hw",
            "a2",
            "--dry-run",
            "--no-path-check",
            "custom_reward_function.path=/x/reward.py",
        ]
    )  # exit 2, nothing planned, nothing printed
    assert "verl 0.9.1 (stack 0.9.1) ignores custom_reward_function" in line
    assert "reward.custom_reward_function.path" in line


def test_the_installed_verl_is_the_stacks() -> None:
    """The venv test.sh --stack 0.9.1 builds holds the stack's verl, with the kit's series recorded in it."""
    import verl

    from platforms import stacks

    stack = stacks.get("0.9.1")
    assert VERL == stack.pin("VERL_VERSION")
    record = Path(verl.__file__).parent / "version" / "kit_patches"
    assert record.is_file(), "verl was not installed by scripts/setup_verl.sh --stack 0.9.1"
    names = {line.split()[1] for line in record.read_text().splitlines() if line.strip()}
    assert names == {p.name for p in stack.patch_dir.glob("*.patch")}
