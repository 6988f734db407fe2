"""The dry run's verdict against verl's own, on every leaf of every RL recipe's config mutated (issue 52).

Shared by tests/recipes/test_dry_run_differential.py (the reference stack, .venv) and
tests/stack091/test_dry_run_differential_091.py (the current stack, .venv-0.9.1), like tests/disk_full_testing.py.

Each RL recipe is planned as ``run RECIPE --hw a2 --dry-run --no-path-check`` plans it (``plan.build``: the profile,
the stack's choices, the platform's and the kit's overrides, resolved). Every leaf of that config is then mutated in
place (:func:`mutations`: a value of the wrong type, a string outside its set, 0 and -1 for numbers, the key deleted)
and judged twice:

* **verl** (:class:`VerlStartUp`): what the stack's verl runs before the first step, in-process and without devices:
  ``validate_config``, the dataclass conversions its trainer and workers make (cited per version), the registries
  and dispatch its workers apply at run time (advantage estimator, policy loss, rollout, reward manager, agent loop,
  tracking backends, KL estimators and controller, on tensors of one element), the reward function, dataset class
  and tools it loads, and (0.9.1) the V1 trainer's registry and its base constructor (CPU only, no Ray). verl builds
  a ``_target_`` section with ``hydra.utils.instantiate``, which checks no field type: the kit is stricter there;
* **the kit**: ``compose.validate_rl`` + ``validate_values.problems`` + ``verl_check.check_values``.

A refusal by verl alone is a gap: the dry run says OK and verl fails later. :data:`ALLOWED` names each one that
cannot be checked before the run, with why. Recipes after the first mutate only the leaves whose value differs from
the first's (the shared ones were mutated already). Each leaf gets one mutation, its kinds taken in turn from leaf to
leaf (all kinds occur); ``KIT_DIFFERENTIAL_FULL=1`` applies every kind to every leaf (about 2.5 times as long).

Speed: ``omega_conf_to_dataclass`` is a pure function of the section it converts; it is memoised on the section and
whether the mutation lies inside it (:func:`memoised_conversions`), so a mutation re-converts only what it touched.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

RL_RECIPES = ("qwen3_4b_dapo", "qwen2.5_7b_dapo", "qwen2.5_32b_dapo")
HW = "a2"
DELETE = object()
_ARR = "actor_rollout_ref"

#: Gaps (verl refuses, the dry run does not) that cannot be checked before the run: "path:kind" pattern -> why.
ALLOWED: dict[str, str] = {
    f"{_ARR}.rollout.agent.default_agent_loop:missing": (
        "verl reads it only for rows without an agent_name (0.6.1 agent_loop.py:346-348, 0.9.1 :610-612); the kit's "
        "rows all name tool_agent (recipes/retool/schema.py AGENT_NAME), and the dry run does not read the data"
    ),
}
#: KIT_DIFFERENTIAL_FULL=1: every mutation of every leaf; otherwise one per leaf, the kinds taken in turn (time).
FULL = os.environ.get("KIT_DIFFERENTIAL_FULL") == "1"


@dataclass
class Counts:
    """What a differential run found."""

    tried: int = 0
    both: int = 0
    verl_only: list[str] = field(default_factory=list)
    kit_only: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)

    def line(self, stack: str) -> str:
        return (
            f"stack {stack}: mutations tried {self.tried}, refused by both {self.both}, only by verl (gaps) "
            f"{len(self.verl_only)} (+{len(self.allowed)} allowed), only by the kit {len(self.kit_only)}"
        )


_PLANNED: dict[tuple[str, str], dict[str, DictConfig]] = {}


def planned_configs(stack: Any, home: str) -> dict[str, DictConfig]:
    """Each RL recipe's resolved config as the launcher's dry run builds it (no path checks, no environment); planned
    once per process (a mutation restores what it changed)."""
    from recipes.launch.planning import plan
    from recipes.launch.run_inputs.catalog import RECIPES

    if (stack.name, home) in _PLANNED:
        return _PLANNED[(stack.name, home)]
    configs = _PLANNED.setdefault((stack.name, home), {})
    for name in RL_RECIPES:
        built = plan.build(RECIPES[name], HW, stack, path_check=False, environ={"HOME": home})
        assert built.cfg is not None and not built.errors, (name, built.errors)
        configs[name] = built.cfg
    return configs


def leaves(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every leaf: scalars, lists, empty mappings."""
    if isinstance(node, DictConfig) and len(node):
        for key in node:
            missing = OmegaConf.is_missing(node, key)  # "???": verl's mandatory value of an unused section
            yield from leaves("???" if missing else node[key], (*prefix, str(key)))
    elif isinstance(node, ListConfig):
        yield prefix, OmegaConf.to_container(node)
    elif isinstance(node, DictConfig):
        yield prefix, {}
    else:
        yield prefix, node


