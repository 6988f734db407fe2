"""The kit's own pre-flight checks: what verl 0.6.1 would only find out after Ray, torchrun or vLLM started.

Each check names the keys involved and the rule, so a failed dry run says what to change. They cover the layout
(devices vs sequence/tensor parallelism vs heads), the batch arithmetic verl asserts or silently floors inside its
workers, one known-wrong combination (fused log-probs with Ulysses SP in verl 0.6.1) and the reward's keyword
arguments (the kit's ``compute_score`` takes ``**kwargs`` for verl's sake, so a misspelt shaping knob would otherwise
be ignored without a word).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from platforms import HardwareProfile, applied
from platforms.base import RL_ENFORCE_EAGER_KEY, RL_JOB_ENV_KEY
from recipes.launch import trace
from recipes.launch.catalog import ModelFacts
from recipes.retool import REWARD_PATH


@dataclass(frozen=True)
class Heads:
    """Attention heads of the model actually trained, and where the numbers came from."""

    attention: int
    kv: int
    source: str


def model_heads(model_path: str | None, fallback: ModelFacts) -> Heads:
    """Head counts from ``<model>/config.json`` when readable, else the recipe's base model (a dry run elsewhere)."""
    if model_path:
        config = Path(model_path) / "config.json"
        try:
            data = json.loads(config.read_text())
            attention = int(data["num_attention_heads"])
            return Heads(attention, int(data.get("num_key_value_heads") or attention), str(config))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return Heads(fallback.num_attention_heads, fallback.num_key_value_heads, f"{fallback.hf_name} (recipe table)")


def _divides_heads(size: int, heads: Heads, what: str, key: str) -> list[str]:
    errors = []
    if heads.attention % size:
        errors.append(f"{key}={size}: {what} must divide the {heads.attention} attention heads ({heads.source})")
    if heads.kv % size and size % heads.kv:
        errors.append(
            f"{key}={size}: {what} must divide the {heads.kv} KV heads or be a multiple of them ({heads.source})"
        )
    return errors


