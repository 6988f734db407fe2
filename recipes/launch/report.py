"""The dry-run table: the handful of numbers that decide whether a run fits, and how long it is.

One ``name: value`` line per row (stable names, parsed by the tests), computed from the resolved config exactly as
verl will see it, then the errors and warnings, then the command. Steps per epoch follow verl's data loaders: RL
draws ``train_batch_size`` prompts per step with ``drop_last``; SFT shards the rows over the data-parallel ranks
(``DistributedSampler(drop_last=True)``) and each rank draws ``train_batch_size / dp`` per step.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from platforms import PROFILES, current_platform
from recipes.launch import budget, capacity, inputs, memory, parity, ray_cpus, runlog, trace
from recipes.launch.checks import world_size
from recipes.launch.plan import Plan


def _flag(value: object, on: str, off: str) -> str:
    return on if value else off


def _freq(value: int) -> str:
    return "never" if int(value) <= 0 else f"every {value} steps"


def steps_per_epoch(plan: Plan) -> tuple[int | None, str]:
    """(steps, how) from the training rows, or (None, why not): :func:`recipes.launch.budget.steps_per_epoch`."""
    assert plan.cfg is not None
    return budget.steps_per_epoch(plan.cfg, plan.recipe.phase, plan.rows_in_train)


def total_steps(plan: Plan) -> str:
    assert plan.cfg is not None
    return budget.total_steps_text(plan.cfg, plan.recipe.phase, plan.rows_in_train)


def _checkpoint_row(plan: Plan) -> str:
    ckpt = plan.checkpoints
    if ckpt is None:
        return "unknown"
    each = f"~{budget.human(ckpt.per_checkpoint)} each (model + optimizer shards; {ckpt.source})"
    if ckpt.count is None:
        text = f"{each}; how many: unknown (steps unknown here)"
    else:
        text = f"{ckpt.count} x {each} = ~{budget.human(ckpt.total or 0)}"
    if plan.free_at_ckpt is not None:
        free, where = plan.free_at_ckpt
        text += f"; {budget.human(free)} free at {where}"
    return text


def _reference_row(plan: Plan) -> list[tuple[str, str]]:
    result = plan.recipe.reference_result
    if result is None:
        return []
    planned = "unknown here" if plan.steps is None else f"{plan.steps} planned"
    return [
        ("reference result", f"{result.metric} {result.value:.2f} at step {result.step} ({result.source}; {planned})")
    ]


def _input_value(plan: Plan, key: str) -> str:
    for item in plan.inputs:
        if item.key == key:
            origin = {"env": item.env, "default": f"default; set {item.env}", "override": "override"}[item.source]
            return f"{item.value}  ({origin})"
    return "?"


_SHORT_DTYPE = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "32": "fp32"}


def _short(dtype: object) -> str:
    text = str(dtype)
    return _SHORT_DTYPE.get(text, text)


def compute_dtypes(plan: Plan, cfg: DictConfig) -> dict[str, str]:
    """The dtype each role computes in, as verl will read it (FSDP param_dtype / autocast / rollout dtype)."""
    if plan.recipe.phase == "sft":
        fsdp = cfg.model.fsdp_config
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
    fsdp = cfg.model.fsdp_config if plan.recipe.phase == "sft" else cfg.actor_rollout_ref.actor.fsdp_config
    params = _short(fsdp.get("model_dtype", "fp32"))
    values = set(dtypes.values())
    compute = (
        f"{values.pop()} compute ({', '.join(dtypes)})"
        if len(values) == 1
        else ", ".join(f"{role} {value}" for role, value in dtypes.items())
    )
    return f"{compute}; parameters {params}"


def _common_head(plan: Plan, cfg: DictConfig) -> list[tuple[str, str]]:
    profile = PROFILES[plan.hw]
    per_device = f", {profile.memory_gb_per_device} GB per device" if profile.memory_gb_per_device else ""
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    unit = f"{profile.platform.ray_resource} devices" if profile.devices_per_node else "worker processes"
    return [
        (
            "recipe",
            f"{plan.recipe.name}  (config {plan.recipe.config_name}, profile {plan.hw}"
            + (f", scale {plan.scale})" if plan.scale_given else ")"),
        ),
        ("reference", plan.recipe.reference),
        ("device", f"{cfg.trainer.device}  ({profile.note}{per_device})"),
        ("nodes", f"{nnodes} x {per_node} {unit} = {world_size(cfg)}"),
        ("dtype", _dtype_row(plan, cfg)),
        *([("parity", parity.describe(plan.recipe.phase))] if plan.parity else []),
        *([("memory", memory.summary(plan.memory))] if plan.memory else []),
    ]


def _sft_rows(plan: Plan, cfg: DictConfig) -> list[tuple[str, str]]:
    world = world_size(cfg)
    sp = int(cfg.ulysses_sequence_parallel_size)
    dp = max(1, world // sp)
    batch, micro = int(cfg.data.train_batch_size), int(cfg.data.micro_batch_size_per_gpu)
    accumulate = max(1, batch // dp // micro)
    return [
        ("entry", "torchrun -m verl.trainer.fsdp_sft_trainer"),
        (
            "parallel",
            f"{cfg.model.strategy}, Ulysses SP {sp} -> data-parallel {dp}, "
            f"remove padding {_flag(cfg.use_remove_padding, 'on', 'off')}",
        ),
        (
            "batch",
            f"{batch} sequences/step = dp {dp} x {batch // dp}; micro-batch {micro} per device "
            f"-> {accumulate} accumulation step(s)",
        ),
        ("lengths", f"max_length {cfg.data.max_length} (truncation {cfg.data.truncation})"),
        (
            "optim",
            f"lr {cfg.optim.lr}, {cfg.optim.lr_scheduler} schedule, warmup ratio {cfg.optim.lr_warmup_steps_ratio}",
        ),
    ]


def _engine(plan: Plan, name: str) -> str:
    """The rollout's name, with its installed version when the plan is for this machine's platform."""
    platform = PROFILES[plan.hw].platform
    if platform is not current_platform():
        return str(name)
    engine = platform.rollout_engine()
    return engine.label() if engine.name == name and engine.version else str(name)


def _ray_cpus_row(cfg: DictConfig) -> str:
    need = ray_cpus.demand(cfg)
    available = OmegaConf.select(cfg, ray_cpus.NUM_CPUS_KEY)
    of = f"ray_init.num_cpus {available}" if available is not None else "the host's cores (Ray counts them)"
    return f"{need.total} held at once ({need.describe()}) of {of}"


def _micro_batch(actor: DictConfig) -> str:
    """The actor's micro-batch: a token budget per device under dynamic batching, else a count per device."""
    if actor.use_dynamic_bsz:
        return f"dynamic, {actor.ppo_max_token_len_per_gpu} tokens/device"
    return f"{actor.ppo_micro_batch_size_per_gpu} per device"


