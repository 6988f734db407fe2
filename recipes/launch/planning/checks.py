"""The kit's own pre-flight checks: what verl 0.6.1 would only find out after Ray, torchrun or vLLM started.

Each check names the keys involved and the rule, so a failed dry run says what to change. They cover the layout
(devices vs sequence/tensor parallelism vs heads), the batch arithmetic verl asserts or silently floors inside its
workers, the settings that meet a bug of the stack's own verl (``VerlFacts.bugs``: in verl 0.6.1 fused log-probs with
Ulysses SP, and ``free_cache_engine=False``), the reward's keyword arguments at the stack's reward key (the kit's
``compute_score`` takes ``**kwargs`` for verl's sake, so a misspelt shaping knob would otherwise be ignored without a
word), the run's length, checkpoint disk and resume path. They read the plan's numbers
(:class:`recipes.launch.planning.facts.Facts`), never derive them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from platforms import HardwareProfile, applied
from platforms.base import RL_ENFORCE_EAGER_KEY, RL_JOB_ENV_KEY
from platforms.stacks import Stack
from platforms.verl_facts import FUSED_SP_LABELS, WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE
from recipes.launch.planning.facts import Facts, Heads
from recipes.launch.run_inputs.catalog import Recipe
from recipes.launch.sizing import budget, memory, ray_cpus
from recipes.launch.supervision import trace
from recipes.retool import REWARD_PATH


def _divides_heads(size: int, heads: Heads, what: str, key: str) -> list[str]:
    errors = []
    if heads.attention % size:
        errors.append(f"{key}={size}: {what} must divide the {heads.attention} attention heads ({heads.source})")
    if heads.kv % size and size % heads.kv:
        errors.append(
            f"{key}={size}: {what} must divide the {heads.kv} KV heads or be a multiple of them ({heads.source})"
        )
    return errors


def check_sft(cfg: DictConfig, facts: Facts, stack: Stack) -> list[str]:
    """verl's SFT trainer: the device mesh is (dp, sp) over all ranks and the batch is split by dp (its asserts)."""
    errors = []
    layout = facts.layout
    world, sp, batch, micro = layout.world, layout.sp, layout.batch, layout.micro_batch
    # the stack's key (0.9.1: engine.ulysses_sequence_parallel_size)
    sp_key = stack.verl.sft_key("ulysses_sequence_parallel_size")
    if world % sp:
        return [f"{sp_key}={sp} must divide the {world} ranks (trainer.nnodes x n_gpus_per_node)"]
    dp = layout.dp
    if batch % dp:
        errors.append(f"data.train_batch_size={batch} must be divisible by the data-parallel size {dp} ({world}/{sp})")
    elif (batch // dp) % micro:
        errors.append(
            f"data.train_batch_size / dp = {batch // dp} must be divisible by data.micro_batch_size_per_gpu={micro}"
        )
    if sp > 1:
        errors += _divides_heads(sp, facts.heads, "Ulysses SP", sp_key)
    return errors


def check_rl(cfg: DictConfig, facts: Facts, stack: Stack) -> list[str]:
    """Layout and batch arithmetic of verl's FSDP workers, vLLM replicas and agent loop for a GRPO run, and the Ray
    CPUs the run holds at once."""
    errors = []
    arr, layout, heads = cfg.actor_rollout_ref, facts.layout, facts.heads
    world, per_node, sp, tp = layout.world, layout.per_node, layout.sp, layout.tp
    batch, n, mini = layout.batch, layout.samples, layout.mini_batch
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
    errors += check_batched_tokens(arr.rollout, seq, stack)
    errors += check_verl_bugs(cfg, facts, stack)
    if not arr.rollout.multi_turn.enable or arr.rollout.mode != "async":
        errors.append(
            "ReTool needs the agent loop: actor_rollout_ref.rollout.mode=async and multi_turn.enable=True "
            "(the reward reads the turn count only the agent loop reports)"
        )
    errors += check_reward_kwargs(cfg, stack)
    errors += check_job_env(cfg)
    errors += trace.problems(cfg)
    if facts.ray_demand is not None:
        errors += ray_cpus.problems(OmegaConf.select(cfg, ray_cpus.NUM_CPUS_KEY), layout.nnodes, facts.ray_demand)
    return errors


def check_batched_tokens(rollout: DictConfig, seq: int, stack: Stack) -> list[str]:
    """vLLM refuses a step (``max_num_batched_tokens``) below ``max_num_seqs`` at start-up (vllm/config/scheduler.py:
    0.11.0 :245-249, 0.23.0 :273-278); the cpu platform's step is vLLM's own CPU default, 2048 (platforms/cpu.py).
    A step below max_model_len is no error on either stack: vLLM 0.11's V1 engine turns chunked prefill on for every
    generating model (vllm/engine/arg_utils.py:1544-1548), and with it off verl 0.9.1 raises the step to max_model_len
    first (:attr:`VerlFacts.raises_batched_tokens_to_model_len`), which is the step vLLM 0.23 then checks."""
    batched, seqs = int(rollout.max_num_batched_tokens), int(rollout.max_num_seqs)
    if not rollout.get("enable_chunked_prefill", True) and stack.verl.raises_batched_tokens_to_model_len:
        batched = max(batched, int(rollout.get("max_model_len") or seq))
    if batched >= seqs:
        return []
    return [
        f"rollout.max_num_batched_tokens={batched} is below rollout.max_num_seqs={seqs}: vLLM refuses it "
        f"(vllm/config/scheduler.py); set actor_rollout_ref.rollout.max_num_seqs={batched} or fewer"
    ]


def check_verl_bugs(cfg: DictConfig, facts: Facts, stack: Stack) -> list[str]:
    """Settings that meet a bug of the stack's verl (:attr:`platforms.verl_facts.VerlFacts.bugs`, with the lines it
    mirrors): refused only on a stack whose verl has the bug (issue 52 row 3: 0.9.1 was refused 0.6.1's)."""
    arr, bugs, version = cfg.actor_rollout_ref, stack.verl.bugs, stack.pin("VERL_VERSION")
    errors = []
    if (bug := bugs.get(FUSED_SP_LABELS)) and arr.model.get("use_fused_kernels") and facts.layout.sp > 1:
        errors.append(
            "actor_rollout_ref.model.use_fused_kernels=True with Ulysses SP > 1 scores the last token of every SP "
            f"shard against the wrong label in verl {version} ({bug.upstream}; {bug.where}): keep it off or use SP 1"
        )
    unsynced = arr.rollout.mode == "async" and not arr.rollout.get("free_cache_engine", True)
    if (bug := bugs.get(WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE)) and unsynced:
        errors.append(
            f"actor_rollout_ref.rollout.free_cache_engine=False: verl {version}'s agent loop then never wakes the "
            f"rollout, and waking it is what syncs the actor's weights ({bug.where}), so every step would sample from "
            f"the initial model ({bug.upstream}): keep True"
        )
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


def check_rollout_env(cfg: DictConfig, profile: HardwareProfile, stack: Stack, environ: Mapping[str, str]) -> list[str]:
    """The rollout mode against the environment the plan applies, by the platform's rule
    (:meth:`~platforms.base.Platform.rollout_env_problems`; on NPU: graphs need a task queue below 2).

    That environment is the profile's applied to ``environ`` (what the run script execs with, and what a ``plan``
    user sources), then the job's ``runtime_env`` variables, which every Ray worker, the vLLM engines included, gets.
    """
    job = OmegaConf.select(cfg, RL_JOB_ENV_KEY) or {}
    env = applied(profile.env("rl", stack, environ), environ) | {str(k): str(v) for k, v in job.items()}
    eager = bool(OmegaConf.select(cfg, RL_ENFORCE_EAGER_KEY))
    return profile.platform.rollout_env_problems(env, enforce_eager=eager)


def check_reward_kwargs(cfg: DictConfig, stack: Stack) -> list[str]:
    """Keyword arguments given to the kit's reward must be ones it takes (it swallows unknown ones for verl), with
    values it accepts: the reward's own validator (``recipes.retool.reward.reward_kwargs_problems``) decides. Read
    where the stack's verl reads the reward."""
    key = stack.verl.reward_key
    reward = OmegaConf.select(cfg, key) or {}
    path = reward.get("path")
    if not path or Path(path).resolve() != REWARD_PATH:
        return []
    from recipes.retool.reward import reward_kwargs_problems

    kwargs: dict[str, Any] = dict(reward.get("reward_kwargs") or {})
    return [f"{key}.reward_kwargs.{problem}" for problem in reward_kwargs_problems(kwargs, unknown_keys=True)]


def check_budget(cfg: DictConfig, recipe: Recipe, facts: Facts, *, path_check: bool) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the run's length, checkpoint disk and resume: what otherwise only fails (or
    disappoints) late. The disk and resume checks look at this machine's paths (``path_check``)."""
    errors, warnings = [], []
    steps, result = facts.steps, recipe.reference_result
    if steps.planned == 0:
        errors.append(
            f"the run would train 0 steps ({steps.how}, {cfg.trainer.total_epochs} epoch(s)): use more training rows "
            "or a smaller data.train_batch_size"
        )
    if result and steps.planned is not None and 0 < steps.planned < result.step:
        warnings.append(
            f"{steps.planned} planned steps fall short of step {result.step}, where the reference result "
            f"({result.metric} {result.value:.2f}, {result.source}) was reported: raise trainer.total_epochs "
            "or trainer.total_training_steps to compare with it"
        )
    if not path_check:
        return errors, warnings
    need, free = facts.checkpoints.total, facts.free_at_ckpt
    if free and need and need > free[0]:
        keep_key = "max_ckpt_to_keep" if recipe.phase == "sft" else "max_actor_ckpt_to_keep"
        each = budget.human(facts.checkpoints.per_checkpoint)
        errors.append(
            f"checkpoints need ~{budget.human(need)} ({facts.checkpoints.count} x {each}) but {free[1]} has "
            f"{budget.human(free[0])} free: set trainer.{keep_key}=N, a larger trainer.save_freq, or "
            "CKPT_ROOT/CKPT_DIR on a bigger disk"
        )
    return errors + _resume_problems(cfg), warnings


