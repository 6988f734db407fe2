"""Overrides of keys the stack's verl never reads: refused in one line before anything is composed (issue 52 row 4).

Why: verl 0.9.1's PPO config still carries verl 0.6.1's reward keys (``reward_model.reward_manager``,
``sandbox_fusion``, ...: its ``legacy_reward_impl.yaml``) for an entry point main_ppo is not, so Hydra takes
``reward_model.reward_manager=naive`` and the trainer runs with ``reward.reward_manager.name`` as it was; its SFT
config lacks 0.6.1's SFT keys, so ``+model.partial_pretrain=/x`` adds a key nothing reads and the run trains the
recipe's model. Which keys, and what the stack reads instead, are the stack's facts
(:attr:`platforms.verl_facts.VerlFacts.legacy_keys`); this module only matches the user's overrides against them.
"""

from __future__ import annotations

from collections.abc import Sequence

from platforms.stacks import Stack


def _key(override: str) -> str:
    return override.lstrip("+").split("=", 1)[0]


def user_override_problems(overrides: Sequence[str], phase: str, stack: Stack) -> list[str]:
    """One line per override (a deletion, ``~key``, aside: it leaves verl as it was) of a key ``stack``'s verl never
    reads in ``phase``, naming the key it reads instead."""
    version = stack.pin("VERL_VERSION")
    problems = []
    for override in overrides:
        key = _key(override)
        instead = None if override.startswith("~") else stack.verl.legacy_replacement(phase, key)
        if instead is None:
            continue
        use = f"it reads {instead}" if instead else "it has no such setting"
        problems.append(f"{override}: verl {version} (stack {stack.name}) never reads {key}; {use}")
    return problems
