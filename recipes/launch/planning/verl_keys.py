"""Keys verl reads at start-up beyond their values' sets (issue 52), asked by :func:`.verl_check.check_values`.

* Class names verl imports by name before the first step (0.9.1's checkpoint callback and agent-loop manager): loaded
  with verl's own loader, so a misspelt module or class is refused before Ray starts.
* Keys of verl's own ``ppo_trainer`` config that the composed one lacks, outside the sections verl converts to
  dataclasses (there the dataclass's default applies): verl reads them off the config object and raises where it does.
  The launcher refuses ``~key`` overrides already; a recipe's YAML could still drop one.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from platforms.stacks import Stack
from recipes.launch.planning.verl_values import ROLLOUT, SECTIONS, one_line, show


def class_problems(cfg: DictConfig, minor: str, stack: Stack) -> list[str]:
    """Class names verl imports at start-up (0.9.1: the checkpoint callback, in the V1 trainer's constructor,
    verl/trainer/ppo/checkpoint_callback.py:78-81; the agent-loop manager, verl/trainer/main_ppo.py:119-122), loaded
    by verl's own loader."""
    if minor != "0.9":
        return []
    callback = importlib.import_module("verl.trainer.ppo.checkpoint_callback")
    problems = []
    for key, base in (
        ("trainer.checkpoint_callback_class", "CheckpointCallback"),
        (f"{ROLLOUT}.agent.agent_loop_manager_class", "AgentLoopManager"),
    ):
        fqn = OmegaConf.select(cfg, key)
        if fqn:
            try:
                callback.load_class_from_fqn(fqn, base)
            except Exception as exc:  # noqa: BLE001  (verl's loader raises ValueError, ImportError, ...)
                problems.append(f"{key}={show(fqn)}: verl {stack.name} cannot load it: {one_line(exc)}")
    return problems


def trainer_problems(cfg: DictConfig, minor: str, stack: Stack) -> list[str]:
    """0.9.1's V1 trainer constructor run as the TaskRunner runs it, without the workers its subclass adds
    (verl/trainer/ppo/v1/trainer_base.py:151-169: resume mode, checkpoint callback, KL controller, the replay buffer's
    asserts); CPU only, no Ray. An unknown trainer mode is the registry check's to report."""
    if minor != "0.9":
        return []
    base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
    importlib.import_module("verl.trainer.ppo.v1")  # registers the trainers
    cls = base.TRAINER_REGISTRY.get(OmegaConf.select(cfg, "trainer.v1.trainer_mode"))
    if cls is None:
        return []
    try:
        base.PPOTrainer.__init__(object.__new__(cls), cfg)
    except Exception as exc:  # noqa: BLE001  (its asserts, ValueErrors and missing keys alike)
        return [
            f"verl {stack.name}'s V1 trainer refuses the config (verl/trainer/ppo/v1/trainer_base.py:151): "
            f"{one_line(exc)}"
        ]
    return []


def missing_problems(cfg: DictConfig, minor: str, stack: Stack) -> list[str]:
    """Keys of verl's own trainer config that ``cfg`` lacks (a ``~key`` override), outside the sections verl converts
    (there the dataclass's default applies): verl reads them from the config object, and raises where it does."""
    skip = {tuple(section.path.split(".")) for section in SECTIONS[minor]}  # there the dataclass default applies
    return [
        f"{'.'.join(path)}: missing; verl {stack.name} reads it (verl/trainer/config/ppo_trainer.yaml has it)"
        for path in _absent(_verl_defaults(), cfg, (), skip)
    ]


def _absent(tree: dict, node: DictConfig, prefix: tuple[str, ...], skip: set[tuple[str, ...]]) -> Iterator[tuple]:
    """Paths of ``tree`` (verl's defaults) not in ``node``; in a converted section (``skip``) only ``_target_``
    (without it the nested dataclass stays a dict, and verl's attribute reads fail)."""
    have = set(node.keys())
    for key, value in tree.items():
        path = (*prefix, key)
        if key not in have:
            if key == "_target_" or not any(path[: len(s)] == s for s in skip if len(s) <= len(path)):
                yield path
        elif isinstance(value, dict) and value:
            child = node[key]
            if isinstance(child, DictConfig):
                yield from _absent(value, child, path, skip)


@functools.cache
def _verl_defaults() -> dict:
    """verl's ``ppo_trainer`` config as its entry point composes it without overrides (once per process)."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
            return OmegaConf.to_container(compose("ppo_trainer"))  # type: ignore[return-value]
    finally:
        GlobalHydra.instance().clear()