def _resume_problems(cfg: DictConfig) -> list[str]:
    mode = str(cfg.trainer.get("resume_mode", "auto"))
    resume = cfg.trainer.get("resume_from_path")
    if mode == "resume_path" and not resume:
        return ["trainer.resume_mode=resume_path needs trainer.resume_from_path=<ckpt dir>/global_step_N"]
    if resume and mode != "disable":
        where = Path(str(resume))
        if not where.is_dir():
            return [f"trainer.resume_from_path={resume} does not exist (verl asserts it before training)"]
        if "global_step_" not in where.name:
            return [
                f"trainer.resume_from_path={resume} must name a global_step_N folder (verl asserts it), e.g. "
                f"{where}/global_step_10"
            ]
    return []


def check_inputs(
    cfg: DictConfig,
    recipe: Recipe,
    profile: HardwareProfile,
    stack: Stack,
    environ: Mapping[str, str],
    *,
    path_check: bool,
) -> list[str]:
    """Issue 44: values against their domains, devices per node against the profile, the kit's environment
    variables against what their readers take, and (this machine's paths) a resume folder against its phase and
    the stack's checkpoint layout; issue 52: each value against what the stack's installed verl accepts (its
    dataclasses' types, enums, registries: recipes/launch/planning/verl_check.py)."""
    from recipes.launch.planning import validate_resume, validate_values, verl_check

    errors = validate_values.problems(cfg, recipe.phase, profile, environ)
    if recipe.phase == "rl":
        errors += verl_check.check_values(cfg, stack)
    return errors + (validate_resume.problems(cfg, recipe.phase, stack.verl) if path_check else [])


