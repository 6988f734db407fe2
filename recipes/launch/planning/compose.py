"""Compose a recipe exactly as verl's entry point will, and run verl's own validation on it — without Ray or a model.

Composition goes through Hydra with the kit's config dir as the primary config path and verl's packaged config dir on
the search path (``hydra.searchpath`` in every recipe), i.e. what ``python -m verl.trainer.main_ppo --config-path
<kit>/recipes/config --config-name <recipe> <overrides>`` does. Hydra composes in struct mode, so a misspelt
override fails here with the message verl would print hours later on a cluster.

Validation is what verl runs before it loads anything (``TaskRunner.run``: ``OmegaConf.resolve`` then
``validate_config`` with the reference-policy and critic flags), plus the dataclass conversions verl does later
(rollout, algorithm) and the loading of the recipe's reward function, dataset class and tool config. verl's SFT
trainer has no validation of its own; its batch-size assertions are among the kit checks
(:mod:`recipes.launch.planning.checks`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import os
import warnings
from collections.abc import Iterator, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from platforms.stacks import Stack
from recipes.launch.planning import reward_key
from recipes.launch.run_inputs.catalog import CONFIG_DIR, Recipe


class ConfigError(Exception):
    """The recipe does not compose or does not validate; the message is verl's/Hydra's, with what failed."""


@contextlib.contextmanager
def no_external_modules() -> Iterator[None]:
    """Import verl here without ``VERL_USE_EXTERNAL_MODULES`` (the fused-kernel patcher): planning builds no model.

    The variable is restored afterwards, so the command the shell then execs still carries it.
    """
    saved = os.environ.pop("VERL_USE_EXTERNAL_MODULES", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["VERL_USE_EXTERNAL_MODULES"] = saved


def _explain(exc: BaseException) -> str:
    """Hydra's message plus its cause (OmegaConf names the offending key there: ``Key 'nn' is not in struct``)."""
    parts = [str(exc).strip()]
    cause = exc.__cause__ or exc.__context__
    while cause is not None and len(parts) < 4:
        text = str(cause).strip()
        if text and text not in parts[-1]:
            parts.append(text)
        cause = cause.__cause__ or cause.__context__
    return "\n".join(parts)


def stack_overrides(recipe: Recipe, stack: Stack) -> list[str]:
    """What makes ``recipe``'s config ``stack``'s: the stack's config-group choices (the recipes' defaults list is
    written for the reference) and, for RL, the reward spec moved to the key the stack's verl reads. Empty on the
    reference, so its commands carry none of them."""
    placed = reward_key.placement(recipe.name, stack) if recipe.phase == "rl" else []
    return [*stack.config_choices, *placed]


def compose(recipe: Recipe, overrides: Sequence[str]) -> DictConfig:
    """The recipe's config with ``overrides`` applied, as verl's ``@hydra.main`` would build it."""
    return _compose(recipe, overrides, hydra_node=False)


def compose_with_choices(recipe: Recipe, overrides: Sequence[str]) -> tuple[DictConfig, dict[str, str]]:
    """:func:`compose`, plus the config-group choices Hydra made (``profile``, ``scale``: a profile's YAML may
    choose the default of another group, as ``profile/cpu.yaml`` picks ``scale=smoke``)."""
    cfg = _compose(recipe, overrides, hydra_node=True)
    choices = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items() if v is not None}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def _compose(recipe: Recipe, overrides: Sequence[str], hydra_node: bool) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with no_external_modules(), initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(
                config_name=recipe.config_name, overrides=list(overrides), return_hydra_config=hydra_node
            )
    except Exception as exc:  # Hydra raises several exception types; all mean "this command would not start"
        raise ConfigError(_explain(exc)) from exc
    finally:
        GlobalHydra.instance().clear()


def resolved(cfg: DictConfig) -> DictConfig:
    """A resolved copy (interpolations evaluated), as verl's TaskRunner resolves its config before using it."""
    out = copy.deepcopy(cfg)
    try:
        OmegaConf.resolve(out)
    except Exception as exc:
        raise ConfigError(f"interpolation failed: {_explain(exc)}") from exc
    return out


def needs_reference_policy(cfg: DictConfig) -> bool:
    """verl builds a reference model iff a KL term is used (main_ppo.TaskRunner.add_ref_policy_worker)."""
    return bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)


