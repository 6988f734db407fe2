"""What differs between the verl releases the kit's stacks are built on: where each reads what the kit sets.

One :class:`VerlFacts` per verl release, held by its stack (:mod:`platforms.stacks`): the reward function's key, the
SFT trainer's module, config and key names, the API of ``need_reference_policy``, where the tool registry lives, and
whether verl picks its device from a platform registry. Code that needs one of these asks the stack it was handed
(``plan.stack.verl``); nothing else branches on a verl version or a stack's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class VerlFacts:
    """What the kit must do differently on this verl: the keys and entry points its recipes name."""

    reward_key: str  # where verl's PPO trainer reads the custom reward function
    ignored_reward_key: str  # the other stack's key: verl ignores it here without a word
    sft_module: str  # `python -m <this>` runs the SFT trainer
    sft_config: str  # the SFT trainer's config file in verl.trainer.config
    # verl's need_reference_policy(...) takes the role map main_ppo builds ("role_map", 0.6.1) or the config ("config")
    reference_policy_api: str
    tool_registry_module: str  # where initialize_tools_from_config lives
    has_platform_registry: (
        bool  # verl.plugin.platform: the device comes from VERL_PLATFORM (platforms/verl_platform.py)
    )
    sft_engine: bool  # the engine-based SFT trainer, which builds engine/optim dataclasses before training
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
# "custom_reward_function")); SFT is fsdp_sft_trainer; need_reference_policy(role_worker_mapping)
# (verl/trainer/ppo/utils.py); the tool registry is verl/tools/utils/tool_registry.py; no platform registry (only
# verl/utils/device.py's name checks).
VERL_061 = VerlFacts(
    reward_key="custom_reward_function",
    ignored_reward_key="reward.custom_reward_function",
    sft_module="verl.trainer.fsdp_sft_trainer",
    sft_config="sft_trainer",
    reference_policy_api="role_map",
    tool_registry_module="verl.tools.utils.tool_registry",
    has_platform_registry=False,
    sft_engine=False,
    sft_keys=_SFT_KEYS_061,
)
# verl 0.9.1: only reward.custom_reward_function (verl/trainer/ppo/reward.py:70; the migration was removed in verl
# #6710, #7331 closed unmerged); SFT is the engine-based sft_trainer with sft_trainer_engine.yaml (fsdp_sft_trainer
# removed in v0.7.1, #5382), which builds its engine and optimiser configs first (verl/trainer/sft_trainer.py:142-143);
# need_reference_policy(config) (verl/trainer/ppo/utils.py); verl/tools/tool_registry.py; verl.plugin.platform.
VERL_091 = VerlFacts(
    reward_key="reward.custom_reward_function",
    ignored_reward_key="custom_reward_function",
    sft_module="verl.trainer.sft_trainer",
    sft_config="sft_trainer_engine",
    reference_policy_api="config",
    tool_registry_module="verl.tools.tool_registry",
    has_platform_registry=True,
    sft_engine=True,
    sft_keys=_SFT_KEYS_091,
)