def mutations(value: Any, index: int) -> list[tuple[str, Any]]:
    """The mutations of one leaf: wrong type, outside its set, 0 / -1 (numbers; one of the two on alternate leaves
    for time), and deleted."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, bool):
        found.append(("type", "maybe"))
    elif isinstance(value, int | float):
        found += [("type", "abc"), ("zero" if index % 2 else "negative", type(value)(0 if index % 2 else -1))]
    elif isinstance(value, str):
        found.append(("outside", value + "x"))
    elif value is None:
        found.append(("type", "x"))
    elif isinstance(value, list):
        strings = value and all(isinstance(item, str) for item in value)
        found.append(("outside", [*value, value[0] + "x"]) if strings else ("type", "x"))
    return [*found, ("missing", DELETE)]


#: The mutation in force (root id, dotted path, serial): the conversion memo's key for the sections it touches.
_CURRENT: list[Any] = [None, "", 0]


@contextlib.contextmanager
def mutated(cfg: DictConfig, path: tuple[str, ...], value: Any) -> Iterator[None]:
    """``cfg`` with the leaf at ``path`` set to ``value`` (or deleted), restored afterwards."""
    _CURRENT[:] = [id(cfg), ".".join(path), _CURRENT[2] + 1]
    parent = cfg
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    old = "???" if OmegaConf.is_missing(parent, key) else parent[key]
    with open_dict(parent):
        if value is DELETE:
            del parent[key]
        else:
            parent[key] = value
        try:
            yield
        finally:
            parent[key] = old
            _CURRENT[:] = [None, "", _CURRENT[2] + 1]


def _memo_key(config: Any, dataclass_type: Any) -> tuple[Any, ...]:
    """A section of a planned config: (root, its path, the mutation if it lies inside it); anything else: content."""
    if isinstance(config, DictConfig) and config._get_parent() is not None:  # noqa: SLF001
        root, where = id(config._get_root()), config._get_full_key(None)  # noqa: SLF001
        root_now, path, serial = _CURRENT
        inside = root == root_now and (path == where or path.startswith(f"{where}."))
        return (dataclass_type, root, where, serial if inside else None)
    content = OmegaConf.to_container(config) if isinstance(config, DictConfig | ListConfig) else config
    return (dataclass_type, repr(content))


@contextlib.contextmanager
def memoised_conversions(stack: Any) -> Iterator[None]:
    """``verl.utils.config.omega_conf_to_dataclass`` memoised for the ``with`` on the section and the mutation inside
    it (pure in its input; most mutations leave most sections as they were); the tool registry's loader on the
    file's path likewise."""
    from verl.utils import config as verl_config

    registry = importlib.import_module(stack.verl.tool_registry_module)
    original, load_tools = verl_config.omega_conf_to_dataclass, registry.initialize_tools_from_config
    cache: dict[tuple[Any, ...], tuple[bool, Any]] = {}

    def remembered(key: Any, make: Callable[[], Any]) -> Any:
        """``make()``'s result, or the exception it raised, once per key."""
        if key not in cache:
            try:
                cache[key] = (True, make())
            except Exception as exc:  # noqa: BLE001
                cache[key] = (False, exc)
        ok, result = cache[key]
        if not ok:
            raise result
        return result

    def tools(path: Any) -> Any:
        return remembered(("tools", str(path)), lambda: load_tools(path))

    def convert(config: Any, dataclass_type: Any = None) -> Any:
        return remembered(_memo_key(config, dataclass_type), lambda: original(config, dataclass_type))

    verl_config.omega_conf_to_dataclass, registry.initialize_tools_from_config = convert, tools
    try:
        yield
    finally:
        verl_config.omega_conf_to_dataclass, registry.initialize_tools_from_config = original, load_tools


