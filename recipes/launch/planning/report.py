"""The dry-run table: the handful of numbers that decide whether a run fits, and how long it is.

One ``name: value`` line per row (stable names, parsed by the tests), then the errors and warnings, then the command.
This module only formats: every number comes from the plan's :class:`~recipes.launch.planning.facts.Facts` (derived
once, the same numbers the checks read) and every setting from the resolved config as verl will see it; it calls nothing
that derives or probes.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from platforms import PROFILES
from platforms.stacks import Stack
from recipes.launch.planning import parity
from recipes.launch.planning.facts import Facts
from recipes.launch.planning.plan import Plan
from recipes.launch.run_inputs import inputs
from recipes.launch.sizing.budget import Steps, human
from recipes.launch.sizing.capacity import RAY_ASYNC_ACTOR_CONCURRENCY, SERVER_CONTROL_CALLS
from recipes.launch.sizing.memory import MemoryEstimate
from recipes.launch.sizing.ray_cpus import NUM_CPUS_KEY
from recipes.launch.supervision import runlog


def _flag(value: object, on: str, off: str) -> str:
    return on if value else off


def _freq(value: int) -> str:
    return "never" if int(value) <= 0 else f"every {value} steps"


def _total_steps(steps: Steps) -> str:
    if steps.cap is not None:
        if steps.per_epoch is not None and steps.per_epoch * steps.epochs < steps.cap:
            capped = f"trainer.total_training_steps={steps.cap} not reached"
            return f"{steps.per_epoch * steps.epochs} ({steps.epochs} epoch(s) x {steps.per_epoch}; {capped})"
        return f"{steps.cap} (trainer.total_training_steps)"
    if steps.per_epoch is None:
        return f"{steps.epochs} epoch(s) x steps per epoch"
    return f"{steps.per_epoch * steps.epochs} ({steps.epochs} epoch(s) x {steps.per_epoch})"


def _checkpoint_row(facts: Facts) -> str:
    ckpt = facts.checkpoints
    each = f"~{human(ckpt.per_checkpoint)} each (model + optimizer shards; {ckpt.source})"
    if ckpt.count is None:
        text = f"{each}; how many: unknown (steps unknown here)"
    else:
        text = f"{ckpt.count} x {each} = ~{human(ckpt.total or 0)}"
    if facts.free_at_ckpt is not None:
        free, where = facts.free_at_ckpt
        text += f"; {human(free)} free at {where}"
    return text


def _reference_row(plan: Plan, facts: Facts) -> list[tuple[str, str]]:
    result = plan.recipe.reference_result
    if result is None:
        return []
    planned = "unknown here" if facts.steps.planned is None else f"{facts.steps.planned} planned"
    return [
        ("reference result", f"{result.metric} {result.value:.2f} at step {result.step} ({result.source}; {planned})")
    ]


def _input_value(plan: Plan, key: str) -> str:
    """The input the plan resolved for ``key`` (a config key, or the variable that set it: MODEL_PATH's key is the
    stack's)."""
    for item in plan.inputs:
        if key in (item.key, item.env):
            origin = {"env": item.env, "default": f"default; set {item.env}", "override": "override"}[item.source]
            return f"{item.value}  ({origin})"
    return "?"


_SHORT_DTYPE = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "32": "fp32"}


def _short(dtype: object) -> str:
    text = str(dtype)
    return _SHORT_DTYPE.get(text, text)


def _sft_fsdp(plan: Plan) -> DictConfig:
    """The SFT trainer's FSDP node, which holds mixed_precision and model_dtype: the stack's (0.6.1
    model.fsdp_config, 0.9.1 engine), read once by the plan (facts.StackView)."""
    assert plan.facts is not None
    return plan.facts.stack.sft_fsdp


