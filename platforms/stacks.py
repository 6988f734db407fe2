"""The kit's two stacks, as one notion: which verl, which vLLM family, and what changes for the kit between them.

A *stack* is a named set of pins (``pins.env``): the reference stack ``0.6.1`` (verl 0.6.1, vLLM/vllm-ascend 0.11.0,
the default; verl-recipe's retool requires it and the published ReTool numbers come from it) and the current stack
``0.9.1`` (verl 0.9.1, vLLM/vllm-ascend 0.23.0). ``pins.env`` holds the reference's keys plain and the current
stack's as ``V091_<KEY>`` overrides; :func:`platforms.pins.for_stack` merges them, so each fact is written once.

Which stack a process serves (:func:`active`): ``KIT_STACK`` when set (every entry point's ``--stack`` sets it, the
shell scripts export it), else the stack whose verl is installed in this interpreter, else the default. The verl
facts that differ between the stacks (where the reward function is read, the SFT entry point) live here and nowhere
else; ``platforms.pins.get`` reads the active stack's pins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from platforms import pins
from platforms.cli_errors import UsageError

KIT_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = pins.STACK_ENV


@dataclass(frozen=True)
class VerlFacts:
    """What the kit must do differently on this verl: the keys and entry points its recipes name."""

    reward_key: str  # where verl's PPO trainer reads the custom reward function
    ignored_reward_key: str  # the other stack's key: verl ignores it here without a word
    sft_module: str  # `python -m <this>` runs the SFT trainer
    sft_config: str  # the SFT trainer's config file in verl.trainer.config
    # the kit's SFT key names (SFT_ROLES) -> this verl's key, as an override spells it ('+'/'++': not in verl's yaml)
    sft_keys: Mapping[str, str] = field(default_factory=dict, compare=False)

    def sft_key(self, role: str) -> str:
        """Where this verl's SFT config holds ``role`` (one of :data:`SFT_ROLES`), as ``OmegaConf.select`` reads it."""
        return self.sft_keys[role].lstrip("+")

    def sft_override(self, role: str, value: object) -> str:
        """``<key>=<value>`` setting ``role`` on this verl (the key's '+' prefix kept where verl's yaml lacks it)."""
        return f"{self.sft_keys[role]}={value}"

    def reward_override(self, setting: str, value: object) -> str:
        """``<reward key>.<setting>=<value>``: a setting of the custom reward function (``path``, ``name``,
        ``reward_kwargs.<k>``) where this verl reads it, so code that sets one never names a stack's key."""
        return f"{self.reward_key}.{setting}={value}"