class VerlStartUp:
    """verl's own checks of a config before and at the first step, as the installed version makes them."""

    def __init__(self, stack: Any, minor: str) -> None:
        self.stack, self.minor = stack, minor

    def verdict(self, cfg: DictConfig) -> str | None:
        """The first check that refuses ``cfg`` (its name and message), None when all pass."""
        from recipes.launch.planning.compose import quiet

        try:
            steps = self.steps(cfg)
        except Exception as exc:  # noqa: BLE001  (main_ppo reads these keys before anything else)
            return f"config: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        for name, step in steps:
            try:
                with quiet():
                    step()
            except Exception as exc:  # noqa: BLE001  (whatever verl raises: it would stop the run)
                return f"{name}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return None

    def steps(self, cfg: DictConfig) -> list[tuple[str, Callable[[], object]]]:
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.utils import need_critic
        from verl.utils import config as verl_config

        from recipes.launch.planning import compose

        arr = cfg.actor_rollout_ref
        convert = verl_config.omega_conf_to_dataclass
        steps: list[tuple[str, Callable[[], object]]] = [
            # main_ppo.py (0.6.1 TaskRunner.run, 0.9.1 main) before Ray
            ("validate_config", lambda: verl_config.validate_config(cfg, self._reference(cfg), need_critic(cfg))),
            # fsdp_workers.py:592 (0.6.1) / engine_workers.py:651 (0.9.1): the rollout worker's config
            ("RolloutConfig", lambda: convert(arr.rollout)),
            # ray_trainer.py compute_advantage: get_adv_estimator_fn (0.6.1 :270, 0.9.1 :250)
            ("adv estimator", lambda: core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)),
            # dp_actor.py:484 (0.6.1), workers/utils/losses (0.9.1): get_policy_loss_fn
            # from the actor's dataclass, as the actor reads it
            ("policy loss", lambda: core_algos.get_policy_loss_fn(convert(arr.actor).policy_loss.loss_mode)),
            ("rollout class", lambda: self._rollout(convert(arr.rollout))),  # rollout/base.py get_rollout_class
            ("reward manager", lambda: self._reward_manager(cfg)),
            ("agent loop", lambda: self._agent_loop(cfg)),
            ("tracking", lambda: self._tracking(cfg.trainer.logger)),  # utils/tracking.py Tracking.__init__'s assert
            ("kl", lambda: self._kl(cfg)),
            ("reward function", lambda: _required(compose_reward(cfg))),
            ("tools", lambda: self._tools(convert(arr.rollout).multi_turn.tool_config_path)),
        ]
        if self.minor == "0.6" and compose.needs_reference_policy(cfg):  # fsdp_workers.py:834
            steps.append(("ref fsdp_config", lambda: convert(arr.ref.fsdp_config)))
        if self.minor == "0.9":  # v1/trainer_base.py:452, and its trainer class by mode (main_ppo.py:141)
            steps.append(("checkpoint_engine", lambda: convert(arr.rollout.checkpoint_engine)))
            steps.append(("trainer class", lambda: _v1_trainer(cfg.trainer.v1.trainer_mode)))
            steps.append(("V1 trainer constructor", lambda: _v1_constructor(cfg)))
            if OmegaConf.select(cfg, "distillation.enabled"):  # v1/trainer_base.py:431
                steps.append(("distillation", lambda: convert(cfg.distillation)))
        if cfg.data.get("custom_cls", {}).get("path"):  # the dataset class main_ppo imports
            steps.append(("dataset class", lambda: _load_type(cfg.data.custom_cls)))
        return steps

    def _reference(self, cfg: DictConfig) -> bool:
        from recipes.launch.planning import compose

        return compose._needs_reference(cfg, self.stack)  # noqa: SLF001  (main_ppo's own question, per version)

    def _tools(self, path: str | None) -> object:
        """ToolAgentLoop's tools, from the path in the rollout's dataclass (none without one)."""
        from recipes.launch.planning import compose

        return compose._load_tools(path, self.stack) if path else None  # noqa: SLF001

    @staticmethod
    def _rollout(rollout: Any) -> None:
        from verl.workers.rollout import base

        pair = (rollout.name, rollout.mode)
        assert pair in base._ROLLOUT_REGISTRY, f"Rollout {pair[0]} with mode {pair[1]} not found"  # noqa: SLF001

    def _reward_manager(self, cfg: DictConfig) -> object:
        if self.minor == "0.6":  # trainer/ppo/reward.py:139-140
            from verl.workers.reward_manager import get_reward_manager_cls

            return get_reward_manager_cls(cfg.reward_model.get("reward_manager", "naive"))
        from verl.trainer.ppo.reward import resolve_reward_manager_cls  # trainer/ppo/reward.py:89-108

        return resolve_reward_manager_cls(cfg)

    @staticmethod
    def _agent_loop(cfg: DictConfig) -> None:
        """The worker's registry after it loads the run's agent-loop file, and the default name's lookup."""
        from recipes.launch.planning.verl_values import _agent_loops

        name = cfg.actor_rollout_ref.rollout.agent.default_agent_loop
        names = _agent_loops(cfg)
        assert name in names, f"Agent loop {name} not registered, registered agent loops: {names}"

    @staticmethod
    def _tracking(logger: Any) -> None:
        from verl.utils.tracking import Tracking

        backends = [logger] if isinstance(logger, str) else list(logger)
        for backend in backends:
            if backend != "tracking":
                assert backend in Tracking.supported_backend, f"{backend} is not supported"

    @staticmethod
    def _kl(cfg: DictConfig) -> None:
        """verl's KL estimator and controller, run on one-element tensors where verl will run them."""
        import torch
        from verl.trainer.ppo import core_algos

        one = torch.zeros(1)
        if cfg.algorithm.use_kl_in_reward:  # trainer_base.py:158-159 / ray_trainer: controller, apply_kl_penalty
            core_algos.get_kl_controller(cfg.algorithm.kl_ctrl)
            core_algos.kl_penalty(one, one, cfg.algorithm.kl_penalty)
        if cfg.actor_rollout_ref.actor.use_kl_loss:  # the actor's kl loss
            core_algos.kl_penalty(one, one, cfg.actor_rollout_ref.actor.kl_loss_type)