def compute_dtypes(plan: Plan, cfg: DictConfig) -> dict[str, str]:
    """The dtype each role computes in, as verl will read it (FSDP param_dtype / autocast / rollout dtype)."""
    if plan.recipe.phase == "sft":
        fsdp = _sft_fsdp(plan)
        return {"trainer": _short((fsdp.get("mixed_precision") or {}).get("param_dtype", "bf16"))}
    arr = cfg.actor_rollout_ref
    out = {}
    for role in ("actor", "ref"):
        fsdp = arr[role].fsdp_config
        param = _short((fsdp.get("mixed_precision") or {}).get("param_dtype", "bf16"))
        autocast = _short(fsdp.get("dtype", "bfloat16"))
        out[role] = param if param == autocast else f"{param} (autocast {autocast})"
    out["rollout"] = _short(arr.rollout.get("dtype", "bfloat16"))
    return out


def _dtype_row(plan: Plan, cfg: DictConfig) -> str:
    dtypes = compute_dtypes(plan, cfg)
    fsdp = _sft_fsdp(plan) if plan.recipe.phase == "sft" else cfg.actor_rollout_ref.actor.fsdp_config
    params = _short(fsdp.get("model_dtype", "fp32"))
    values = set(dtypes.values())
    compute = (
        f"{values.pop()} compute ({', '.join(dtypes)})"
        if len(values) == 1
        else ", ".join(f"{role} {value}" for role, value in dtypes.items())
    )
    return f"{compute}; parameters {params}"


def _memory_row(est: MemoryEstimate) -> str:
    text = (
        f"training ~{est.train_gb:.0f} of {est.device_gb:g} GB per device (states {est.train_state_gb:.0f} GB + "
        f"activations of {est.tokens_per_device} tokens {est.activation_gb:.0f} GB)"
    )
    if est.rollout_weights_gb is not None:
        text += (
            f"; vLLM weights {est.rollout_weights_gb:.0f} GB/device, KV for ~{(est.kv_tokens_per_replica or 0):,} "
            f"tokens/replica (a trajectory is {est.trajectory_tokens})"
        )
    return text


def _common_head(plan: Plan, cfg: DictConfig, facts: Facts) -> list[tuple[str, str]]:
    profile, layout = PROFILES[plan.hw], facts.layout
    per_device = f", {profile.memory_gb_per_device} GB per device" if profile.memory_gb_per_device else ""
    unit = f"{profile.platform.ray_resource} devices" if profile.devices_per_node else "worker processes"
    return [
        (
            "recipe",
            f"{plan.recipe.name}  (config {plan.recipe.config_name}, profile {plan.hw}"
            + (f", scale {plan.scale})" if plan.scale_given else ")"),
        ),
        ("reference", plan.recipe.reference),
        *([("stack", facts.stack.line)] if facts.stack.line else []),
        ("device", f"{cfg.trainer.device}  ({profile.note}{per_device})"),
        ("nodes", f"{layout.nnodes} x {layout.per_node} {unit} = {layout.world}"),
        ("dtype", _dtype_row(plan, cfg)),
        *([("parity", parity.describe(plan.recipe.phase))] if plan.parity else []),
        *([("memory", _memory_row(facts.memory))] if facts.memory else []),
    ]


def _sft_rows(cfg: DictConfig, facts: Facts) -> list[tuple[str, str]]:
    layout = facts.layout
    sp, dp, batch, micro = layout.sp, layout.dp, layout.batch, layout.micro_batch
    view = facts.stack  # the values at the stack's SFT keys (facts.StackView)
    return [
        ("entry", f"torchrun -m {view.sft_entry}"),
        (
            "parallel",
            f"{view.sft_strategy}, Ulysses SP {sp} -> data-parallel {dp}, "
            f"remove padding {_flag(view.sft_remove_padding, 'on', 'off')}",
        ),
        (
            "batch",
            f"{batch} sequences/step = dp {dp} x {batch // dp}; micro-batch {micro} per device "
            f"-> {layout.accumulation} accumulation step(s)",
        ),
        ("lengths", f"max_length {cfg.data.max_length} (truncation {cfg.data.truncation})"),
        (
            "optim",
            f"lr {cfg.optim.lr}, {view.sft_lr_scheduler} schedule, warmup ratio {cfg.optim.lr_warmup_steps_ratio}",
        ),
    ]


def _ray_cpus_row(cfg: DictConfig, facts: Facts) -> str:
    need = facts.ray_demand
    assert need is not None
    available = OmegaConf.select(cfg, NUM_CPUS_KEY)
    of = f"ray_init.num_cpus {available}" if available is not None else "the host's cores (Ray counts them)"
    return f"{need.total} held at once ({need.describe()}) of {of}"