def world_size(cfg: DictConfig) -> int:
    """Ranks of the job, nodes x devices per node: the one formula the checks, the budget (recipes.launch.budget),
    the memory estimate (recipes.launch.memory) and the Ray CPU count (recipes.launch.ray_cpus) share."""
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def check_sft(cfg: DictConfig, heads: Heads) -> list[str]:
    """verl's SFT trainer: the device mesh is (dp, sp) over all ranks and the batch is split by dp (its asserts)."""
    errors = []
    world = world_size(cfg)
    sp = int(cfg.ulysses_sequence_parallel_size)
    batch, micro = int(cfg.data.train_batch_size), int(cfg.data.micro_batch_size_per_gpu)
    if world % sp:
        return [f"ulysses_sequence_parallel_size={sp} must divide the {world} ranks (trainer.nnodes x n_gpus_per_node)"]
    dp = world // sp
    if batch % dp:
        errors.append(f"data.train_batch_size={batch} must be divisible by the data-parallel size {dp} ({world}/{sp})")
    elif (batch // dp) % micro:
        errors.append(
            f"data.train_batch_size / dp = {batch // dp} must be divisible by data.micro_batch_size_per_gpu={micro}"
        )
    if sp > 1:
        errors += _divides_heads(sp, heads, "Ulysses SP", "ulysses_sequence_parallel_size")
    return errors


def check_rl(cfg: DictConfig, heads: Heads) -> list[str]:
    """Layout and batch arithmetic of verl's FSDP workers, vLLM replicas and agent loop for a GRPO run."""
    errors = []
    arr = cfg.actor_rollout_ref
    world, per_node = world_size(cfg), int(cfg.trainer.n_gpus_per_node)
    sp, tp = int(arr.actor.ulysses_sequence_parallel_size), int(arr.rollout.tensor_model_parallel_size)
    batch, n, mini = int(cfg.data.train_batch_size), int(arr.rollout.n), int(arr.actor.ppo_mini_batch_size)
    if world % sp:
        errors.append(f"actor.ulysses_sequence_parallel_size={sp} must divide the {world} devices")
    if per_node % tp:
        errors.append(f"rollout.tensor_model_parallel_size={tp} must divide the {per_node} devices of a node")
    if sp > 1:
        errors += _divides_heads(sp, heads, "Ulysses SP", "actor_rollout_ref.actor.ulysses_sequence_parallel_size")
    if tp > 1:
        errors += _divides_heads(
            tp, heads, "vLLM tensor parallelism", "actor_rollout_ref.rollout.tensor_model_parallel_size"
        )
    if (batch * n) % world:
        errors.append(f"data.train_batch_size x rollout.n = {batch * n} must be divisible by the {world} workers")
    if batch % mini:
        errors.append(f"data.train_batch_size={batch} must be a multiple of actor.ppo_mini_batch_size={mini}")
    if world % sp == 0 and (mini * n) % (world // sp):
        errors.append(
            f"actor.ppo_mini_batch_size x rollout.n = {mini * n} must be divisible by the data-parallel size "
            f"{world // sp} (verl floors it per rank otherwise)"
        )
    if arr.rollout.mode == "async" and (batch * n) % int(arr.rollout.agent.num_workers):
        errors.append(
            f"data.train_batch_size x rollout.n = {batch * n} must be divisible by "
            f"rollout.agent.num_workers={arr.rollout.agent.num_workers} (the agent loop splits the batch evenly)"
        )
    seq = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    if arr.actor.use_dynamic_bsz and int(arr.actor.ppo_max_token_len_per_gpu) * sp < seq:
        errors.append(
            f"actor.ppo_max_token_len_per_gpu x SP = {int(arr.actor.ppo_max_token_len_per_gpu) * sp} is below one "
            f"full sequence ({seq} = max_prompt_length + max_response_length)"
        )
    if arr.model.get("use_fused_kernels") and sp > 1:
        errors.append(
            "actor_rollout_ref.model.use_fused_kernels=True with Ulysses SP > 1 scores the last token of every SP "
            "shard against the wrong label in verl 0.6.1 (verl #3512/#6068): keep it off or use SP 1"
        )
    if arr.rollout.mode == "async" and not arr.rollout.get("free_cache_engine", True):
        errors.append(
            "actor_rollout_ref.rollout.free_cache_engine=False: verl 0.6.1's agent loop then never wakes the rollout, "
            "and waking it is what syncs the actor's weights (verl/experimental/agent_loop/agent_loop.py:759-762), so "
            "every step would sample from the initial model (verl issue #4147, fixed upstream by PR #4248): keep True"
        )
    if not arr.rollout.multi_turn.enable or arr.rollout.mode != "async":
        errors.append(
            "ReTool needs the agent loop: actor_rollout_ref.rollout.mode=async and multi_turn.enable=True "
            "(the reward reads the turn count only the agent loop reports)"
        )
    errors += check_reward_kwargs(cfg)
    errors += check_job_env(cfg)
    errors += trace.problems(cfg)
    return errors


def check_job_env(cfg: DictConfig) -> list[str]:
    """Ray refuses a runtime_env whose env_vars are not ``Dict[str, str]`` (a TypeError inside ``ray.init``, after
    the driver has started); Hydra turns ``...env_vars.X=1`` into an int, so ask for quotes up front."""
    env_vars = OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
    return [
        f"ray_kwargs.ray_init.runtime_env.env_vars.{name}={value!r} is not a string: Ray takes only strings there; "
        f"quote it: '+ray_kwargs.ray_init.runtime_env.env_vars.{name}=\"{value}\"'"
        for name, value in env_vars.items()
        if not isinstance(value, str)
    ]


def check_rollout_env(cfg: DictConfig, profile: HardwareProfile, environ: Mapping[str, str]) -> list[str]:
    """The rollout mode against the environment the plan applies, by the platform's rule
    (:meth:`~platforms.base.Platform.rollout_env_problems`; on NPU: graphs need a task queue below 2).

    That environment is the profile's applied to ``environ`` (what the run script execs with, and what a ``plan``
    user sources), then the job's ``runtime_env`` variables, which every Ray worker, the vLLM engines included, gets.
    """
    job = OmegaConf.select(cfg, RL_JOB_ENV_KEY) or {}
    env = applied(profile.env("rl", environ), environ) | {str(k): str(v) for k, v in job.items()}
    eager = bool(OmegaConf.select(cfg, RL_ENFORCE_EAGER_KEY))
    return profile.platform.rollout_env_problems(env, enforce_eager=eager)


def check_reward_kwargs(cfg: DictConfig) -> list[str]:
    """Keyword arguments given to the kit's reward must be ones it takes (it swallows unknown ones for verl), with
    values it accepts: the reward's own validator (``recipes.retool.reward.reward_kwargs_problems``) decides."""
    reward = cfg.get("custom_reward_function") or {}
    path = reward.get("path")
    if not path or Path(path).resolve() != REWARD_PATH:
        return []
    from recipes.retool.reward import reward_kwargs_problems

    kwargs: dict[str, Any] = dict(reward.get("reward_kwargs") or {})
    return [
        f"custom_reward_function.reward_kwargs.{problem}"
        for problem in reward_kwargs_problems(kwargs, unknown_keys=True)
    ]


#: Whole numbers the planner does arithmetic on, by phase, with their least valid value (issue 21, findings 2-3:
#: ``data.train_batch_size=0`` divided by zero in budget.py, ``=abc`` ended in a ValueError traceback).
COUNT_KEYS: dict[str, tuple[tuple[str, int], ...]] = {
    "common": (
        ("trainer.nnodes", 1),
        ("trainer.n_gpus_per_node", 1),
        ("trainer.total_epochs", 1),
        # unset (null) is the epochs' count; 0 is not "no cap": verl trains one step before it looks (issue 33)
        ("trainer.total_training_steps", 1),
        ("trainer.save_freq", -1),
        ("trainer.test_freq", -1),
        ("data.train_batch_size", 1),
    ),
    "rl": (
        ("data.max_prompt_length", 1),
        ("data.max_response_length", 1),
        ("actor_rollout_ref.rollout.n", 1),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", 1),
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1),
    ),
    "sft": (("data.micro_batch_size_per_gpu", 1), ("ulysses_sequence_parallel_size", 1)),
}


def bad_counts(cfg: DictConfig, phase: str) -> list[str]:
    """Each count that is not a whole number at or above its least value, named with the value it has; checked before
    any arithmetic uses it, in the dry run and the real launch alike (both build the same plan)."""
    errors = []
    for key, least in COUNT_KEYS["common"] + COUNT_KEYS[phase]:
        value = OmegaConf.select(cfg, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value), 10)
            except ValueError:
                errors.append(f"{key}={value!r} must be a whole number")
                continue
        if value < least:
            errors.append(f"{key}={value} must be at least {least}")
    return errors