def _rl_rows(plan: Plan, cfg: DictConfig) -> list[tuple[str, str]]:
    arr = cfg.actor_rollout_ref
    world = world_size(cfg)
    sp, tp = int(arr.actor.ulysses_sequence_parallel_size), int(arr.rollout.tensor_model_parallel_size)
    batch, n, mini = int(cfg.data.train_batch_size), int(arr.rollout.n), int(arr.actor.ppo_mini_batch_size)
    offload = [name for name in ("param", "optimizer") if arr.actor.fsdp_config.get(f"{name}_offload")]
    micro = _micro_batch(arr.actor)
    mt = arr.rollout.multi_turn
    vk = arr.rollout.val_kwargs
    reward = cfg.custom_reward_function
    kwargs = ", ".join(f"{k}={v}" for k, v in (reward.get("reward_kwargs") or {}).items())
    kl = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    return [
        ("entry", "python -m verl.trainer.main_ppo"),
        (
            "training",
            f"{arr.actor.strategy}, Ulysses SP {sp} -> data-parallel {max(1, world // sp)}, offload "
            f"{'+'.join(offload) or 'off'}, fused log-probs {_flag(arr.model.use_fused_kernels, 'on', 'off')}, "
            f"torch.compile {_flag(arr.actor.use_torch_compile, 'on', 'off')}",
        ),
        (
            "rollout",
            f"{_engine(plan, arr.rollout.name)} {arr.rollout.mode}, TP {tp} -> {max(1, world // tp)} replica(s), "
            f"gpu_memory_utilization {arr.rollout.gpu_memory_utilization}, "
            f"{_flag(arr.rollout.enforce_eager, 'eager', 'graphs')}, {arr.rollout.agent.num_workers} agent workers",
        ),
        *[("in flight", row) for row in [capacity.rollout_in_flight(cfg, max(1, world // tp))] if row],
        ("ray cpus", _ray_cpus_row(cfg)),
        (
            "batch",
            f"{batch} prompts x {n} samples = {batch * n} trajectories/step; mini-batch {mini} "
            f"-> {max(1, batch // mini)} update(s)/step; micro-batch {micro}",
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
        ("rollout trace", trace.describe(cfg, plan.env)),
    ]


def _run_log_row(plan: Plan, cfg: DictConfig) -> str:
    """Where a launch tees its output (recipes/launch/runlog.py): the log outlives the terminal."""
    ckpt, nnodes = Path(str(cfg.trainer.default_local_dir)), int(cfg.trainer.nnodes)
    text = f"{runlog.log_path(ckpt, plan.recipe.phase, nnodes, {})}  (every launch and restart appends to it"
    if plan.recipe.phase == "sft" and nnodes > 1:
        text += f"; node R > 0: {ckpt / 'run.node<R>.log'}"
    return text + ")"


def rows(plan: Plan) -> list[tuple[str, str]]:
    cfg = plan.cfg
    assert cfg is not None
    body = _sft_rows(plan, cfg) if plan.recipe.phase == "sft" else _rl_rows(plan, cfg)
    per_epoch, how = steps_per_epoch(plan)
    keep = cfg.trainer.get("max_ckpt_to_keep", cfg.trainer.get("max_actor_ckpt_to_keep"))
    tail = [
        ("model", _input_value(plan, inputs.model_key(plan.recipe))),
        ("train data", _input_value(plan, "data.train_files")),
        ("val data", _input_value(plan, "data.val_files")),
        ("steps/epoch", f"{per_epoch}  ({how})" if per_epoch is not None else f"unknown  ({how})"),
        ("total steps", total_steps(plan)),
        *_reference_row(plan),
        ("checkpoints", f"{_input_value(plan, 'trainer.default_local_dir')}"),
        ("run log", _run_log_row(plan, cfg)),
        ("saving", f"{_freq(cfg.trainer.save_freq)}, keep {keep if keep else 'all'}"),
        ("checkpoint disk", _checkpoint_row(plan)),
        ("logger", f"{', '.join(cfg.trainer.logger)}; tensorboard dir {plan.env.get('TENSORBOARD_DIR', '?')}"),
        ("environment", PROFILES[plan.hw].env_command(plan.recipe.phase)),
        ("checked", "; ".join(plan.checked) if plan.checked else "nothing (errors first)"),
    ]
    return _common_head(plan, cfg) + body + tail


def render_table(plan: Plan) -> str:
    width = max(len(name) for name, _ in rows(plan)) + 2
    return "\n".join(f"{name + ':':<{width}}{value}" for name, value in rows(plan))


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
    if plan.cfg is not None and plan.counts_ok:  # the table does arithmetic on those counts
        parts.append(render_table(plan))
    parts += [f"warning: {w}" for w in plan.warnings]
    parts += [f"error: {e}" for e in plan.errors]
    if dry_run and plan.argv:
        parts.append(
            f"command (after `source <({PROFILES[plan.hw].env_command(plan.recipe.phase)})`, as the launcher "
            f"does):\n  {render_command(plan)}"
        )
    if dry_run:
        verdict = "FAILED" if plan.errors else "OK"
        parts.append(f"dry run {verdict}: nothing was started (no Ray, no torchrun, no model loaded)")
    return "\n".join(parts)
