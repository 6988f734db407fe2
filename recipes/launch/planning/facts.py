"""Every number a plan prints and checks, derived once from the resolved config into one frozen value.

Why one place: the dry-run table, the launch checks and the launcher itself used to derive the same numbers while
they rendered or checked (the world size five times for one table, steps per epoch three times, the model's
config.json read twice), so a rule could disagree with the row that showed it (issue 41). :func:`derive` runs once
per plan, after the counts it divides by passed :func:`bad_counts`; :mod:`recipes.launch.planning.report` only formats a
:class:`Facts`, and :mod:`recipes.launch.planning.checks` and the launcher only read it. The arithmetic, with its
sources, lives in the modules named per field: :mod:`~recipes.launch.sizing.budget` (steps, checkpoints),
:mod:`~recipes.launch.sizing.ray_cpus` (Ray CPUs, server actors) and :mod:`~recipes.launch.sizing.capacity` (what a
server admits) take numbers; :mod:`~recipes.launch.sizing.memory` reads its own inputs (token budgets, offload) from the
config.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from platforms import HardwareProfile, current_platform
from platforms.stacks import Stack
from recipes.launch.run_inputs.catalog import ModelFacts, Recipe
from recipes.launch.run_inputs.inputs import RL_ENV_KEY, model_key
from recipes.launch.sizing import budget, capacity, memory, ray_cpus
from recipes.launch.supervision import runlog, trace


@dataclass(frozen=True)
class Heads:
    """Attention heads of the model actually trained, and where the numbers came from."""

    attention: int
    kv: int
    source: str


@dataclass(frozen=True)
class Layout:
    """Ranks and how they divide: nodes x devices per node, sequence and tensor parallelism, data parallelism."""

    nnodes: int
    per_node: int
    world: int  # ranks of the job: nnodes x per_node
    sp: int  # Ulysses sequence parallelism (SFT's, or the RL actor's)
    dp: int  # data-parallel size: world / sp, at least 1
    batch: int  # data.train_batch_size
    tp: int = 1  # RL: the rollout's tensor parallelism
    replicas: int = 1  # RL: rollout replicas, world / tp, at least 1
    samples: int = 1  # RL: rollout.n
    mini_batch: int = 1  # RL: actor.ppo_mini_batch_size
    micro_batch: int = 1  # SFT: data.micro_batch_size_per_gpu

    @property
    def trajectories(self) -> int:
        """RL: trajectories a step rolls out (prompts x samples)."""
        return self.batch * self.samples

    @property
    def updates(self) -> int:
        """RL: actor updates a step makes (mini-batches of the prompts)."""
        return max(1, self.batch // self.mini_batch)

    @property
    def accumulation(self) -> int:
        """SFT: micro-batches a rank accumulates per step."""
        return max(1, self.batch // self.dp // self.micro_batch)


@dataclass(frozen=True)
class InFlight:
    """RL async rollout through server actors: generate calls at a step's peak against what a server admits."""

    per_replica: int
    max_num_seqs: int
    admits: int


@dataclass(frozen=True)
class StackView:
    """What the table shows of the stack, read once from the config at the stack's keys (platforms/stacks.py knows
    their names; the report only formats these values)."""

    # the stack's Stack.describe() where its commands name it (Stack.cli_option): "" on the default stack, whose table
    # is unchanged
    line: str
    sft_entry: str = ""  # SFT: the trainer module torchrun runs
    sft_strategy: str = ""
    sft_remove_padding: bool = False
    sft_lr_scheduler: str = ""
    sft_fsdp: Any = None  # SFT: the trainer's FSDP node (mixed_precision, model_dtype)
    reward: Any = None  # RL: the reward spec the stack's verl reads


def stack_view(cfg: DictConfig, phase: str, stack: Stack) -> StackView:
    line = stack.describe() if stack.cli_option else ""
    if phase == "rl":
        return StackView(line, reward=OmegaConf.select(cfg, stack.verl.reward_key) or {})
    key = stack.verl.sft_key
    return StackView(
        line,
        sft_entry=stack.verl.sft_module,
        sft_strategy=str(OmegaConf.select(cfg, key("strategy"))),
        sft_remove_padding=bool(OmegaConf.select(cfg, key("use_remove_padding"))),
        sft_lr_scheduler=str(OmegaConf.select(cfg, key("lr_scheduler"))),
        sft_fsdp=OmegaConf.select(cfg, key("mixed_precision").rpartition(".")[0]),
    )