def validate_rl(cfg: DictConfig, stack: Stack) -> list[str]:
    """verl's checks on a resolved PPO config, as ``stack``'s verl makes them; returns what was checked, raises
    :class:`ConfigError`."""
    with no_external_modules():
        from verl.trainer.config import AlgoConfig
        from verl.trainer.ppo.reward import get_custom_reward_fn
        from verl.trainer.ppo.utils import need_critic
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.import_utils import load_extern_type
        from verl.workers.config import RolloutConfig

    reward_at = stack.verl.reward_key
    done = []
    steps = [
        (
            "verl validate_config",
            lambda: validate_config(
                cfg, use_reference_policy=_needs_reference(cfg, stack), use_critic=need_critic(cfg)
            ),
        ),
        ("RolloutConfig", lambda: omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout, RolloutConfig)),
        ("AlgoConfig", lambda: omega_conf_to_dataclass(cfg.algorithm, AlgoConfig)),
        ("custom reward function", lambda: _require(get_custom_reward_fn(cfg), f"{reward_at}.path")),
        ("dataset class", lambda: load_extern_type(cfg.data.custom_cls.path, cfg.data.custom_cls.name)),
        ("tool config", lambda: _load_tools(cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path, stack)),
    ]
    for name, step in steps:
        if name == "dataset class" and not cfg.data.custom_cls.get("path"):
            continue
        if name == "tool config" and not cfg.actor_rollout_ref.rollout.multi_turn.get("tool_config_path"):
            continue
        try:
            with quiet():
                step()
        except Exception as exc:
            raise ConfigError(f"{name}: {type(exc).__name__}: {_explain(exc)}") from exc
        done.append(name)
    return done


def _needs_reference(cfg: DictConfig, stack: Stack) -> bool:
    """verl's own answer, asked as the stack's verl takes the question (``VerlFacts.reference_policy_api``): 0.6.1's
    need_reference_policy takes the role map main_ppo builds ("role_map"), 0.9.x's the config ("config")."""
    from verl.trainer.ppo.utils import need_reference_policy

    if stack.verl.reference_policy_api == "role_map":
        from verl.trainer.ppo.ray_trainer import Role

        return need_reference_policy({Role.RefPolicy: None} if needs_reference_policy(cfg) else {})
    return need_reference_policy(cfg)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """verl's loaders print banners and warn about defaults on success; the table says what passed instead."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _require(value: object, key: str) -> object:
    if value is None:
        raise ValueError(f"{key} is not set")
    return value


def _load_tools(path: str, stack: Stack) -> list[str]:
    """Instantiate the tools as verl's ToolAgentLoop will (class import, schema validation, constructor), from the
    stack's tool registry (``VerlFacts.tool_registry_module``: it moved between the releases)."""
    registry = importlib.import_module(stack.verl.tool_registry_module)
    tools = registry.initialize_tools_from_config(path)
    if not tools:
        raise ValueError(f"{path} defines no tools")
    return [tool.name for tool in tools]


def validate_sft(cfg: DictConfig, stack: Stack) -> list[str]:
    """What verl's SFT trainer asserts about its config before training (the batch sizes are kit checks), at the
    stack's keys (platforms/verl_facts.py SFT keys); for the engine-based trainer (``VerlFacts.sft_engine``, verl
    >= 0.7.1) also its engine and optimiser dataclasses, which it builds first (verl/trainer/sft_trainer.py:142-143)."""
    verl = stack.verl
    strategy_key, sp_key, padding_key = (
        verl.sft_key(role) for role in ("strategy", "ulysses_sequence_parallel_size", "use_remove_padding")
    )
    if cfg.data.get("chat_template") is not None:
        raise ConfigError("data.chat_template: verl's SFT trainer rejects it ('not supported yet')")
    strategy = OmegaConf.select(cfg, strategy_key)
    if strategy not in ("fsdp", "fsdp2"):
        raise ConfigError(f"{strategy_key}={strategy}: verl's SFT trainer knows fsdp and fsdp2")
    if OmegaConf.select(cfg, sp_key) > 1 and not OmegaConf.select(cfg, padding_key):
        raise ConfigError(f"{sp_key} > 1 needs {padding_key}=true (verl's SFT trainer)")
    checked = ["verl SFT trainer assertions"]
    if verl.sft_engine:
        checked += _engine_configs(cfg)
    return checked


def _engine_configs(cfg: DictConfig) -> list[str]:
    """verl's FSDPEngineConfig and FSDPOptimizerConfig built from ``cfg`` as its SFT trainer builds them (their
    ``__post_init__`` checks the strategy, dtypes and schedule); no model is loaded."""
    with no_external_modules():
        from verl.utils.config import omega_conf_to_dataclass

    for name in ("engine", "optim"):
        try:
            with quiet():
                omega_conf_to_dataclass(cfg[name])
        except Exception as exc:
            raise ConfigError(f"{name}: {type(exc).__name__}: {_explain(exc)}") from exc
    return ["verl engine and optimiser configs"]