def check_plan(
    cfg: DictConfig,
    recipe: Recipe,
    profile: HardwareProfile,
    stack: Stack,
    facts: Facts,
    environ: Mapping[str, str],
    *,
    path_check: bool,
    layout: bool = True,
) -> tuple[list[str], list[str]]:
    """Every kit check of a composed config against the plan's facts, in the order the dry run reports them:
    layout and batch (``layout=False`` when required values are unset), the rollout's environment (RL), budget
    and disk, memory. One call, so the plan hands the facts over once and gets (errors, warnings) back."""
    errors: list[str] = []
    if layout:
        try:
            errors += (check_rl if recipe.phase == "rl" else check_sft)(cfg, facts, stack)
        except Exception as exc:  # noqa: BLE001  (a value of the wrong type: report it, do not crash the planner)
            errors.append(f"kit checks could not run: {type(exc).__name__}: {exc}")
    if recipe.phase == "rl":  # vLLM's mode against the environment the run gets (TASK_QUEUE_ENABLE on NPU)
        errors += check_rollout_env(cfg, profile, stack, environ)
    errors += check_inputs(cfg, recipe, profile, stack, environ, path_check=path_check)
    budget_errors, warnings = check_budget(cfg, recipe, facts, path_check=path_check)
    errors += budget_errors
    if facts.memory_error:
        errors.append(facts.memory_error)
    elif facts.memory:
        errors += memory.problems(facts.memory)
    return errors, warnings