def _in_flight_rows(facts: Facts, stack: Stack) -> list[tuple[str, str]]:
    """The async rollout's peak: every trajectory of a step is one generate call in flight, spread over the
    replicas; a server admits ``max(1000, max_num_seqs + 16)`` (what makes it so is the stack's:
    ``VerlFacts.server_admits_by``) and vLLM decodes up to ``max_num_seqs``, the rest wait in vLLM's queue. None
    without server actors (a sync rollout, or the hf rollout)."""
    peak, layout = facts.in_flight, facts.layout
    if peak is None:
        return []
    seqs = peak.max_num_seqs
    return [
        (
            "in flight",
            f"{peak.per_replica:,} generate calls per replica at a step's peak ({layout.trajectories:,} trajectories "
            f"/ {layout.replicas}); its server admits {peak.admits:,} at once (max({RAY_ASYNC_ACTOR_CONCURRENCY}, "
            f"max_num_seqs {seqs:,} + {SERVER_CONTROL_CALLS}), {stack.verl.server_admits_by}), the engine runs up to "
            f"max_num_seqs {seqs:,}",
        )
    ]


def _micro_batch(actor: DictConfig) -> str:
    """The actor's micro-batch: a token budget per device under dynamic batching, else a count per device."""
    if actor.use_dynamic_bsz:
        return f"dynamic, {actor.ppo_max_token_len_per_gpu} tokens/device"
    return f"{actor.ppo_micro_batch_size_per_gpu} per device"


def _rl_rows(plan: Plan, cfg: DictConfig, facts: Facts) -> list[tuple[str, str]]:
    arr, layout = cfg.actor_rollout_ref, facts.layout
    batch, n, mini = layout.batch, layout.samples, layout.mini_batch
    offload = [name for name in ("param", "optimizer") if arr.actor.fsdp_config.get(f"{name}_offload")]
    micro = _micro_batch(arr.actor)
    mt = arr.rollout.multi_turn
    vk = arr.rollout.val_kwargs
    reward = facts.stack.reward
    kwargs = ", ".join(f"{k}={v}" for k, v in (reward.get("reward_kwargs") or {}).items())
    kl = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    return [
        ("entry", "python -m verl.trainer.main_ppo"),
        (
            "training",
            f"{arr.actor.strategy}, Ulysses SP {layout.sp} -> data-parallel {layout.dp}, offload "
            f"{'+'.join(offload) or 'off'}, fused log-probs {_flag(arr.model.use_fused_kernels, 'on', 'off')}, "
            f"torch.compile {_flag(arr.actor.use_torch_compile, 'on', 'off')}",
        ),
        (
            "rollout",
            f"{facts.rollout_label} {arr.rollout.mode}, TP {layout.tp} -> {layout.replicas} replica(s), "
            f"gpu_memory_utilization {arr.rollout.gpu_memory_utilization}, "
            f"{_flag(arr.rollout.enforce_eager, 'eager', 'graphs')}, {arr.rollout.agent.num_workers} agent workers",
        ),
        *_in_flight_rows(facts, plan.stack),
        ("ray cpus", _ray_cpus_row(cfg, facts)),
        (
            "batch",
            f"{batch} prompts x {n} samples = {layout.trajectories} trajectories/step; mini-batch {mini} "
            f"-> {layout.updates} update(s)/step; micro-batch {micro}",
        ),
        (
            "lengths",
            f"prompt {cfg.data.max_prompt_length} + response {cfg.data.max_response_length} = "
            f"{int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)} tokens",
        ),
        (
            "multi-turn",
            f"{mt.format}, {mt.max_user_turns} user / {mt.max_assistant_turns} assistant turns, "
            f"tool output <= {mt.max_tool_response_length} chars",
        ),
        (
            "algorithm",
            f"{cfg.algorithm.adv_estimator}, KL {_flag(kl, 'on', 'off')}, "
            f"clip {arr.actor.clip_ratio_low}/{arr.actor.clip_ratio_high} (c {arr.actor.clip_ratio_c}), "
            f"lr {arr.actor.optim.lr}",
        ),
        (
            "validation",
            f"n={vk.n}, temperature {vk.temperature}, top_p {vk.top_p}; "
            f"{_flag(cfg.trainer.val_before_train, 'before training and ', '')}{_freq(cfg.trainer.test_freq)}",
        ),
        ("reward", f"{Path(str(reward.path)).name}:{reward.name}" + (f" ({kwargs})" if kwargs else "")),
        ("sandbox", _input_value(plan, f"{inputs.RL_ENV_KEY}.RETOOL_SANDBOX_URL")),
        ("rollout trace", facts.trace),
    ]