#: The kit's names for the SFT settings whose key verl renamed between the stacks. The first six are the recipes'
#: stack-neutral ``sft:`` node (recipes/config/retool_*_sft.yaml), which recipes/config/verl_sft/<stack>.yaml places
#: at the keys below (tests/stack091/test_sft_recipes_091.py holds the two equal); the rest the platform layer
#: (platforms/base.py) and the dry-run report set or read.
SFT_ROLES = (
    "model_path",
    "strategy",
    "ulysses_sequence_parallel_size",
    "use_remove_padding",
    "messages_key",
    "tools_key",
    "device",
    "attn_implementation",
    "mixed_precision",
    "lr_scheduler",
)
#: The recipes' neutral node: ``sft.<role>`` for the first six roles, on either stack.
SFT_NODE = "sft"
_SFT_KEYS_061 = {
    # verl 0.6.1 verl/trainer/config/sft_trainer.yaml, with the kit's patch series (attn_implementation :57, patch
    # 0002; mixed_precision :39, patch 0013)
    "model_path": "model.partial_pretrain",  # :34
    "strategy": "model.strategy",  # :54
    "ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",  # :65
    "use_remove_padding": "use_remove_padding",  # :66
    "messages_key": "data.multiturn.messages_key",  # :21
    "tools_key": "data.multiturn.tools_key",  # :22
    "device": "trainer.device",  # :99
    "attn_implementation": "model.attn_implementation",
    "mixed_precision": "model.fsdp_config.mixed_precision",
    "lr_scheduler": "optim.lr_scheduler",  # :64
}
_SFT_KEYS_091 = {
    # kit: verl 0.9.1 model/hf_model.yaml:10 (HFModelConfig.path)
    "model_path": "model.path",
    # kit: verl 0.9.1 engine/fsdp.yaml:79 (FSDPEngineConfig.strategy, verl/workers/config/engine.py:298)
    "strategy": "engine.strategy",
    # kit: verl 0.9.1 engine/fsdp.yaml:45 (read at verl/workers/engine/fsdp/transformer_impl.py:148)
    "ulysses_sequence_parallel_size": "engine.ulysses_sequence_parallel_size",
    # kit: verl 0.9.1 model/hf_model.yaml:40 (read at verl/trainer/sft_trainer.py:344)
    "use_remove_padding": "model.use_remove_padding",
    # kit: verl 0.9.1 sft_trainer_engine.yaml:26-27 (verl/utils/dataset/multiturn_sft_dataset.py:103, 109)
    "messages_key": "data.messages_key",
    "tools_key": "data.tools_key",
    # kit: verl 0.9.1 sft_trainer_engine.yaml:81 (verl/trainer/sft_trainer.py:75)
    "device": "trainer.device",
    # kit: verl 0.9.1 HFModelConfig reads override_config.attn_implementation (verl/workers/config/model.py:185);
    # '++': override_config is {} in model/hf_model.yaml:31
    "attn_implementation": "++model.override_config.attn_implementation",
    # kit: verl 0.9.1 FSDPEngineConfig.mixed_precision (verl/workers/config/engine.py:291, read at
    # verl/workers/engine/fsdp/transformer_impl.py:391-395 and for the autocast at :1555); '++': not in engine/fsdp.yaml
    "mixed_precision": "++engine.mixed_precision",
    # kit: verl 0.9.1 optim/fsdp.yaml:39 (FSDPOptimizerConfig.lr_scheduler_type, verl/workers/config/optimizer.py:111)
    "lr_scheduler": "optim.lr_scheduler_type",
}


# verl 0.6.1: main_ppo reads the top-level key (verl/trainer/ppo/reward.py:get_custom_reward_fn, config.get(
# "custom_reward_function")); SFT is fsdp_sft_trainer. verl 0.9.1: only reward.custom_reward_function
# (verl/trainer/ppo/reward.py:70; the migration was removed in verl #6710, #7331 closed unmerged); SFT is the
# engine-based sft_trainer with sft_trainer_engine.yaml (fsdp_sft_trainer removed in v0.7.1, #5382).
_VERL_FACTS = {
    "0.6.1": VerlFacts(
        "custom_reward_function",
        "reward.custom_reward_function",
        "verl.trainer.fsdp_sft_trainer",
        "sft_trainer",
        _SFT_KEYS_061,
    ),
    "0.9.1": VerlFacts(
        "reward.custom_reward_function",
        "custom_reward_function",
        "verl.trainer.sft_trainer",
        "sft_trainer_engine",
        _SFT_KEYS_091,
    ),
}


#: The hidden size of the smoke's tiny random Qwen3 (head_dim = hidden / 4) per stack: vLLM 0.23's CPU attention takes
#: head sizes 32, 64, 80, ... only (vllm/v1/attention/backends/cpu_attn.py:62-63, CPU_ATTN.get_supported_head_sizes),
#: so 0.9.1's smoke model is 128 wide (head_dim 32); vLLM 0.11's CPU path runs the 64-wide model (head_dim 16) that
#: the reference's measurements were taken on (docs/measurements/fast_pipeline.yaml).
_TINY_HIDDEN_SIZE = {"0.6.1": 64, "0.9.1": 128}


