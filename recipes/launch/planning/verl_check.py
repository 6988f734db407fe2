"""The dry run's question to the installed verl (issue 52): every value of a resolved RL config that the stack's verl
refuses, one line each. The entry point over :mod:`.verl_values` (field types, value sets and registries read from
verl's code) and :mod:`.verl_keys` (verl's own loaders and constructors, keys verl reads that the config lacks), so
neither of those imports the other's caller.
"""

from __future__ import annotations

import importlib

from omegaconf import DictConfig

from platforms import verl_selectors
from platforms.stacks import Stack
from recipes.launch.planning import verl_keys, verl_values


def check_values(cfg: DictConfig, stack: Stack) -> list[str]:
    """Every value of ``cfg`` (a resolved RL config) that ``stack``'s verl refuses, one line each; [] when this
    interpreter's verl is not the stack's (nothing to ask)."""
    from platforms.stacks import installed_problem

    minor = verl_values.installed_minor()
    if (
        minor not in verl_values.SECTIONS or installed_problem(stack) or "actor_rollout_ref" not in cfg
    ):  # not this verl's, or not an RL config
        return []
    from recipes.launch.planning.compose import quiet

    if stack.verl.has_platform_registry:  # kit: as verl imports it first in every process (verl/__init__.py:40-43):
        # with VERL_PLATFORM=cpu (the cpu platform's env, sourced or set by the smoke) verl's registry has no "cpu"
        # until the kit's plugin registers it, and verl's constructors asked here raise "Unknown platform 'cpu'"
        importlib.import_module(verl_selectors.MODULE)

    problems: list[str] = []
    parts = (
        verl_values.section_problems,
        verl_values.set_problems,
        verl_keys.class_problems,
        verl_keys.trainer_problems,
    )
    for part in (*parts, verl_keys.missing_problems):
        try:
            with quiet():
                problems += part(cfg, minor, stack)
        except Exception as exc:  # noqa: BLE001  (a key verl reads is missing or not a mapping)
            problems.append(f"verl {stack.name} cannot read the config: {verl_values.one_line(exc)}")
    return list(dict.fromkeys(problems))