def _run_log_row(plan: Plan, facts: Facts) -> str:
    """Where a launch tees its output (recipes/launch/supervision/runlog.py): the log outlives the terminal; on node 0
    (the one this table describes), ``run.log`` in the checkpoint folder."""
    ckpt = facts.ckpt_dir
    text = f"{ckpt / runlog.LOG_NAME}  (every launch and restart appends to it"
    if plan.recipe.phase == "sft" and facts.layout.nnodes > 1:
        text += f"; node R > 0: {ckpt / 'run.node<R>.log'}"
    return text + ")"


def rows(plan: Plan) -> list[tuple[str, str]]:
    cfg, facts = plan.cfg, plan.facts
    assert cfg is not None and facts is not None
    body = _sft_rows(cfg, facts) if plan.recipe.phase == "sft" else _rl_rows(plan, cfg, facts)
    per_epoch, how = facts.steps.per_epoch, facts.steps.how
    keep = cfg.trainer.get("max_ckpt_to_keep", cfg.trainer.get("max_actor_ckpt_to_keep"))
    tail = [
        ("model", _input_value(plan, "MODEL_PATH")),
        ("train data", _input_value(plan, "data.train_files")),
        ("val data", _input_value(plan, "data.val_files")),
        ("steps/epoch", f"{per_epoch}  ({how})" if per_epoch is not None else f"unknown  ({how})"),
        ("total steps", _total_steps(facts.steps)),
        *_reference_row(plan, facts),
        ("checkpoints", f"{_input_value(plan, 'trainer.default_local_dir')}"),
        ("run log", _run_log_row(plan, facts)),
        ("saving", f"{_freq(cfg.trainer.save_freq)}, keep {keep if keep else 'all'}"),
        ("checkpoint disk", _checkpoint_row(facts)),
        ("logger", f"{', '.join(cfg.trainer.logger)}; tensorboard dir {plan.env.get('TENSORBOARD_DIR', '?')}"),
        ("environment", plan.env_command),
        ("checked", "; ".join(plan.checked) if plan.checked else "nothing (errors first)"),
    ]
    return _common_head(plan, cfg, facts) + body + tail


def render_table(plan: Plan) -> str:
    table = rows(plan)
    width = max(len(name) for name, _ in table) + 2
    return "\n".join(f"{name + ':':<{width}}{value}" for name, value in table)


def render_command(plan: Plan) -> str:
    """The command as a copy-pasteable shell line: launcher first, then one config option or override per line."""
    words = [shlex.quote(word) for word in plan.command]
    split = plan.command.index("--config-path")
    lines = [" ".join(words[:split]), " ".join(words[split : split + 2]), " ".join(words[split + 2 : split + 4])]
    lines += words[split + 4 :]
    return " \\\n    ".join(lines)


def render(plan: Plan, *, dry_run: bool) -> str:
    """Table, problems and (for a dry run) the command."""
    parts = []
    if plan.cfg is not None and plan.facts is not None:  # facts exist once the counts they divide by passed
        parts.append(render_table(plan))
    parts += [f"warning: {w}" for w in plan.warnings]
    parts += [f"error: {e}" for e in plan.errors]
    if dry_run and plan.argv:
        parts.append(f"command (after `source <({plan.env_command})`, as the launcher does):\n  {render_command(plan)}")
    if dry_run:
        verdict = "FAILED" if plan.errors else "OK"
        parts.append(f"dry run {verdict}: nothing was started (no Ray, no torchrun, no model loaded)")
    return "\n".join(parts)
