"""What the stack's verl accepts for each value of a composed RL config, asked of the installed verl (issue 52).

Why: ``algorithm.adv_estimator=grpoo`` and ``actor_rollout_ref.rollout.name=vllmm`` passed the dry run; verl raises on
the first only when it computes the first advantage and on the second when its workers build the rollout, after Ray
has the devices and the models are loaded. A list of keys written by hand goes stale with each verl release, so the
accepted sets are read from the interpreter's verl each time:

* **types**: every field of the dataclass verl converts a section to (``omega_conf_to_dataclass``, at the lines
  :data:`SECTIONS` cites), walked recursively through ``dataclasses.fields`` and ``typing.get_type_hints``; a value is
  tried against OmegaConf's own node of the field's type, ``Literal`` and ``Enum`` fields against their members.
  Stricter than verl on purpose: a section with ``_target_`` is built by ``hydra.utils.instantiate``, which checks no
  type, so ``param_offload=maybe`` would run as a truthy string. Then the section is converted as verl converts it,
  so its ``__post_init__`` checks run too;
* **registries**: advantage estimators, policy losses, rollouts (name, mode), reward managers, agent loops, tracking
  backends and (0.9.1) V1 trainers, from the registries verl's dispatch reads (:func:`_registry_sets`);
* **a table** (:data:`TABLE`) only for string dispatch that is an ``if``/``elif`` chain in verl's code, each row
  citing the lines it mirrors, and checked only when verl reads the key;
* **what verl reads at start-up** (:mod:`recipes.launch.planning.verl_keys`): class names it imports, 0.9.1's V1
  trainer constructor (CPU only), and keys of its own ``ppo_trainer`` config the composed one lacks.

:func:`.verl_check.check_values` returns one line per refusal: ``KEY=VALUE: verl 0.9.1 accepts {a, b}
(verl/...py)``. It asks only the stack whose verl this interpreter has (the launcher's entry point guarantees
that, ``plan.check_installed``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import nodes as omega_nodes

from platforms.stacks import Stack

_ARR = "actor_rollout_ref"
_ACTOR = f"{_ARR}.actor"
ROLLOUT = f"{_ARR}.rollout"


@dataclasses.dataclass(frozen=True)
class Section:
    """A config section verl converts to its dataclass before training, and when it does."""

    path: str
    when: str  # "always", "critic" (need_critic), "reference" (a KL term), "distillation" (need_teacher_policy)
    cites: str  # the verl line that converts it


#: Per verl minor version: the sections verl converts (``omega_conf_to_dataclass``) on its way to the first step.
#: Not here: ``actor_rollout_ref.model`` (HFModelConfig loads the model's config from its path: the path checks'
#: job), 0.9.1's ``actor_rollout_ref.ref`` (verl merges it with the actor's before it converts it,
#: engine_workers.py:553) and ``reward`` (converted piecewise by the reward loop).
SECTIONS: dict[str, tuple[Section, ...]] = {
    "0.6": (
        Section(_ACTOR, "always", "verl/utils/config.py:151"),
        Section(ROLLOUT, "always", "verl/workers/fsdp_workers.py:592"),
        Section("critic", "critic", "verl/utils/config.py:181"),
        Section(f"{_ARR}.ref.fsdp_config", "reference", "verl/workers/fsdp_workers.py:834"),
    ),
    "0.9": (
        Section(_ACTOR, "always", "verl/utils/config.py:164"),
        Section(ROLLOUT, "always", "verl/workers/engine_workers.py:651"),
        Section(f"{ROLLOUT}.checkpoint_engine", "always", "verl/trainer/ppo/v1/trainer_base.py:452"),
        Section("critic", "critic", "verl/utils/config.py:189"),
        Section("distillation", "distillation", "verl/trainer/ppo/v1/trainer_base.py:431"),
    ),
}

_KL = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


@dataclasses.dataclass(frozen=True)
class Row:
    """A value set verl's code admits as an ``if``/``elif`` chain, hence not readable as data."""

    key: str
    accepts: tuple[str, ...]
    when: str  # the boolean key under which verl reads it ("" = always)
    cites: dict[str, str]  # verl minor version -> the lines mirrored
    plus_suffix: frozenset[str] = frozenset()  # versions that also take NAME+ (straight-through KL)


