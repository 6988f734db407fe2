"""The dry run's question to the installed verl (issue 52): every value of a resolved RL config that the stack's verl
refuses, one line each. The entry point over :mod:`.verl_values` (field types, value sets and registries read from
verl's code) and :mod:`.verl_keys` (verl's own loaders and constructors, keys verl reads that the config lacks), so
neither of those imports the other's caller.
"""

from __future__ import annotations

from omegaconf import DictConfig

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
