"""The reward the trainer will read, on either stack: a run whose reward would silently not be the kit's is refused.

Why a rule of its own: verl 0.9.x's PPO trainer reads the custom reward function only at
``reward.custom_reward_function`` (its ``verl/trainer/ppo/reward.py:70``); the top-level ``custom_reward_function``
that verl 0.6.1, verl-recipe's retool and this kit's reference recipes set is still in 0.9.1's generated config and
is ignored without a word (the migration was removed in verl #6710; the fix #7331 was closed unmerged), so training
would run on verl's default reward. verl 0.6.1 is the mirror image: it never reads ``reward.custom_reward_function``.
Where each stack reads it is :attr:`platforms.stacks.VerlFacts.reward_key`; this module compares, and is the one
place that moves the recipe's reward spec (``recipes/config/reward_spec/<recipe>.yaml``, written once) from the key the
recipes' defaults list puts it at to the stack's (:func:`placement`).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from platforms.stacks import Stack

#: Where the RL recipes' defaults list places the reward spec (``- reward_spec@custom_reward_function: <recipe>`` in
#: recipes/config/retool_*_dapo.yaml): verl 0.6.1's key, so the reference's command names no placement at all.
RECIPES_KEY = "custom_reward_function"
SPEC_GROUP = "reward_spec"


def placement(recipe: str, stack: Stack) -> list[str]:
    """The Hydra overrides that put recipe ``recipe``'s reward spec where ``stack``'s verl reads it: none where that
    is the recipes' key, else the defaults-list entry deleted and added again at the stack's key (Hydra 1.3 deletes
    and appends a default by its ``group@package``). The spec's own file says what the reward is; this says where."""
    key = stack.verl.reward_key
    if key == RECIPES_KEY:
        return []
    return [f"~{SPEC_GROUP}@{RECIPES_KEY}", f"+{SPEC_GROUP}@{key}={recipe}"]


def reward_node(cfg: DictConfig, stack: Stack) -> DictConfig:
    """The reward spec the stack's verl reads (an empty config when the key is absent)."""
    node = OmegaConf.select(cfg, stack.verl.reward_key)
    return node if node is not None else OmegaConf.create({})


def reward_key_problems(cfg: DictConfig, stack: Stack) -> list[str]:
    """One line per way the run's reward would silently not be the one configured: set at the key this stack's verl
    ignores, or not set where it reads."""
    reads, ignored = stack.verl.reward_key, stack.verl.ignored_reward_key
    version = stack.pin("VERL_VERSION")
    problems = []
    stray = OmegaConf.select(cfg, f"{ignored}.path")
    if stray:
        problems.append(
            f"{ignored}.path={stray}: verl {version} (stack {stack.name}) never reads {ignored}, only {reads}; the run "
            f"would train on verl's default reward, not this one (set {reads}.path and {reads}.name instead)"
        )
    if not OmegaConf.select(cfg, f"{reads}.path"):
        problems.append(
            f"{reads}.path is not set: verl {version} would score rollouts with its default reward, not the kit's "
            f"(recipes/retool/reward.py; the launcher sets it unless an override clears it)"
        )
    return problems


def user_override_problems(overrides: list[str], stack: Stack) -> list[str]:
    """A user's override at the key this stack's verl ignores, named before anything is composed: Hydra accepts it
    (verl 0.9.1's config still carries the old key) and the trainer would ignore it."""
    ignored, reads = stack.verl.ignored_reward_key, stack.verl.reward_key
    bad = [
        o
        for o in overrides
        if o.lstrip("+~").split("=", 1)[0].startswith(f"{ignored}.") or o.lstrip("+~").split("=", 1)[0] == ignored
    ]
    return [
        f"{o}: verl {stack.pin('VERL_VERSION')} (stack {stack.name}) ignores {ignored}; write it as "
        f"{reads}{o.lstrip('+~').split('=', 1)[0][len(ignored) :]}=..."
        for o in bad
    ]