@dataclass(frozen=True)
class Facts:
    """What a plan knows, derived once (:func:`derive`); formatted by the report, read by the checks and the launch."""

    layout: Layout
    steps: budget.Steps
    heads: Heads
    checkpoints: budget.CheckpointBudget
    ckpt_dir: Path
    run_log: Path  # this node's log file (recipes/launch/supervision/runlog.py)
    free_at_ckpt: tuple[int, Path] | None = None  # (bytes, where) when the checkpoint root was checked
    memory: memory.MemoryEstimate | None = None  # per device, on profiles with a known memory per device
    memory_error: str | None = None  # why the estimate could not run (a value of the wrong type)
    ray_demand: ray_cpus.Demand | None = None  # RL: Ray CPUs held at once
    in_flight: InFlight | None = None  # RL, async through server actors
    rollout_label: str = ""  # RL: the engine, with its installed version where the plan is for this machine
    trace: str = ""  # RL: where rollout traces go
    sandbox_url: str | None = None  # RL: the code sandbox the job's workers call
    stack: StackView = StackView("")  # the stack's rows and the values read at its keys


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
    # SFT's sequence parallelism is the role "ulysses_sequence_parallel_size" at the stack's key (_count_keys)
    "sft": (("data.micro_batch_size_per_gpu", 1),),
}


def _count_keys(phase: str, stack: Stack) -> tuple[tuple[str, int], ...]:
    """:data:`COUNT_KEYS` of ``phase``, with SFT's sequence parallelism at the stack's key."""
    sft_sp = ((stack.verl.sft_key("ulysses_sequence_parallel_size"), 1),) if phase == "sft" else ()
    return COUNT_KEYS["common"] + COUNT_KEYS[phase] + sft_sp


def bad_counts(cfg: DictConfig, phase: str, stack: Stack) -> list[str]:
    """Each count that is not a whole number at or above its least value, named with the value it has; checked before
    any arithmetic uses it, in the dry run and the real launch alike (both build the same plan)."""
    errors = []
    for key, least in _count_keys(phase, stack):
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


def derive(
    cfg: DictConfig,
    recipe: Recipe,
    profile: HardwareProfile,
    stack: Stack,
    rows: int | None,
    *,
    env: Mapping[str, str],
    environ: Mapping[str, str],
    path_check: bool,
) -> tuple[Facts | None, list[str]]:
    """(the facts, []) of a resolved config, or (None, each count the arithmetic divides by that is not a whole number
    at or above its least value). ``rows``: the training rows, when readable; ``env``: the command's own variables
    (the trace's store); ``environ``: the launch's (this node's rank); ``stack``: whose keys the values are read at."""
    phase = recipe.phase
    bad = bad_counts(cfg, phase, stack)
    if bad:
        return None, bad
    layout = _layout(cfg, phase, stack)
    steps = budget.steps(
        rows,
        limit=cfg.data.get("train_max_samples", -1),
        batch=layout.batch,
        dp=layout.dp if phase == "sft" else None,
        epochs=int(cfg.trainer.total_epochs),
        cap=cfg.trainer.get("total_training_steps"),
    )
    model_path = OmegaConf.select(cfg, model_key(recipe, stack))
    heads, shape, source = _model(str(model_path) if model_path else None, recipe.model)
    keep = cfg.trainer.get("max_ckpt_to_keep" if phase == "sft" else "max_actor_ckpt_to_keep")
    ckpt_dir = Path(str(cfg.trainer.default_local_dir))
    facts = Facts(
        layout=layout,
        steps=steps,
        heads=heads,
        checkpoints=budget.checkpoint_budget(phase, steps.planned, int(cfg.trainer.save_freq), keep, shape, source),
        ckpt_dir=ckpt_dir,
        run_log=runlog.log_path(ckpt_dir, phase, layout.nnodes, environ),
        free_at_ckpt=budget.free_bytes(str(ckpt_dir)) if path_check else None,
        **_memory(cfg, phase, shape, profile, layout),
        stack=stack_view(cfg, phase, stack),
    )
    return (_with_rollout(facts, cfg, profile, stack, env) if phase == "rl" else facts), []