TABLE: tuple[Row, ...] = (
    Row(
        "algorithm.kl_penalty",
        _KL,
        "algorithm.use_kl_in_reward",
        {"0.6": "verl/trainer/ppo/core_algos.py:1450-1473", "0.9": "verl/trainer/ppo/core_algos.py:2201-2251"},
        frozenset({"0.9"}),
    ),
    Row(
        f"{_ACTOR}.kl_loss_type",
        _KL,
        f"{_ACTOR}.use_kl_loss",
        {"0.6": "verl/trainer/ppo/core_algos.py:1450-1473", "0.9": "verl/trainer/ppo/core_algos.py:2201-2251"},
        frozenset({"0.9"}),
    ),
    Row(
        "algorithm.kl_ctrl.type",
        ("fixed", "adaptive"),
        "algorithm.use_kl_in_reward",
        {"0.6": "verl/trainer/ppo/core_algos.py:203-209", "0.9": "verl/trainer/ppo/core_algos.py:206-212"},
    ),
    Row(f"{_ACTOR}.strategy", ("fsdp", "fsdp2", "megatron"), "", {"0.6": "verl/trainer/main_ppo.py:124-134"}),
    # 0.6.1 takes any other value as auto (0.9.1 reads RESUME_MODES from code, _registry_sets)
    Row(
        "trainer.resume_mode",
        ("auto", "disable", "resume_path"),
        "",
        {"0.6": "verl/trainer/ppo/ray_trainer.py:1096-1110"},
    ),
    Row(
        "reward.reward_manager.source",
        ("register", "importlib"),
        "",
        {"0.9": "verl/trainer/ppo/reward.py:92-108"},
    ),
)


def installed_minor() -> str | None:
    """This interpreter's verl as "0.6"/"0.9" (the keys of :data:`SECTIONS`), None without verl."""
    from platforms.pins import installed_verl

    version = installed_verl()
    return ".".join(version.split(".")[:2]) if version else None


# ------------------------------------------------------------------------------------------------- dataclass fields


def active_sections(cfg: DictConfig, minor: str) -> Iterator[Section]:
    """The sections of :data:`SECTIONS` verl converts for this config (a critic only when verl builds one, ...)."""
    from verl.trainer.ppo.utils import need_critic

    from recipes.launch.planning.compose import needs_reference_policy

    active = {
        "always": True,
        "critic": bool(need_critic(cfg)),
        "reference": needs_reference_policy(cfg),
        "distillation": bool(OmegaConf.select(cfg, "distillation.enabled")),
    }
    for section in SECTIONS[minor]:
        if active[section.when]:
            yield section


def section_problems(cfg: DictConfig, minor: str, stack: Stack) -> list[str]:
    """Field types and members of each converted section, then verl's conversion itself (its ``__post_init__``)."""
    from verl.utils import config as verl_config

    problems: list[str] = []
    for section in active_sections(cfg, minor):
        node = OmegaConf.select(cfg, section.path)
        if not isinstance(node, DictConfig):
            problems.append(f"{section.path}: missing; verl {stack.name} converts it ({section.cites})")
            continue
        content = OmegaConf.to_container(node)
        cls = _target_class(content)
        found = list(_field_problems(content, cls, section.path, stack)) if cls else []
        problems += found
        if found:
            continue  # the conversion would fail on the same value
        try:
            verl_config.omega_conf_to_dataclass(node)
        except Exception as exc:  # noqa: BLE001  (verl's and OmegaConf's assertions and errors alike)
            problems.append(f"{section.path}: verl {stack.name} refuses it ({section.cites}): {one_line(exc)}")
    return problems


def _target_class(node: dict) -> type | None:
    """The dataclass a section names in ``_target_`` (verl's config declares it; omega_conf_to_dataclass uses it)."""
    target = node.get("_target_")
    return _class_named(target) if isinstance(target, str) and "." in target else None


