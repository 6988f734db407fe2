"""What differs between the verl releases the kit's stacks are built on: where each reads what the kit sets.

One :class:`VerlFacts` per verl release, held by its stack (:mod:`platforms.stacks`): the reward function's key, the
SFT trainer's module, config and key names, the API of ``need_reference_policy``, where the tool registry lives,
whether verl picks its device from a platform registry, the checkpoint layout its trainers write
(:class:`CheckpointLayout`), the bugs of its own the kit's checks guard against (:class:`VerlBug`) and the keys it
keeps or accepts but never reads (``legacy_keys``). Code that needs one of these asks the stack it was handed
(``plan.stack.verl``); nothing else branches on a verl version or a stack's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The folder of checkpoint step N under ``trainer.default_local_dir`` (both trainers of both releases).
_STEP_DIR = re.compile(r"global_step_(\d+)")
#: The folder in global_step_N that the RL trainers of both releases save the policy in.
RL_ROLE = "actor"


@dataclass(frozen=True)
class CheckpointLayout:
    """What one trainer of a verl release writes under ``trainer.default_local_dir``: the names the launcher's
    restarts and resume hints, the hand-offs and ``retool-doctor --ckpt-dir`` read, and what makes a step complete.

    Both releases write the tracker last (it names the newest finished save), one ``global_step_N`` folder per save,
    and in the folder that holds the weights (``role``: the RL trainers' ``actor/``, the SFT trainers' step folder
    itself) the FSDP checkpoint manager's files: ``fsdp_config.json`` (rank 0, after its own shards), per rank
    ``model_/optim_/extra_state_world_size_W_rank_R.pt``, and ``huggingface/`` (config and tokenizer). They differ in
    the dataloader state (``loader_state``), written after the shards and before the tracker.
    """

    role: str  # the weights' folder inside global_step_N ("" = the step folder itself)
    loader_state: str  # the dataloader state of data-parallel rank 0, in global_step_N
    tracker: str = "latest_checkpointed_iteration.txt"
    fsdp_config: str = "fsdp_config.json"
    hf_config: str = "huggingface/config.json"
    #: the shard kinds of checkpoint.save_contents' default ['model', 'optimizer', 'extra'], as the files name them
    shard_kinds: tuple[str, ...] = ("model", "optim", "extra_state")
    #: whether ``resume_mode=auto`` passes over an incomplete checkpoint to the newest complete one, and refuses to
    #: start over when none is (the PPO trainers with the kit's series: patches/0017 on 0.6.1, patches/0.9.1/0006 on
    #: 0.9.1); otherwise the trainer follows the tracker (verl's find_latest_ckpt_path, verl/utils/checkpoint/
    #: checkpoint_manager.py:222-252 in 0.9.1, the SFT trainers of both): a step folder that is gone means step 0
    skips_incomplete: bool = False

    def step_dir(self, ckpt_dir: Path, step: int) -> Path:
        return ckpt_dir / f"global_step_{step}"

    def weights_dir(self, step_dir: Path) -> Path:
        return step_dir / self.role if self.role else step_dir

    @staticmethod
    def shard(kind: str, world: int | str, rank: int | str) -> str:
        return f"{kind}_world_size_{world}_rank_{rank}.pt"

    def saved_steps(self, ckpt_dir: Path) -> list[int]:
        """The ``global_step_N`` folders in ``ckpt_dir``, oldest first (by N: global_step_10 after global_step_9)."""
        try:
            names = [p.name for p in ckpt_dir.iterdir() if p.is_dir()]
        except OSError:
            return []
        return sorted(int(m.group(1)) for m in map(_STEP_DIR.fullmatch, names) if m)

    def tracker_step(self, ckpt_dir: Path) -> int | None:
        """The step the tracker names; None when it is missing or holds no number (a kill mid-write: unpatched 0.9.1's
        V1 trainer writes it with a plain ``open(..., "w")``, verl/trainer/ppo/v1/trainer_base.py:1021-1025, which
        patches/0.9.1/0006 makes atomic; the SFT trainers and the reference's series write it atomically)."""
        try:
            return int((ckpt_dir / self.tracker).read_text().strip())
        except (OSError, ValueError):
            return None

    def world_size(self, step_dir: Path) -> int | None:
        try:
            return int(json.loads((self.weights_dir(step_dir) / self.fsdp_config).read_text())["world_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def missing(self, step_dir: Path, kinds: tuple[str, ...] | None = None) -> list[str]:
        """What a resume (or, with ``kinds=("model",)``, a merge) reads from ``step_dir`` that is not there, as paths
        relative to it; empty when the step is complete. The files each rank writes, for the world size in
        fsdp_config.json, then the dataloader state (a resume) or huggingface/config.json (a merge)."""
        if not step_dir.is_dir():
            return [f"{step_dir.name}/"]
        weights, prefix = self.weights_dir(step_dir), f"{self.role}/" if self.role else ""
        if not weights.is_dir():
            return [prefix]
        world = self.world_size(step_dir)
        if world is None:
            return [prefix + self.fsdp_config]
        wanted = [self.shard(kind, world, rank) for kind in (kinds or self.shard_kinds) for rank in range(world)]
        wanted += [self.hf_config] if kinds else []
        lost = [prefix + name for name in wanted if not (weights / name).is_file()]
        if not kinds and not (step_dir / self.loader_state).is_file():
            lost.append(self.loader_state)
        return lost

    def complete_steps(self, ckpt_dir: Path) -> list[int]:
        """The steps whose folder holds everything a resume reads, oldest first (an RL run's rotated steps keep
        their data.pt but lose ``actor/``: not complete)."""
        return [s for s in self.saved_steps(ckpt_dir) if not self.missing(self.step_dir(ckpt_dir, s))]

    def resume_point(self, ckpt_dir: Path) -> tuple[int | None, str]:
        """(the step ``trainer.resume_mode=auto`` starts from, None for step 0; why that is not simply the
        tracker's complete step, "" when it is), by this trainer's rule (:attr:`skips_incomplete`)."""
        named = self.tracker_step(ckpt_dir)
        tracker = ckpt_dir / self.tracker
        damaged = "the tracker holds no step number" if tracker.exists() and named is None else ""
        if self.skips_incomplete:
            steps = [s for s in self.complete_steps(ckpt_dir) if named is None or s <= named]
            found = steps[-1] if steps else None
            if found is None and (self.saved_steps(ckpt_dir) or tracker.exists()):
                return None, "no complete checkpoint: the trainer refuses to start over (resume_mode=disable does)"
            if named is None or found == named:
                return found, damaged
            lost = self.missing(self.step_dir(ckpt_dir, named))
            why = (
                "does not exist"
                if lost == [f"global_step_{named}/"]
                else f"is incomplete (missing {', '.join(lost[:3])})"
            )
            return found, f"global_step_{named}, the tracker's, {why}"
        if named is None:
            return None, damaged and f"{damaged}: the trainer fails reading it"
        lost = self.missing(self.step_dir(ckpt_dir, named))
        if lost == [f"global_step_{named}/"]:
            return None, f"global_step_{named}, the tracker's, does not exist: the trainer starts from scratch"
        if lost:
            return named, f"global_step_{named} is incomplete (missing {', '.join(lost[:3])}): the trainer loads it"
        return named, ""


@dataclass(frozen=True)
class VerlBug:
    """A bug of one verl release that a kit check refuses a setting for: the check applies to the stacks whose verl
    has it (:attr:`VerlFacts.bugs`), so a fixed release is not refused a setting by another release's bug."""

    where: str  # the verl lines that have it, as the refusal cites them
    upstream: str  # the verl issue and its fix


#: :attr:`VerlFacts.bugs` keys. With ``rollout.free_cache_engine=False`` the agent loop never wakes the rollout, and
#: waking it is what syncs the actor's weights: every step samples from the initial model.
WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE = "weights_unsynced_without_free_cache_engine"
#: The fused log-prob kernels roll the labels on each Ulysses SP shard: the last token of every shard is scored against
#: the wrong label.
FUSED_SP_LABELS = "fused_kernels_roll_labels_per_sp_shard"


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
    rl_checkpoint: CheckpointLayout  # what the PPO trainer saves under trainer.default_local_dir
    sft_checkpoint: CheckpointLayout  # what the SFT trainer saves there
    #: Ray CPUs main_ppo's TaskRunner actor holds for the whole run (besides the trainer's bundles and the rollout's
    #: servers): the launcher's Ray CPU count (recipes/launch/sizing/ray_cpus.py) and the two-node test's head slots
    #: (docker/two_node.py) add it. A plain ``@ray.remote`` actor holds none once running.
    task_runner_cpus: int
    #: What makes a rollout server actor admit ``max(1000, max_num_seqs + 16)`` generate calls at once, as the dry
    #: run's "in flight" row credits it (the kit's patch, or verl's own line).
    server_admits_by: str
    #: With vLLM's chunked prefill off, verl raises ``rollout.max_num_batched_tokens`` to max_model_len before vLLM sees
    #: it (0.9.1: vllm_async_server.py:1123-1129): the step the dry run checks against ``max_num_seqs``.
    raises_batched_tokens_to_model_len: bool = False
    # the kit's SFT key names (SFT_ROLES) -> this verl's key, as an override spells it ('+'/'++': not in verl's yaml)
    sft_keys: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: This verl's bugs that a kit check guards against (keys: WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE, FUSED_SP_LABELS).
    bugs: Mapping[str, VerlBug] = field(default_factory=dict, compare=False)
    #: phase ("rl", "sft") -> {a key this verl never reads (with everything under it): the key it reads instead, "" for
    #: none}: legacy config it keeps for another entry point, or another release's key that '+' would add unread.
    legacy_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)

    def checkpoint(self, phase: str) -> CheckpointLayout:
        """The checkpoint layout of this verl's ``phase`` trainer ("rl" or "sft")."""
        return self.rl_checkpoint if phase == "rl" else self.sft_checkpoint

    def sft_key(self, role: str) -> str:
        """Where this verl's SFT config holds ``role`` (one of :data:`SFT_ROLES`), as ``OmegaConf.select`` reads it."""
        return self.sft_keys[role].lstrip("+")

    def sft_override(self, role: str, value: object) -> str:
        """``<key>=<value>`` setting ``role`` on this verl (the key's '+' prefix kept where verl's yaml lacks it)."""
        return f"{self.sft_keys[role]}={value}"

    def legacy_replacement(self, phase: str, key: str) -> str | None:
        """The key this verl reads for ``key``, a legacy key of ``phase`` (or under one): "" when it has none; None
        when ``key`` is not legacy. The most specific row wins; a key under a row that moves a node of the same name
        (``sandbox_fusion`` -> ``reward.sandbox_fusion``) keeps its tail, under any other row it has no counterpart."""
        table = self.legacy_keys.get(phase, {})
        rows = [old for old in table if key == old or key.startswith(f"{old}.")]
        if not rows:
            return None
        old = max(rows, key=len)
        new, tail = table[old], key[len(old) :]
        if tail and new.rpartition(".")[2] != old.rpartition(".")[2]:
            return ""
        return new and new + tail

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
    "checkpoint_contents",
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
    "checkpoint_contents": "trainer.checkpoint.save_contents",  # :95 (read at verl/trainer/fsdp_sft_trainer.py:602)
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
    # kit: verl 0.9.1 sft_trainer_engine.yaml:54 (CheckpointConfig, read at verl/trainer/sft_trainer.py:145)
    "checkpoint_contents": "checkpoint.save_contents",
}


#: The legacy keys (:attr:`VerlFacts.legacy_keys`) of verl 0.9.1's PPO trainer: verl/trainer/config/
#: legacy_reward_impl.yaml, which ppo_trainer.yaml:33-34 keeps "for backward compatibility", where verl's own
#: migrate_legacy_reward_impl (verl/experimental/reward_loop/reward_loop.py:39-90) moves them. Only the fully async
#: entry calls it (verl/experimental/fully_async_policy/fully_async_main.py:237); main_ppo never does, so there they
#: are read by nothing. custom_reward_function is VerlFacts.ignored_reward_key's rule (recipes/launch/planning/
#: reward_key.py). tests/stack091/test_stack_rules_091.py holds the table to the migration.
_LEGACY_RL_091 = {
    "reward_model": "reward.reward_model",  # :62-66 (enable, enable_resource_pool, n_gpus_per_node, nnodes)
    "reward_model.num_workers": "reward.num_workers",  # :44-46
    "reward_model.reward_manager": "reward.reward_manager.name",  # :49-51
    "reward_model.reward_loop_source": "reward.reward_manager.source",  # :52-53
    "reward_model.reward_loop_module_path": "reward.reward_manager.module.path",  # :54
    "reward_model.reward_loop_class_name": "reward.reward_manager.module.name",  # :55
    "reward_model.model": "",  # :67-68 moves model.path only: external_lib and trust_remote_code have no counterpart
    "reward_model.model.path": "reward.reward_model.model_path",  # :67-68
    "reward_model.reward_kwargs": "reward.reward_kwargs",  # :69-72 (read by reward_manager/dapo.py:33-35)
    "reward_model.rollout": "reward.reward_model.rollout",  # :73-77
    "sandbox_fusion": "reward.sandbox_fusion",  # :79-82 (read at verl/trainer/ppo/reward.py:135)
}
#: The legacy keys of verl 0.9.1's SFT trainer: verl 0.6.1's SFT keys, which sft_trainer_engine.yaml does not have, so
#: only '+' adds them, and nothing reads them: each role's 0.6.1 key -> its 0.9.1 key (the two tables above), and the
#: multi-turn switch, which 0.9.1 has none of: its SFT trainer always builds MultiTurnSFTDataset unless data.custom_cls
#: names another class (verl/trainer/sft_trainer.py:469-479), reading the columns at data.messages_key/tools_key.
_LEGACY_SFT_091 = {
    **{old: _SFT_KEYS_091[role].lstrip("+") for role, old in _SFT_KEYS_061.items() if _SFT_KEYS_091[role] != old},
    "data.multiturn": "data.messages_key",
    "data.multiturn.enable": "data.messages_key",
    "data.multiturn.enable_thinking_key": "data.enable_thinking_key",  # kit: verl 0.9.1 sft_trainer_engine.yaml:28
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
    # build/verl (0.6.1 + the series) verl/trainer/ppo/ray_trainer.py:941 (actor/), :978 (data.pt);
    # verl/trainer/fsdp_sft_trainer.py:574 (the SFT trainer's data.pt, rank 0)
    # (ray_trainer.py _find_resume_checkpoint, patch 0017, skips incomplete steps; the SFT trainer follows the tracker)
    rl_checkpoint=CheckpointLayout(role=RL_ROLE, loader_state="data.pt", skips_incomplete=True),
    sft_checkpoint=CheckpointLayout(role="", loader_state="data.pt"),
    # kit: verl 0.6.1 verl/trainer/main_ppo.py:77, ray.remote(num_cpus=1)(TaskRunner)
    task_runner_cpus=1,
    # patches/0028 (verl PR #5402): RolloutReplica.max_concurrency; unpatched 0.6.1 admits Ray's 1000
    server_admits_by="patch 0028",
    sft_keys=_SFT_KEYS_061,
    bugs={
        WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE: VerlBug(
            "verl/experimental/agent_loop/agent_loop.py:759-762", "verl issue #4147, fixed upstream by PR #4248"
        ),
        # verl/models/transformers/dense_common.py:109-112 rolls input_ids on the local shard; dp_actor.py:175-190
        # passes no labels to the fused forward
        FUSED_SP_LABELS: VerlBug("verl/models/transformers/dense_common.py:109-112", "verl #3512/#6068"),
    },
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
    # kit: verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:972 (actor/), :998 (data.pt), _find_resume_checkpoint
    # (patches/0.9.1/0006) skips incomplete steps; the engine SFT trainer's CheckpointHandler writes one dataloader
    # state per data-parallel rank, data_{dp_rank}.pt (verl/utils/checkpoint/checkpoint_handler.py:117-123): rank 0's
    # is always there; it follows the tracker (checkpoint_handler.py:222-234)
    rl_checkpoint=CheckpointLayout(role=RL_ROLE, loader_state="data.pt", skips_incomplete=True),
    sft_checkpoint=CheckpointLayout(role="", loader_state="data_0.pt"),
    # kit: verl 0.9.1 verl/trainer/main_ppo.py:102, a plain @ray.remote TaskRunnerV1 (trainer.use_v1, :183-184): on
    # two containers with 3 + 2 Ray CPUs Ray put both trainer ranks and both vLLM servers on the head (docs/images.md)
    task_runner_cpus=0,
    # kit: verl 0.9.1 verl/workers/rollout/replica.py:257-260 (upstream, verl PR #5402)
    server_admits_by="verl's RolloutReplica.max_concurrency",
    raises_batched_tokens_to_model_len=True,
    sft_keys=_SFT_KEYS_091,
    # Neither of 0.6.1's bugs. The V1 sync trainer updates the weights after every step
    # (verl/trainer/ppo/v1/trainer_sync.py:35-38) and the colocated (naive) sync pushes them whatever
    # free_cache_engine says (verl/workers/engine_workers.py:804-806; only the wake-ups at :781-782, :818-823 depend on
    # it). The FSDP engine rolls the labels over the whole sequence before the SP split and hands them to the fused
    # forward (verl/workers/engine/fsdp/transformer_impl.py:1204, :1237-1241, :1318-1328), which uses them as they are
    # (verl/models/transformers/dense_common.py:110-114).
    bugs={},
    legacy_keys={"rl": _LEGACY_RL_091, "sft": _LEGACY_SFT_091},
)
