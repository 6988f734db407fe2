"""What the smoke run starts: its sizes, the trainers' overrides, and every stage's command and environment.

Why apart from the stages (:mod:`recipes.smoke.pipeline`): the commands are the part that differs per platform, and
they can be composed, printed (``--dry-run``) and tested for an NPU or GPU host on a CPU, without running anything.
The trainers go through the kit's launcher with the platform's own hardware profile at the ``smoke`` scale
(``--hw <profile> --scale smoke``), in the platform's environment, on one device where the profile counts devices.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import HardwareProfile, RolloutEngine, applied
from platforms.base import RL_ROLLOUT_NAME_KEY as ROLLOUT_NAME_KEY
from platforms.cli_errors import UsageError
from platforms.stacks import ENV_VAR, Stack
from recipes.launch.run_inputs import catalog
from recipes.launch.run_inputs.mounts import EPHEMERAL_CKPT_ENV
from recipes.smoke.sandbox_service import sandbox_command
from recipes.smoke.supervisor import KIT_ROOT, kit_env

DATA_DIR = Path(__file__).resolve().parent / "data"
#: The config group ``scale`` the trainers run at (recipes/config/sizes/<recipe>/smoke.yaml).
SCALE = "smoke"
SFT_RECIPE = catalog.get("qwen3_4b_sft")
RL_RECIPE = catalog.get("qwen3_4b_dapo")
#: Set for helper processes only (kit_env); a trainer's value comes from its platform's environment.
HELPER_ONLY_ENV = ("TORCH_DEVICE_BACKEND_AUTOLOAD",)

CHECK_STAGE = "tool-call check"  # left out where Sizes.check_samples is 0 (the learning check)
STAGES = ("model", "data", "sft", "merge", CHECK_STAGE, "sandbox", "rl", "eval", "plots")
#: While the first stage runs, the second's process starts: neither needs the other's output, and each mostly waits
#: on one core (imports, disk) on a 2-core machine. The sandbox's start (its warm workers import numpy, sympy and
#: scipy) took 2.4-3.6 s and the plots 3.0-4.0 s of the learning check run one after another
#: (docs/measurements/learn_both_stacks_cache.yaml); a stage that waits for a head start is timed for its wait.
HEAD_STARTS = {"merge": "sandbox", "reuse": "sandbox", "eval": "plots"}


@dataclass(frozen=True)
class Sizes:
    """How much each trainer runs; ``--fast`` is the CI size (fewer steps, same stages and checks)."""

    sft_steps: int
    sft_epochs: int  # steps / (rows / batch): verl's cosine schedule spans epochs x steps per epoch
    rl_steps: int
    rl_test_freq: int  # validation after step N (plus the one before training); -1: only before training
    check_samples: int  # sampled completions per prompt for the tool-call check's rate; 0: no check stage


# Measured on 2 cores: after 72 SFT steps the model still breaks the JSON of its calls (0/16 well-formed), after 96
# steps 21/32 of its sampled answers are well-formed calls; --fast saves on RL (2 steps, one validation) instead.
FULL = Sizes(sft_steps=96, sft_epochs=4, rl_steps=3, rl_test_freq=3, check_samples=4)
FAST = Sizes(sft_steps=96, sft_epochs=4, rl_steps=2, rl_test_freq=-1, check_samples=2)

#: --trace: verl's rollout tracing to mlflow, token ids decoded so a trace reads as text.
TRACE_OVERRIDES = ("actor_rollout_ref.rollout.trace.backend=mlflow", "actor_rollout_ref.rollout.trace.token2text=True")

SFT_ROWS, SFT_BATCH = 96, 4
SFT_MAX_LENGTH = 336
SFT_OVERRIDES = (
    # A smoke trajectory is 319-323 Qwen tokens with the tool schema (tests/smoke/test_pipeline.py checks the bound);
    # verl's SFT trainer pads every row to max_length and scores all positions against the 151,936-row vocabulary,
    # so 336 instead of 384 is ~12% less work per step. Not truncated (left truncation to 128 tokens is 3x cheaper
    # per step, but a model trained without the system prompt answers the full RL prompt with \\boxed{} instead of a
    # tool call: measured 0/32 calls after 144 steps, against 21/32 after 96 full-length steps).
    f"data.max_length={SFT_MAX_LENGTH}",
    "data.truncation=error",
    "data.train_max_samples=-1",
    "data.val_max_samples=8",
    f"data.train_batch_size={SFT_BATCH}",
    "optim.lr=2e-2",  # a random 64-wide model: a high lr, or the format is not learned in a hundred steps
    "optim.lr_warmup_steps_ratio=0.03",
    "model.enable_gradient_checkpointing=false",  # nothing to save on a tiny model; recomputation costs time
)
RL_OVERRIDES = (
    "data.train_max_samples=-1",
    "data.val_max_samples=-1",
    "data.max_response_length=96",  # tool call + tool response + boxed answer is ~50 tokens
    "actor_rollout_ref.actor.optim.lr=1e-4",
    "trainer.val_before_train=True",
    "trainer.logger=['console','tensorboard']",
)
#: data stage: (retool-prepare command, shipped input, output parquet)
DATA_JOBS = (
    ("sft", "retool_sft.jsonl", "retool_sft.parquet"),
    ("rl", "dapo_math.jsonl", "dapo_math.parquet"),
    ("val", "smoke_val.jsonl", "smoke_val.parquet"),
    ("val", "aime_2025.jsonl", "aime_2025.parquet"),
)


@dataclass(frozen=True)
class DataJob:
    """One ``retool-prepare`` run of the data stage: command, input file (in the task's input folder), output."""

    command: str  # sft | rl | val
    source: str
    output: str  # parquet under OUT/data
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    """What a smoke run trains on: its data and the trainers' task-specific overrides.

    ``inputs`` is the folder of the source files; None means the run writes them into ``OUT/data/src`` first with
    ``generate(folder, seed)`` (the learning check's task, :mod:`recipes.smoke.learn`)."""

    name: str
    inputs: Path | None
    data_jobs: tuple[DataJob, ...]
    sft_file: str
    rl_file: str
    val_files: tuple[str, ...]
    sft_overrides: tuple[str, ...]
    rl_overrides: tuple[str, ...]
    generate: Callable[[Path, int], object] | None = None
    # (setting, value) of the custom reward function, placed at the stack's reward key (VerlFacts.reward_override)
    reward_settings: tuple[tuple[str, str], ...] = ()
    judges_learning: bool = False  # a final "learn" stage judges the validation curve (recipes.smoke.learn)
    model: str = "tiny"  # what the model stage builds: "tiny" (random Qwen3) or "smollm2" (retool-models smollm2)


#: The plain smoke: the shipped fixtures of recipes/smoke/data in the real datasets' schemas.
SMOKE_TASK = Task(
    "smoke",
    DATA_DIR,
    tuple(DataJob(*job) for job in DATA_JOBS),
    "retool_sft.parquet",
    "dapo_math.parquet",
    ("smoke_val.parquet", "aime_2025.parquet"),
    SFT_OVERRIDES,
    RL_OVERRIDES,
)


@dataclass(frozen=True)
class Command:
    """One process a stage starts: what ``--dry-run`` prints and what the stage runs."""

    stage: str
    argv: list[str]
    env: dict[str, str]
    recipe: str | None = None  # trainer stages: the launcher recipe the script runs


def check_rl_overrides(profile: HardwareProfile, stack: Stack, overrides: Sequence[str]) -> None:
    """``--rl-override``, checked before the first stage: the RL stage composes them only after SFT and the merge."""
    check_stage_overrides(RL_RECIPE, profile, stack, overrides)


def check_sft_overrides(profile: HardwareProfile, stack: Stack, overrides: Sequence[str]) -> None:
    """``--sft-override``, checked before the first stage, as ``--rl-override`` is."""
    check_stage_overrides(SFT_RECIPE, profile, stack, overrides)


def check_stage_overrides(
    recipe: catalog.Recipe, profile: HardwareProfile, stack: Stack, overrides: Sequence[str]
) -> None:
    """A stage's user overrides: the launcher's rules (:func:`recipes.launch.planning.plan.check_user_overrides`),
    then Hydra's, on the stage's recipe composed as the stage composes it (the profile, the stack's config choices,
    the smoke scale): a key the config lacks is refused unless it is added with ``+`` (``++``), a config group's
    choice is a key, and the values must parse and merge."""
    if not overrides:
        return
    from omegaconf import OmegaConf

    from recipes.launch.planning import compose, plan

    option, stage = f"--{recipe.phase}-override", recipe.phase.upper()
    try:
        plan.check_user_overrides(overrides)
    except UsageError as exc:
        raise UsageError(f"{option}: {exc.what}", exc.fix) from None
    base = [f"profile={profile.name}", *stack.config_choices, *profile.verl_overrides(recipe.phase, stack)]
    base.append(f"scale={SCALE}")
    cfg, choices = compose.compose_with_choices(recipe, base)
    missing = object()
    for item in overrides:
        key = plan.override_key(item)
        if item.startswith("+") or key in choices or OmegaConf.select(cfg, str(key), default=missing) is not missing:
            continue
        add = "" if item.startswith("~") else f"; a new key is added with +{item}"
        raise UsageError(
            f"{option} {item}: the {stage} config ({recipe.name}) has no key {key}", f"check its spelling{add}"
        )
    try:
        compose.compose(recipe, [*base, *overrides])
    except compose.ConfigError as exc:
        said = [line.strip() for line in str(exc).splitlines() if line.strip() not in ("", "None")]
        said = [line for line in said if "hydra.cc/docs" not in line]
        raise UsageError(f"{option} {' '.join(overrides)}: {' '.join(said[:3])}") from None


def smollm2_dir(stack: Stack) -> Path:
    """Where the learning check keeps SmolLM2 (KIT_SMOLLM2_DIR, else build/models/ in the kit): built once, reused.
    One folder per stack (its ``folder_suffix``): the build's fingerprint holds the converting transformers' version
    (4.57.1 on 0.6.1, 5.9.0 on 0.9.1), so a shared folder would be rebuilt at each switch of stack, under a run of the
    other."""
    name = "smollm2-135m-instruct" + stack.folder_suffix
    return Path(os.environ.get("KIT_SMOLLM2_DIR") or KIT_ROOT / "build" / "models" / name)


def one_device_overrides(profile: HardwareProfile) -> list[str]:
    """The node shape of a smoke on ``profile``: one device where the profile counts devices; on a profile whose
    ranks are processes (no device count), the recipe's own worker count stays."""
    return ["trainer.nnodes=1", "trainer.n_gpus_per_node=1"] if profile.devices_per_node else []


#: What the smoke's checkpoints hold: the model's shards, which the hand-offs read (scripts/sft_to_rl.sh and
#: scripts/rl_to_hf.sh check only those: recipes/launch/handoffs/handoff.py check_step_dir), not the optimizer's.
#: A smoke is rerun, never resumed, and Adam's two fp32 moments are twice the model: on SmolLM2-135M 1.08 GB of the
#: SFT save's 1.6 GB and as much of the RL save's, GBs CI's disk ran out of (docs/testing.md, "Disk").
MODEL_ONLY = "[model]"
#: verl's actor checkpoint contents (0.6.1 and 0.9.1 ppo_trainer: actor.checkpoint.save_contents, a CheckpointConfig).
RL_MODEL_ONLY = (f"actor_rollout_ref.actor.checkpoint.save_contents={MODEL_ONLY}",)


def last_checkpoint_overrides(steps: int) -> list[str]:
    """One RL checkpoint, at the last step, and only that one kept: issue 44 found ``OUT/rl/ckpt`` empty (the run
    saved nothing), so the README's way from a checkpoint to a score (scripts/rl_to_hf.sh, scripts/eval_model.sh)
    could not be followed on the main job's own run. One save, the model only, took 0.45 s
    (docs/measurements/bench_091_seed2.yaml)."""
    return [f"trainer.save_freq={steps}", "trainer.max_actor_ckpt_to_keep=1", *RL_MODEL_ONLY]


class SmokeCommands:
    """The paths of one smoke run and every command its stages start, with their environments.

    ``stack``: the stack the run serves, resolved by the command line (:mod:`recipes.smoke.cli`) and handed down:
    the reward's key, the tiny model's width, the SmolLM2 folder, the platform's overrides and every printed command
    follow it, whatever this process's ``KIT_STACK`` says."""

    def __init__(
        self,
        out: Path,
        sizes: Sizes,
        profile: HardwareProfile,
        stack: Stack,
        *,
        trace: bool = False,
        rollout: str | None = None,
        task: Task = SMOKE_TASK,
        seed: int = 0,
        rl_extra: tuple[str, ...] = (),
        sft_extra: tuple[str, ...] = (),
        model: Path | None = None,
        from_sft: Path | None = None,
    ) -> None:
        self.out, self.sizes, self.profile, self.task, self.seed = out, sizes, profile, task, seed
        self.stack = stack
        self.trace = trace  # --trace: RL rollouts traced to mlflow's file store (recipes/launch/supervision/trace.py)
        # --rollout: the RL rollout engine; None keeps the platform's (vLLM; the hf rollout where vLLM is missing)
        self.rollout = rollout
        self.rl_extra = rl_extra  # --rl-override: the user's own Hydra overrides of the RL stage, last (they win)
        self.sft_extra = sft_extra  # --sft-override: the same for the SFT stage
        # --from-sft: an earlier run whose data/ and sft/ this run copies (its own paths below stay under ``out``)
        self.from_sft = from_sft
        self.sandbox_url = ""  # set when the sandbox is up (its port is picked then)
        self.logs = out / "logs"
        # --model: the user's own checkpoint; else what the task's model stage builds (SmolLM2 into a cache shared by
        # runs: 0.6 GB, ~40 s to convert)
        self.user_model = model
        self.model_dir = model or (smollm2_dir(stack) if task.model == "smollm2" else out / "model" / "tiny-qwen3")
        self.data = out / "data"
        self.sources = task.inputs or self.data / "src"
        self.sft_ckpt = out / "sft" / "ckpt"
        self.merged = out / "sft" / "hf_merged"
        self.rl_dir = out / "rl"
        self.val_files = [self.data / name for name in task.val_files]

    # -- environments and commands

    def helper_env(self, **extra: str) -> dict[str, str]:
        """Data prep, merge, eval, plots, the sandbox: CPU work in this interpreter. Every stage's environment names
        the run's stack (``KIT_STACK``), so each process it starts serves the same one, whatever the caller's had."""
        extra = {ENV_VAR: self.stack.name, **extra}
        return kit_env(PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", KIT_PYTHON=sys.executable, **extra)

    def trainer_env(self, phase: str, **extra: str) -> dict[str, str]:
        """The helper environment without its helper-only settings, then the platform's environment for ``phase``
        (what the launcher applies again, idempotently): on an NPU that leaves torch_npu's auto-load on, which
        verl 0.6.1 needs to see ``torch.npu``."""
        base = {k: v for k, v in self.helper_env(**extra).items() if k not in HELPER_ONLY_ENV}
        # the smoke's checkpoints are throwaway: allowed on a container's own filesystem
        # (recipes/launch/run_inputs/paths.py)
        base[EPHEMERAL_CKPT_ENV] = "1"
        return applied(self.profile.env(phase, self.stack, base), base)

    def trainer_argv(self, recipe: catalog.Recipe, overrides: list[str]) -> list[str]:
        """The recipe's script with the run's stack as an option (``--stack NAME``, none for the default): pasted
        from a dry run into another shell, it runs on the same stack."""
        script = str(KIT_ROOT / recipe.script)
        stack = self.stack.cli_option.split()
        return ["bash", script, *stack, "--hw", self.profile.name, "--scale", SCALE, *overrides]

    def data_commands(self) -> list[Command]:
        commands = []
        for job in self.task.data_jobs:
            argv = [
                sys.executable,
                "-m",
                "recipes.retool.prepare",
                job.command,
                "--input",
                str(self.sources / job.source),
            ]
            argv += ["--output", str(self.data / job.output), *job.args]
            commands.append(Command("data", argv, self.helper_env()))
        return commands

    def sft_command(self) -> Command:
        s = self.sizes
        env = self.trainer_env(
            SFT_RECIPE.phase,
            MODEL_PATH=str(self.model_dir),
            TRAIN_FILE=str(self.data / self.task.sft_file),
            VAL_FILE=str(self.data / self.task.sft_file),
            CKPT_DIR=str(self.sft_ckpt),
            TENSORBOARD_DIR=str(self.out / "sft" / "tensorboard"),
        )
        overrides = [
            *self.task.sft_overrides,
            f"trainer.total_training_steps={s.sft_steps}",
            f"trainer.total_epochs={s.sft_epochs}",
            f"trainer.save_freq={s.sft_steps}",
            self.stack.verl.sft_override("checkpoint_contents", MODEL_ONLY),
            "trainer.test_freq=-1",
            *one_device_overrides(self.profile),
            *self.sft_extra,
        ]
        return Command("sft", self.trainer_argv(SFT_RECIPE, overrides), env, SFT_RECIPE.name)

    def merge_command(self) -> Command:
        """The hand-off on the run's stack (its verl merges; ``--stack`` as the trainers' scripts get it)."""
        argv = ["bash", str(KIT_ROOT / "scripts" / "sft_to_rl.sh"), "--recipe", SFT_RECIPE.name.removesuffix("_sft")]
        argv += [*self.stack.cli_option.split(), "--hw", self.profile.name]
        argv += ["--ckpt-dir", str(self.sft_ckpt), "--target", str(self.merged)]
        return Command("merge", argv, self.helper_env())

    def rl_command(self, sandbox_url: str) -> Command:
        s = self.sizes
        env = self.trainer_env(
            RL_RECIPE.phase,
            MODEL_PATH=str(self.merged),
            TRAIN_FILE=str(self.data / self.task.rl_file),
            VAL_FILE=str(self.val_files[0]),
            CKPT_DIR=str(self.rl_dir / "ckpt"),
            TENSORBOARD_DIR=str(self.rl_dir / "tensorboard"),
            RETOOL_SANDBOX_URL=f"{sandbox_url}/run_code",
        )
        overrides = [
            *self.task.rl_overrides,
            *(self.stack.verl.reward_override(k, v) for k, v in self.task.reward_settings),
            f"data.val_files=[{','.join(str(p) for p in self.val_files)}]",
            f"trainer.total_training_steps={s.rl_steps}",
            *last_checkpoint_overrides(s.rl_steps),
            f"trainer.test_freq={s.rl_test_freq}",
            f"trainer.validation_data_dir={self.rl_dir / 'val_generations'}",
            f"trainer.rollout_data_dir={self.rl_dir / 'rollouts'}",
            *one_device_overrides(self.profile),
            *(TRACE_OVERRIDES if self.trace else ()),
            *([f"{ROLLOUT_NAME_KEY}={self.rollout}"] if self.rollout else []),
            *self.rl_extra,
        ]
        return Command("rl", self.trainer_argv(RL_RECIPE, overrides), env, RL_RECIPE.name)

    def rollout_engine(self) -> RolloutEngine:
        """The engine the RL stage rolls out with, and its version where known (the table and summary.json)."""
        engine = self.profile.platform.rollout_engine(self.stack)
        if self.rollout and self.rollout != engine.name:
            return RolloutEngine(self.rollout, None, "chosen with --rollout")
        return engine

    @property
    def trace_store(self) -> Path:
        """Where the launcher points mlflow for this run's RL stage: ``<CKPT_DIR>/mlruns``."""
        return self.rl_dir / "ckpt" / "mlruns"

    def eval_command(self) -> Command:
        out = self.out / "eval"
        # the last validation (after training; with --fast the one before it)
        argv = [sys.executable, "-m", "recipes.retool.evaluate", str(self.rl_dir / "val_generations")]
        argv += [f"--data={p}" for p in self.val_files]
        argv += ["--tokenizer", str(self.merged), "--json", str(out / "eval.json"), "--markdown", str(out / "eval.md")]
        return Command("eval", argv, self.helper_env())

    def plots_command(self) -> Command:
        logdirs = [str(self.out / "sft" / "tensorboard"), str(self.rl_dir / "tensorboard")]
        argv = [sys.executable, "-m", "recipes.retool.plot", *logdirs, "--out", str(self.out / "plots")]
        return Command("plots", argv, self.helper_env())

    def commands(self) -> list[Command]:
        """Every process the run starts, in order (the sandbox's port is picked when it starts); from an earlier
        run's SFT (``--from-sft``), none before the sandbox."""
        sandbox = Command("sandbox", sandbox_command("<port>"), self.helper_env())
        rl = self.rl_command(self.sandbox_url or "http://127.0.0.1:<port>")
        tail = [sandbox, rl, self.eval_command(), self.plots_command()]
        if self.from_sft is not None:
            return tail
        return [*self.data_commands(), self.sft_command(), self.merge_command(), *tail]