def compose_reward(cfg: DictConfig) -> object:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    return get_custom_reward_fn(cfg)


def _required(value: object) -> object:
    if value is None:
        raise ValueError("no custom reward function")
    return value


def _v1_trainer(mode: str) -> object:
    module = importlib.import_module("verl.trainer.ppo.v1")
    return module.get_trainer_cls(mode)


def _v1_constructor(cfg: DictConfig) -> object:
    """The V1 trainer's own constructor (v1/trainer_base.py:151-169): resume mode, checkpoint callback, KL
    controller, replay buffer and its filter-groups metric; CPU only, no Ray (the subclass's adds the workers)."""
    base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
    trainer = object.__new__(_v1_trainer(cfg.trainer.v1.trainer_mode))  # type: ignore[call-overload]
    base.PPOTrainer.__init__(trainer, cfg)
    return trainer


def _load_type(custom: DictConfig) -> object:
    from verl.utils.import_utils import load_extern_type

    return load_extern_type(custom.path, custom.name)


def kit_verdict(cfg: DictConfig, stack: Any) -> str | None:
    """What the dry run refuses: verl's validation as the kit runs it, its value rules and verl's value sets."""
    from platforms import PROFILES
    from recipes.launch.planning import compose, validate_values, verl_check

    try:
        compose.validate_rl(cfg, stack)
    except compose.ConfigError as exc:
        return f"validate_rl: {str(exc).splitlines()[0]}"
    problems = validate_values.problems(cfg, "rl", PROFILES[HW], {}) + verl_check.check_values(cfg, stack)
    return problems[0] if problems else None


