"""Issue 49: the stack is a value handed to the launcher, not read from the environment.

A library caller plans either stack in one process (``plan.build(recipe, hw, stack)``) and the process environment is
left as it was; the recipe's reward spec, written once, lands where each stack's verl reads it; a ``stack=`` override,
which would change the stack group behind the launcher's back, is refused; and no module of the kit outside
platforms/stacks.py asks the environment for the stack or branches on which stack is the default.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from platforms import stacks
from platforms.cli_errors import UsageError
from recipes.launch.planning import compose, plan, reward_key
from recipes.launch.run_inputs.catalog import CONFIG_DIR, RECIPES
from recipes.retool import REWARD_PATH

REPO = Path(__file__).resolve().parents[2]
ENVIRON = {"HOME": "/nonexistent/kit-home"}
RL_RECIPES = [name for name, recipe in RECIPES.items() if recipe.phase == "rl"]


def _plan(stack: stacks.Stack, *overrides: str) -> plan.Plan:
    return plan.build(RECIPES["qwen3_4b_dapo"], "a3", stack, overrides, path_check=False, environ=dict(ENVIRON))


def test_both_stacks_are_planned_in_one_process_without_touching_the_environment() -> None:
    """build() checks no installed verl (the entry point does: plan.check_installed), so the current stack's plan is
    composed here whichever verl this venv holds; its verl validation may object, its placement may not."""
    _plan(stacks.REFERENCE)  # verl's and Ray's first imports set variables of their own: not the planner's doing
    before = dict(os.environ)
    reference, current = _plan(stacks.REFERENCE), _plan(stacks.CURRENT)
    assert dict(os.environ) == before
    assert (reference.stack, current.stack) == (stacks.REFERENCE, stacks.CURRENT)
    assert reference.cfg is not None and current.cfg is not None, (reference.errors, current.errors)
    assert OmegaConf.select(reference.cfg, "custom_reward_function.path") == str(REWARD_PATH)
    assert OmegaConf.select(reference.cfg, "reward.custom_reward_function.path") is None  # verl 0.9.1 has the node
    assert OmegaConf.select(current.cfg, "reward.custom_reward_function.path") == str(REWARD_PATH)
    assert OmegaConf.select(current.cfg, "custom_reward_function.path") is None  # nothing where 0.9.1 never reads
    spec = OmegaConf.to_container(reference.cfg.custom_reward_function)
    assert OmegaConf.to_container(current.cfg.reward.custom_reward_function) == spec  # one spec, two places
    assert not [word for word in reference.argv if word.startswith(("stack=", "~reward_spec", "+reward_spec"))]
    assert "stack=0.9.1" in current.argv
    assert "+reward_spec@reward.custom_reward_function=qwen3_4b_dapo" in current.argv


@pytest.mark.parametrize("recipe", RL_RECIPES)
def test_the_reward_spec_is_written_once_and_placed_by_the_stack(recipe: str) -> None:
    """The recipes' defaults list places the spec at the reference's key; the one function that knows the other key
    moves it, and composing with it puts the same spec there (on this venv's verl: the placement is the kit's)."""
    assert not (CONFIG_DIR / "reward").exists()
    assert f"- reward_spec@{reward_key.RECIPES_KEY}: {recipe}" in (CONFIG_DIR / f"retool_{recipe}.yaml").read_text()
    assert compose.stack_overrides(RECIPES[recipe], stacks.REFERENCE) == []
    moved = compose.stack_overrides(RECIPES[recipe], stacks.CURRENT)
    assert moved == [
        "stack=0.9.1",
        f"~reward_spec@{reward_key.RECIPES_KEY}",
        f"+reward_spec@{stacks.CURRENT.verl.reward_key}={recipe}",
    ]
    ref = compose.compose(RECIPES[recipe], [])
    cur = compose.compose(RECIPES[recipe], moved)
    assert OmegaConf.to_container(cur.reward.custom_reward_function) == OmegaConf.to_container(
        ref.custom_reward_function
    )
    assert OmegaConf.select(cur, "custom_reward_function.reward_kwargs") is None


@pytest.mark.parametrize("override", ["stack=0.9.1", "stack=0.6.1", "+stack=0.9.1", "++stack=0.6.1"])
def test_a_stack_override_is_refused_in_one_line(override: str) -> None:
    with pytest.raises(UsageError, match=r"^choose the stack with --stack, not a stack= override$"):
        _plan(stacks.REFERENCE, override)
    with pytest.raises(UsageError, match="choose the stack with --stack"):
        plan.check_user_overrides([override])


def test_a_stack_override_on_the_command_line_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.launch import cli

    rc = cli.main(["plan", "--recipe", "qwen3_4b_dapo", "--hw", "a3", "--dry-run", "--no-path-check", "stack=0.9.1"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert [line for line in err.splitlines() if line.strip()] == [
        "retool-launch: error: choose the stack with --stack, not a stack= override"
    ]


#: What reads the stack from the environment, or branches on which stack is the default, outside the stack object.
_FORBIDDEN = re.compile(r"stacks\.active\(|select_from_argv|is_default")


def test_nothing_outside_the_stack_object_reads_or_branches_on_the_stack() -> None:
    found = []
    for folder in ("recipes", "platforms"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "platforms" / "stacks.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _FORBIDDEN.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)