@functools.cache
def _class_named(target: str) -> type | None:
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if dataclasses.is_dataclass(cls) else None


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  (a forward reference verl never resolves: the raw annotations then)
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _field_problems(node: dict, cls: type, prefix: str, stack: Stack) -> Iterator[str]:
    """Each present field whose value the field's type refuses; nested dataclasses recursively (by their type, or
    by the node's own ``_target_`` where it names a subclass)."""
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        if field.name not in node or field.name.startswith("_"):
            continue
        key, value = f"{prefix}.{field.name}", node[field.name]
        wanted = hints.get(field.name, typing.Any)
        optional, wanted = _unwrap_optional(wanted)
        if value is None:
            if not optional and wanted is not typing.Any and field.default is not None:
                yield f"{key}=null: verl {stack.name} wants {_type_name(wanted)} ({_where(cls)})"
            continue
        nested = _target_class(value) if isinstance(value, dict) else None
        if nested is None and isinstance(wanted, type) and dataclasses.is_dataclass(wanted):
            nested = wanted
        if nested is not None:
            if isinstance(value, dict):
                yield from _field_problems(value, nested, key, stack)
            else:
                yield f"{key}={show(value)}: verl {stack.name} wants a {nested.__name__} mapping ({_where(cls)})"
            continue
        wrong = _value_problem(value, wanted)
        if wrong:
            yield f"{key}={show(value)}: verl {stack.name} {wrong} ({_where(cls)})"


def _unwrap_optional(wanted: object) -> tuple[bool, object]:
    args = typing.get_args(wanted)
    if typing.get_origin(wanted) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        rest = [a for a in args if a is not type(None)]
        optional = len(rest) < len(args)
        return optional, rest[0] if len(rest) == 1 else typing.Any
    return False, wanted


_NODES: dict[type, type] = {
    bool: omega_nodes.BooleanNode,
    int: omega_nodes.IntegerNode,
    float: omega_nodes.FloatNode,
    str: omega_nodes.StringNode,
}


def _value_problem(value: object, wanted: object) -> str | None:
    """What ``wanted`` (a field's type) says about ``value``, as OmegaConf's conversion decides; None if accepted."""
    if typing.get_origin(wanted) is typing.Literal:
        members = typing.get_args(wanted)
        return None if value in members else f"accepts {_set(members)}"
    if isinstance(wanted, type) and issubclass(wanted, enum.Enum):
        members = tuple(m.value if isinstance(m.value, str) else m.name for m in wanted)
        ok = value in members or value in [m.name for m in wanted]
        return None if ok else f"accepts {_set(members)}"
    origin = typing.get_origin(wanted) or wanted
    if origin in (list, tuple):
        return None if isinstance(value, list) else "wants a list"
    if origin is dict:
        return None if isinstance(value, dict) else "wants a mapping"
    node = _NODES.get(origin)  # type: ignore[arg-type]
    if node is None:
        return None
    if isinstance(value, dict | list):
        return f"wants {_type_name(origin)}"
    try:
        node(value=value)
    except Exception:  # noqa: BLE001  (OmegaConf's ValidationError: the conversion would raise it)
        return f"wants {_type_name(origin)}"
    return None


# ----------------------------------------------------------------------------------------- registries and the table