def _layout(cfg: DictConfig, phase: str, stack: Stack) -> Layout:
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    world, batch = nnodes * per_node, int(cfg.data.train_batch_size)
    if phase == "sft":
        sp = int(OmegaConf.select(cfg, stack.verl.sft_key("ulysses_sequence_parallel_size")))
        micro = int(cfg.data.micro_batch_size_per_gpu)
        return Layout(nnodes, per_node, world, sp, max(1, world // sp), batch, micro_batch=micro)
    arr = cfg.actor_rollout_ref
    sp, tp = int(arr.actor.ulysses_sequence_parallel_size), int(arr.rollout.tensor_model_parallel_size)
    n, mini = int(arr.rollout.n), int(arr.actor.ppo_mini_batch_size)
    return Layout(nnodes, per_node, world, sp, max(1, world // sp), batch, tp, max(1, world // tp), n, mini)


def _model(model_path: str | None, fallback: ModelFacts) -> tuple[Heads, ModelFacts, str]:
    """Heads, shape and where they came from: the model's config.json, read once, when readable (the smoke's tiny
    model is not the recipe's), else the recipe's table (a dry run where the model is not)."""
    config: dict | None = None
    if model_path:
        try:
            config = json.loads((Path(model_path) / "config.json").read_text())
        except (OSError, ValueError):
            config = None
    heads = Heads(fallback.num_attention_heads, fallback.num_key_value_heads, f"{fallback.hf_name} (recipe table)")
    try:
        attention = int(config["num_attention_heads"])  # type: ignore[index]
        kv = int(config.get("num_key_value_heads") or attention)  # type: ignore[union-attr]
        heads = Heads(attention, kv, str(Path(str(model_path)) / "config.json"))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    shape = memory.facts_from_config(config, str(model_path), fallback)
    where = f"{model_path}/config.json" if shape is not fallback else f"{fallback.hf_name}, recipe table"
    return heads, shape, f"{shape.parameters / 1e9:.2f}B parameters from {where}"


def _memory(cfg: DictConfig, phase: str, shape: ModelFacts, profile: HardwareProfile, layout: Layout) -> dict:
    """The per-device estimate against the profile's memory per device, or why it could not run."""
    if not profile.memory_gb_per_device:
        return {}
    try:
        estimate = memory.estimate(cfg, phase, shape, profile.memory_gb_per_device, layout.world, sft_sp=layout.sp)
        return {"memory": estimate}
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # a value of the wrong type: reported, not a crash
        return {"memory_error": f"memory estimate could not run: {type(exc).__name__}: {exc}"}


def _with_rollout(
    facts: Facts, cfg: DictConfig, profile: HardwareProfile, stack: Stack, env: Mapping[str, str]
) -> Facts:
    """RL: the rollout's server actors, the Ray CPUs they and the trainer hold, the generate calls in flight."""
    rollout, layout = cfg.actor_rollout_ref.rollout, facts.layout
    servers = ray_cpus.rollout_servers(
        str(rollout.mode),
        str(rollout.name),
        tp=layout.tp,
        dp=int(rollout.get("data_parallel_size", 1) or 1),
        pp=int(rollout.get("pipeline_model_parallel_size", 1) or 1),
        world=layout.world,
        per_node=layout.per_node,
    )
    async_reward = bool(OmegaConf.select(cfg, "reward_model.launch_reward_fn_async"))
    in_flight = None
    if rollout.mode == "async" and rollout.name in ray_cpus.SERVER_ENGINES:
        seqs = int(rollout.max_num_seqs)
        per_replica = math.ceil(layout.trajectories / max(1, layout.replicas))
        in_flight = InFlight(per_replica, seqs, capacity.server_admits(seqs))
    url = OmegaConf.select(cfg, f"{RL_ENV_KEY}.RETOOL_SANDBOX_URL")
    return replace(
        facts,
        ray_demand=ray_cpus.demand(
            layout.world, str(rollout.name), servers, async_reward, task_runner=stack.verl.task_runner_cpus
        ),
        in_flight=in_flight,
        rollout_label=_engine(profile, stack, str(rollout.name)),
        trace=trace.describe(cfg, env),
        sandbox_url=str(url) if url else None,
    )


def _engine(profile: HardwareProfile, stack: Stack, name: str) -> str:
    """The rollout's name, with its installed version when the plan is for this machine's platform."""
    platform = profile.platform
    if platform is not current_platform():
        return name
    engine = platform.rollout_engine(stack)
    return engine.label() if engine.name == name and engine.version else name