def allowed(label: str) -> str | None:
    """Why a gap may stay, from :data:`ALLOWED`; None when it may not."""
    return next((why for pattern, why in ALLOWED.items() if fnmatch.fnmatchcase(label, pattern)), None)


def run(stack: Any, home: str, *, report: Callable[[str], None] = print) -> Counts:
    """Mutate every leaf of each RL recipe (shared leaves once) and count the verdicts."""
    from recipes.launch.planning import verl_values

    minor = verl_values.installed_minor()
    assert minor in verl_values.SECTIONS, minor
    configs = planned_configs(stack, home)
    oracle, counts, seen = VerlStartUp(stack, minor), Counts(), {}
    with memoised_conversions(stack):
        for name, cfg in configs.items():
            assert oracle.verdict(cfg) is None and kit_verdict(cfg, stack) is None, name
            for index, (path, value) in enumerate(list(leaves(cfg))):
                if seen.get(path, DELETE) == repr(value):
                    continue
                seen[path] = repr(value)
                kinds = mutations(value, index)
                for kind, new in kinds if FULL else [kinds[index % len(kinds)]]:
                    _judge(cfg, path, kind, new, f"{name}:{'.'.join(path)}:{kind}", oracle, stack, counts)
    report(counts.line(stack.name))
    for label in counts.verl_only:
        report(f"  gap: {label}")
    return counts


def _judge(
    cfg: DictConfig, path: tuple[str, ...], kind: str, new: Any, label: str, oracle: VerlStartUp, stack: Any, c: Counts
) -> None:
    with mutated(cfg, path, new):
        verl_says, kit_says = oracle.verdict(cfg), kit_verdict(cfg, stack)
    c.tried += 1
    short = label.split(":", 1)[1]
    if verl_says and kit_says:
        c.both += 1
    elif verl_says:
        (c.allowed if allowed(short) else c.verl_only).append(f"{label} -> verl: {verl_says}")
    elif kit_says:
        c.kit_only.append(f"{label} -> kit: {kit_says}")


#: The issue's own cases: a value verl keeps as a set, typed wrong; each must be refused naming the set.
ISSUE_CASES = (
    ("algorithm.adv_estimator", "grpoo", "grpo"),
    (f"{_ARR}.rollout.name", "vllmm", "vllm"),
    (f"{_ARR}.actor.policy_loss.loss_mode", "vanillla", "vanilla"),
    (f"{_ARR}.actor.ppo_epochs", "two", "an int"),
)


def issue_case_refusals(stack: Any, home: str) -> dict[str, list[str]]:
    """``check_values``' lines for each of :data:`ISSUE_CASES` on the first RL recipe's planned config."""
    from recipes.launch.planning import verl_check

    cfg = planned_configs(stack, home)[RL_RECIPES[0]]
    found = {}
    for key, value, _ in ISSUE_CASES:
        with mutated(cfg, tuple(key.split(".")), value):
            found[f"{key}={value}"] = verl_check.check_values(cfg, stack)
    return found


def check_no_unnamed_gap(stack: Any, home: str) -> None:
    """Every leaf mutated: no mutation verl refuses at start-up passes the dry run, but the named ones."""
    counts = run(stack, home)
    assert counts.both, "no mutation was refused by both: the harness judges nothing"
    assert not counts.verl_only, "\n".join(["gaps (verl refuses, the dry run does not):", *counts.verl_only])


def check_issue_case(stack: Any, home: str, key: str, value: str, named: str) -> None:
    """One of :data:`ISSUE_CASES` is refused in one line naming verl's set and the verl file it comes from."""
    lines = issue_case_refusals(stack, home)[f"{key}={value}"]
    assert lines and lines[0].startswith(f"{key}={value}: verl {stack.name} "), lines
    assert named in lines[0] and "(verl/" in lines[0], lines