def _registry_sets(cfg: DictConfig, minor: str) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(key, accepted values, where verl keeps them) for each key whose values a verl registry holds."""
    from verl.trainer.ppo import core_algos

    yield "algorithm.adv_estimator", tuple(core_algos.ADV_ESTIMATOR_REGISTRY), _source(core_algos)
    yield f"{_ACTOR}.policy_loss.loss_mode", tuple(core_algos.POLICY_LOSS_REGISTRY), _source(core_algos)
    from verl.workers.rollout import base as rollout_base

    mode = OmegaConf.select(cfg, f"{ROLLOUT}.mode") or "async"
    pairs = rollout_base._ROLLOUT_REGISTRY  # noqa: SLF001  (get_rollout_class asserts membership in it)
    yield f"{ROLLOUT}.mode", tuple(dict.fromkeys(m for _, m in pairs)), _source(rollout_base)
    yield f"{ROLLOUT}.name", tuple(n for n, m in pairs if m == mode), _source(rollout_base)
    yield _reward_manager_set(cfg, minor)
    yield f"{ROLLOUT}.agent.default_agent_loop", _agent_loops(cfg), "verl/experimental/agent_loop/agent_loop.py"
    from verl.utils import tracking

    yield "trainer.logger", (*tracking.Tracking.supported_backend, "tracking"), _source(tracking)
    if minor == "0.9":  # main_ppo.py:141 get_trainer_cls(config.trainer.v1.trainer_mode), in the TaskRunner
        importlib.import_module("verl.trainer.ppo.v1")  # the package registers its trainers
        base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
        yield "trainer.v1.trainer_mode", tuple(base.TRAINER_REGISTRY), _source(base)
        yield "trainer.resume_mode", tuple(base.RESUME_MODES), _source(base)  # check_resume_mode, in its constructor


def _reward_manager_set(cfg: DictConfig, minor: str) -> tuple[str, tuple[str, ...], str]:
    if minor == "0.6":  # verl/trainer/ppo/reward.py:139-140
        registry = importlib.import_module("verl.workers.reward_manager.registry")
        importlib.import_module("verl.workers.reward_manager")  # registers the built-in managers
        return "reward_model.reward_manager", tuple(registry.REWARD_MANAGER_REGISTRY), _source(registry)
    registry = importlib.import_module("verl.experimental.reward_loop.reward_manager.registry")
    importlib.import_module("verl.experimental.reward_loop.reward_manager")
    key = "reward.reward_manager.name"
    if OmegaConf.select(cfg, "reward.reward_manager.source") != "register":  # reward.py:92-95: only "register"
        return key, (), ""
    return key, tuple(registry.REWARD_MANAGER), _source(registry)


def _agent_loops(cfg: DictConfig) -> tuple[str, ...]:
    """verl's registered agent loops plus the entries of the run's agent-loop config file, which its workers add
    (0.6.1 agent_loop.py:284-289, 0.9.1 :534-539)."""
    module = importlib.import_module("verl.experimental.agent_loop.agent_loop")
    for name in ("single_turn_agent_loop", "tool_agent_loop"):  # the built-ins register on import (package init)
        importlib.import_module(f"verl.experimental.agent_loop.{name}")
    names = list(module._agent_loop_registry)  # noqa: SLF001  (the run-time lookup asserts membership in it)
    path = OmegaConf.select(cfg, f"{ROLLOUT}.agent.agent_loop_config_path")
    if path and Path(str(path)).is_file():
        names += _agent_loop_file(str(path), Path(str(path)).stat().st_mtime_ns)
    return tuple(dict.fromkeys(names))


@functools.lru_cache(maxsize=8)
def _agent_loop_file(path: str, mtime_ns: int) -> list[str]:
    """The names an agent-loop config file registers (read once per version of the file)."""
    return [str(item.get("name")) for item in OmegaConf.load(path) or [] if item.get("name")]


def set_problems(cfg: DictConfig, minor: str, stack: Stack) -> list[str]:
    problems = []
    for key, accepts, where in _registry_sets(cfg, minor):
        value = OmegaConf.select(cfg, key)
        if value is None or not accepts:
            continue
        for item in value if isinstance(value, ListConfig | list) else [value]:
            if str(item) not in accepts or not isinstance(item, str):
                problems.append(f"{key}={show(value)}: verl {stack.name} accepts {_set(accepts)} ({where})")
    for row in TABLE:
        problems += _row_problem(cfg, row, minor, stack)
    return problems


def _row_problem(cfg: DictConfig, row: Row, minor: str, stack: Stack) -> list[str]:
    if minor not in row.cites or (row.when and not OmegaConf.select(cfg, row.when)):
        return []
    value = OmegaConf.select(cfg, row.key)
    if value is None:
        return []
    name = str(value)[:-1] if minor in row.plus_suffix and str(value).endswith("+") else str(value)
    if isinstance(value, str) and name in row.accepts:
        return []
    shown = [*row.accepts, *(f"{a}+" for a in row.accepts)] if minor in row.plus_suffix else list(row.accepts)
    return [f"{row.key}={show(value)}: verl {stack.name} accepts {_set(shown)} ({row.cites[minor]})"]


# ------------------------------------------------------------------------------------------------------- formatting


def _source(module: object) -> str:
    """``verl/...py`` of a verl module, as a refusal cites it."""
    path = Path(inspect.getsourcefile(module) or "")  # type: ignore[arg-type]
    parts = path.parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("verl") :]) if "verl" in parts else path.name


def _where(cls: type) -> str:
    return f"{_source(inspect.getmodule(cls))} {cls.__name__}"


def _set(values: Iterable[object]) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}"


def show(value: object) -> str:
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value)
    return str(value)


def _type_name(wanted: object) -> str:
    return {bool: "a bool", int: "an int", float: "a number", str: "a string"}.get(wanted, str(wanted))  # type: ignore[call-overload]


def one_line(exc: BaseException) -> str:
    """The innermost message of an exception chain (Hydra wraps verl's), on one line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"