@dataclass(frozen=True)
class Stack:
    """One stack: its name (the verl version it is built on), its pins, and where its venv and verl tree live."""

    name: str
    pins: dict[str, str]

    @property
    def is_default(self) -> bool:
        return self.name == default_name()

    @property
    def venv(self) -> Path:
        """The stack's venv at the repo root: ``.venv`` for the default stack, ``.venv-<name>`` for the other."""
        return KIT_ROOT / (".venv" if self.is_default else f".venv-{self.name}")

    @property
    def verl_tree(self) -> Path:
        return KIT_ROOT / "build" / ("verl" if self.is_default else f"verl-{self.name}")

    @property
    def patch_dir(self) -> Path:
        """``patches/`` keeps meaning the reference series (`git am patches/*.patch`); the other lives beside it."""
        return KIT_ROOT / "patches" if self.is_default else KIT_ROOT / "patches" / self.name

    @property
    def verl(self) -> VerlFacts:
        return _VERL_FACTS[self.name]

    @property
    def tiny_hidden_size(self) -> int:
        """The hidden size of the main job's tiny model (``--fast``) on this stack's rollout engine."""
        return _TINY_HIDDEN_SIZE[self.name]

    def pin(self, key: str) -> str:
        if key not in self.pins:
            raise KeyError(f"{key} is not pinned for stack {self.name} in pins.env")
        return self.pins[key]

    def describe(self) -> str:
        """One line for tables and errors: which verl, which vLLM, which CANN."""
        return (
            f"stack {self.name}: verl {self.pin('VERL_VERSION')}, vLLM {self.pin('VLLM_VERSION')}"
            f" (vllm-ascend {self.pin('VLLM_ASCEND_VERSION')}, CANN {self.pin('CANN_VERSION')})"
        )


def names() -> tuple[str, ...]:
    return pins.stack_names()


def default_name() -> str:
    return pins.default_stack()


@cache
def get(name: str) -> Stack:
    """The stack called ``name``; a name that is not one of pins.env's KIT_STACKS is a usage error."""
    if name not in names():
        raise UsageError(f"unknown stack {name!r}", f"choose one of {', '.join(names())} (pins.env KIT_STACKS)")
    return Stack(name, pins.for_stack(name))


def active() -> Stack:
    """The stack this process serves: ``KIT_STACK``, else the installed verl's, else the default."""
    return get(pins.active_stack())


def select(name: str | None) -> Stack:
    """An entry point's ``--stack``: check it and make it this process's (and its children's) stack."""
    stack = get(name) if name else active()
    os.environ[ENV_VAR] = stack.name
    return stack


def installed_problem(stack: Stack) -> str | None:
    """Why this interpreter cannot serve ``stack``: its verl is another version (None when it matches, or when no
    verl is installed: what needs verl then fails on its own)."""
    version = pins.installed_verl()
    if version is None or version.split("+")[0] == stack.pin("VERL_VERSION"):
        return None
    import sys

    return (
        f"stack {stack.name} needs verl {stack.pin('VERL_VERSION')}, but this Python ({sys.executable}) has "
        f"verl {version}"
    )


def venv_hint(stack: Stack) -> str:
    """How to get an interpreter for ``stack``: its venv (built on first use by the test command) or its image."""
    return (
        f"use the stack's venv {stack.venv.name}/ (bash scripts/test.sh --stack {stack.name} --venv builds it), "
        f"or the image of docker/build.sh --stack {stack.name}"
    )


def select_from_argv(argv: list[str]) -> Stack:
    """:func:`select` from a ``--stack NAME`` / ``--stack=NAME`` among ``argv``, before the parser is built: help texts
    that list images and tags then show the chosen stack's."""
    for i, word in enumerate(argv):
        if word == "--stack" and i + 1 < len(argv):
            return select(argv[i + 1])
        if word.startswith("--stack="):
            return select(word.split("=", 1)[1])
    return select(None)
