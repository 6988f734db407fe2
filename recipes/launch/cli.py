"""``python -m recipes.launch``: plan, check and launch a ReTool recipe.

    python -m recipes.launch run RECIPE [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N]
                                 [overrides...]
    python -m recipes.launch plan --recipe qwen3_4b_dapo --hw a3 --dry-run [--no-path-check] [-- overrides...]
    python -m recipes.launch plan --recipe qwen3_4b_dapo --hw a3 --argv [-- overrides...]
    python -m recipes.launch list
    python -m recipes.launch demand --recipe qwen3_4b_dapo [--hw a3] [--layout per-node|shared]

``run`` is what ``recipes/run_<recipe>_npu.sh`` execs: it picks the profile (``--hw``, else
:func:`platforms.default_hardware`), applies the profile's environment for the recipe's phase, plans,
and either prints the dry run or runs the exact verl command it approved as a child, its output teed into the run's
log file (:mod:`recipes.launch.supervision.runlog`), under :mod:`recipes.launch.supervision.restart` (with
``--max-restarts N`` it relaunches the command, resuming, when it dies). ``plan`` plans the same
way (:func:`_plan`, the profile's environment included): ``plan --dry-run`` prints what ``run --dry-run`` prints, the
table, problems and the command, and exits 0 only when nothing is wrong; ``plan --argv`` prints the command one
argument per line (the same checks plus this machine's: platform, device count; the table on stderr). ``demand``
prints a recipe's tool calls in flight per sandbox, the ``N`` of ``retool-sandbox bench --burst N``: the sandbox
stands alone and reads no recipe (issue 22 item 5), so the kit hands it the number.

The stack is resolved once, in :func:`main` (``--stack``, else KIT_STACK, else this interpreter's verl, else the
default: :func:`platforms.stacks.resolve`), exported for the verl child, and handed to everything below; planning it
here also checks that this interpreter's verl is the stack's (:func:`recipes.launch.planning.plan.check_installed`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from platforms import PROFILE_ENV, PROFILE_NAMES, PROFILES, REFERENCE_PROFILE, applied, default_hardware, stacks
from platforms.cli import add_profile_option, add_stack_option, profiles_help
from platforms.cli_errors import EXIT_FAILED, EXIT_OK, ArgumentParser, UsageError, entry_point, whole_number_arg
from platforms.stacks import Stack
from recipes.launch.cluster import ray_cluster
from recipes.launch.planning import compose
from recipes.launch.planning.plan import LATE_ENV, RL_ENTRY, Plan, build, check_installed, check_user_overrides
from recipes.launch.planning.report import render
from recipes.launch.run_inputs import catalog, inputs
from recipes.launch.sizing.capacity import Demand, demand
from recipes.launch.supervision import prewarm, restart, runlog

SCALES = ("full", "smoke")
PROG = "retool-launch"
RUN_PROG = "run_recipe"  # what the run scripts' messages are prefixed with: the user typed a run script


def _epilog() -> str:
    lines = ["environment (inputs; each becomes an explicit override in the printed command):"]
    lines += [f"  {name:<24}{text}" for name, text in inputs.ENV_DOC.items()]
    lines += ["", "recipes: " + ", ".join(catalog.RECIPES), "profiles: " + ", ".join(PROFILE_NAMES)]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Compose, validate and launch the kit's ReTool recipes (verl 0.6.1; 0.9.1 with --stack) on one of "
        "the hardware "
        f"profiles: {profiles_help()}.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser(
        "plan",
        help="compose + validate a recipe; print the table and the command (--dry-run) or the argv (--argv)",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument("--recipe", required=True, help=f"one of {', '.join(catalog.RECIPES)}")
    plan.add_argument("--hw", required=True, choices=PROFILE_NAMES, help="hardware profile")
    mode = plan.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="print table + command, start nothing")
    mode.add_argument("--argv", action="store_true", help="print the command one argument per line (run scripts)")
    plan.add_argument("--no-path-check", action="store_true", help="skip model/data/checkpoint/sandbox checks")
    _add_scale_option(plan)
    _add_parity_option(plan)
    add_stack_option(plan)
    plan.add_argument("overrides", nargs="*", help="Hydra overrides for verl (after --)")
    sub.add_parser("list", help="list the recipes and their run scripts")
    _add_demand_parser(sub)
    # parsed by build_run_parser(): options may follow the overrides, which needs parse_intermixed_args
    sub.add_parser(
        "run", help="what the run scripts exec: environment, plan, then the verl command (or --dry-run)"
    ).set_defaults(kit_parser=build_run_parser)  # main parses "run" with it; tests walk its options there
    return parser


def build_run_parser() -> argparse.ArgumentParser:
    run = ArgumentParser(
        prog="bash recipes/run_recipe.sh",
        description="Compose, validate and launch one of the kit's ReTool recipes with verl (the per-recipe "
        "scripts recipes/run_<recipe>_npu.sh pass RECIPE themselves). Anything that is not an option is a Hydra "
        "override for verl, e.g. trainer.total_epochs=2 actor_rollout_ref.rollout.n=8.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("recipe", help=f"one of {', '.join(catalog.RECIPES)}")
    add_profile_option(
        run,
        f"hardware profile: {profiles_help()}. Default: {PROFILE_ENV}, else this machine's; a dry run on a machine "
        f"without NPU or GPU plans {REFERENCE_PROFILE}, the reference",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="compose and validate the full config, check paths, print the table and the exact command; start "
        "nothing (no Ray, no torchrun, no model)",
    )
    run.add_argument(
        "--no-path-check", action="store_true", help="skip the model/data/checkpoint/sandbox checks (plan elsewhere)"
    )
    _add_scale_option(run)
    _add_parity_option(run)
    add_stack_option(run)
    run.add_argument(
        "--max-restarts",
        type=whole_number_arg(0),
        default=0,
        metavar="N",
        help="when the trainer exits non-zero, clean up its processes and relaunch it with trainer.resume_mode=auto "
        "(the newest complete checkpoint), at most N times; each restart logs the step it resumes from and the "
        "steps of work lost (default 0: no restart)",
    )
    run.add_argument("overrides", nargs="*", help="Hydra overrides for verl (key=value)")
    return run


def _add_demand_parser(sub: argparse._SubParsersAction) -> None:
    demand = sub.add_parser(
        "demand",
        help="print a recipe's tool calls in flight per sandbox (the N of `retool-sandbox bench --burst N`)",
    )
    demand.add_argument("--recipe", required=True, help=f"one of {', '.join(catalog.RECIPES)}")
    add_profile_option(demand, "hardware profile (default: the dry run's, KIT_HW or this machine's)")
    add_stack_option(demand)
    demand.add_argument(
        "--layout",
        choices=("per-node", "shared"),
        default="per-node",
        help="one sandbox per node (loopback URL) or one for the whole cluster (default %(default)s)",
    )


def _add_parity_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parity",
        action="store_true",
        help="run the reference configuration on the kit's stack: fused kernels off, answers checked by verl's "
        "math_dapo, tool output <= 256 chars, tool memory 1024 MB (recipes/launch/planning/parity.py)",
    )


def _add_scale_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scale",
        choices=SCALES,
        help="full (the reference sizes) or smoke (the tiny model, a few steps: a stack check on any platform). "
        "Default: the profile's (smoke on cpu, full elsewhere)",
    )


def _list() -> int:
    for recipe in catalog.RECIPES.values():
        print(f"{recipe.name:<18}{recipe.phase:<4}{recipe.script:<36}{recipe.reference}")
    return EXIT_OK


def _demand(args: argparse.Namespace, stack: Stack) -> int:
    """The number alone on stdout, for ``--burst "$(retool-launch demand ...)"``; the arithmetic on stderr."""
    hw = args.profile or default_hardware(planning=True)  # a bad KIT_HW raises a UsageError
    try:
        with contextlib.redirect_stdout(sys.stderr):  # verl and Hydra print while loading
            need = recipe_demand(args.recipe, hw, stack, shared=args.layout == "shared")
    except KeyError as exc:  # an unknown recipe: the message lists the known ones
        raise UsageError(f"--recipe: {exc.args[0]}") from None
    except ValueError as exc:  # a recipe without the code tool (the SFT ones)
        raise UsageError(f"--recipe: {exc}", "name an RL recipe (retool-launch list)") from None
    print(f"{args.recipe} on {hw}: {need.explain()}", file=sys.stderr)
    print(need.per_sandbox)
    return EXIT_OK


def _recipe(name: str) -> catalog.Recipe:
    try:
        return catalog.get(name)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


def _run_env(
    args: argparse.Namespace, recipe: catalog.Recipe, hw: str, stack: Stack, environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment the command runs in: the profile's for the recipe's phase over ``environ``. Refuses first, in
    one line before any work, a malformed override and a stack this interpreter's verl is not."""
    check_user_overrides(args.overrides)
    check_installed(stack)
    return applied(PROFILES[hw].env(recipe.phase, stack, environ), environ)


def _plan(
    args: argparse.Namespace,
    recipe: catalog.Recipe,
    hw: str,
    stack: Stack,
    env: dict[str, str],
    *,
    for_launch: bool,
    show: bool = True,
) -> tuple[Plan, str]:
    """The one planning path of ``plan`` and ``run`` in ``env`` (:func:`_run_env`): the plan, the table. ``plan
    --dry-run`` prints what ``run --dry-run`` prints (tests/recipes/test_plan_run_same.py), and the command it shows
    is the one a launch runs. Returns the plan and the table (printed unless ``show`` is False: a launch prints it
    after naming its log)."""
    # verl and Hydra print while loading: a dry run shows it with the table; a launch keeps stdout for the command
    log = sys.stderr if for_launch else sys.stdout
    with contextlib.redirect_stdout(log):
        plan = build(
            recipe,
            hw,
            stack,
            args.overrides,
            scale=args.scale,
            parity=args.parity,
            path_check=not args.no_path_check,
            for_launch=for_launch,
            environ=env,
        )
    table = render(plan, dry_run=not for_launch)
    if show:
        print(table, file=log, flush=True)
    return plan, table


def _cluster_gate(plan: Plan, environ: Mapping[str, str]) -> Callable[[], str | None]:
    """Before a supervised restart of a run on a Ray cluster: wait (bounded) until every node is back."""
    assert plan.facts is not None
    nnodes, url = plan.facts.layout.nnodes, plan.facts.sandbox_url
    address = environ.get("RAY_ADDRESS", "").strip() or None
    text = environ.get(ray_cluster.NODE_WAIT_ENV, "").strip()
    try:
        wait_s = float(text) if text else ray_cluster.NODE_WAIT_DEFAULT_S
    except ValueError:
        raise UsageError(f"{ray_cluster.NODE_WAIT_ENV}={text!r} is not a number of seconds") from None

    def gate() -> str | None:
        def check() -> list[str]:
            return ray_cluster.whole_cluster_problems(plan.hw, nnodes, address, url)

        def say(line: str) -> None:
            print(line, file=sys.stderr)

        return ray_cluster.wait_for_nodes(check, plan.hw, nnodes, wait_s, say, stack=plan.stack)

    return gate


@entry_point(RUN_PROG)  # inside retool-launch's boundary: a run script's errors carry the run script's name
def _run(args: argparse.Namespace, stack: Stack, environ: Mapping[str, str]) -> int:
    """Environment, plan, then the trainer as a child whose output is also kept in the run's log file."""
    recipe = _recipe(args.recipe)
    hw = args.profile or default_hardware(environ, planning=args.dry_run)  # a bad KIT_HW raises a UsageError
    env = _run_env(args, recipe, hw, stack, environ)
    # an RL launch's driver imports while the plan is checked (recipes.launch.supervision.prewarm)
    warm = prewarm.start(RL_ENTRY, env) if recipe.phase == "rl" and not args.dry_run else None
    try:
        plan, table = _plan(args, recipe, hw, stack, env, for_launch=not args.dry_run, show=args.dry_run)
        if plan.errors:
            if not args.dry_run:
                print(table, file=sys.stderr, flush=True)
            return EXIT_FAILED
        assert plan.cfg is not None and plan.facts is not None
        _check_restarts(args.max_restarts, int(plan.cfg.trainer.save_freq), recipe.phase, plan.facts.layout.nnodes)
        if args.dry_run:
            if args.max_restarts:
                print(_restarts_line(args.max_restarts, plan.facts.ckpt_dir))
            return EXIT_OK
        return _launch(args, plan, env, environ, table, warm)
    finally:
        if warm is not None:
            warm.dismiss()  # a driver no attempt ran, or one an interrupt left running


def _restarts_line(max_restarts: int, ckpt_dir: Path) -> str:
    return f"restarts: up to {max_restarts}, each resuming from the newest checkpoint in {ckpt_dir}"


def _check_restarts(max_restarts: int, save_freq: int, phase: str, nnodes: int) -> None:
    """--max-restarts only where a restart can resume (issue 33: finding 4, and the multi-node SFT journey)."""
    if max_restarts and save_freq <= 0:
        # issue 33, finding 4: the plan said "each resuming from the newest checkpoint" beside "saving: never"
        raise UsageError(
            f"--max-restarts {max_restarts} with trainer.save_freq={save_freq}: the run saves no checkpoint, so "
            "every restart would begin again at step 0; set trainer.save_freq=N (steps between checkpoints) or drop "
            "--max-restarts"
        )
    if max_restarts and phase == "sft" and nnodes > 1:
        # one torchrun job spans every node: a node that starts its torchrun again alone waits for ranks that ended
        raise UsageError(
            f"--max-restarts with trainer.nnodes={nnodes} on an SFT run: its torchrun job spans all {nnodes} nodes, "
            "and one node's restart cannot rejoin it. Drop --max-restarts; when the run fails, run the same command "
            "again on every node (trainer.resume_mode=auto resumes from the newest checkpoint)"
        )


def _launch(
    args: argparse.Namespace,
    plan: Plan,
    env: dict[str, str],
    environ: Mapping[str, str],
    table: str,
    warm: prewarm.Prewarmed | None = None,
) -> int:
    """Run the approved command (under the restart supervisor when asked), its output and the supervisor's lines
    teed into the run log, which the first line printed names; then say how to resume when it failed."""
    assert plan.facts is not None
    ckpt_dir, log_file = plan.facts.ckpt_dir, plan.facts.run_log
    log = runlog.RunLog(log_file, sys.stderr)
    if log.open:
        print(
            f"run log: {log_file} (appending: this launch's output, the trainer's and any restart's)", file=sys.stderr
        )
    log.header(runlog.launch_argv())
    err, out = runlog.Tee(sys.stderr, log), runlog.Tee(sys.stdout, log)
    print(table, file=err, flush=True)
    if args.max_restarts:
        print(_restarts_line(args.max_restarts, ckpt_dir), file=err)
    print(f"run_recipe: run {' '.join(plan.command)}", file=err, flush=True)
    gate = _cluster_gate(plan, environ) if args.max_restarts and plan.joins_cluster else None
    try:
        layout = plan.stack.verl.checkpoint(plan.recipe.phase)  # what the stack's trainer writes and resumes
        first = _first_attempt(plan, warm, err)
        returncode = restart.supervise(
            plan.command, env, ckpt_dir, args.max_restarts, err, out, before_restart=gate, layout=layout, first=first
        )
        if returncode != 0:
            print(_resume_hint(returncode, plan), file=err, flush=True)
    finally:
        log.close()
    return returncode if returncode >= 0 else 128 - returncode


#: What a launch prints when its first attempt is the prewarmed driver (the main job's RL log must show it).
PREWARMED_LINE = "run_recipe: driver prewarmed (its imports ran while the launcher checked the run)"


def _first_attempt(plan: Plan, warm: prewarm.Prewarmed | None, err: TextIO) -> subprocess.Popen | None:
    """The prewarmed driver running the plan's command, or None (a fresh one starts), saying which."""
    if warm is None:
        return None
    proc = warm.take(plan.argv, plan.env, LATE_ENV)  # plan.command is `env K=V ...` (plan.env) then plan.argv
    print(PREWARMED_LINE if proc else f"run_recipe: prewarmed driver not used: {warm.refused}", file=err, flush=True)
    return proc


def _resume_hint(returncode: int, plan: Plan) -> str:
    """The last line of a failed run: what running it again does (verl's default ``trainer.resume_mode=auto``
    resumes from the checkpoint the stack's trainer finds by its layout, :class:`platforms.verl_facts.CheckpointLayout`;
    a multi-node SFT job is one torchrun job on every node)."""
    assert plan.facts is not None
    ckpt_dir = plan.facts.ckpt_dir
    step, note = restart.resume_point(ckpt_dir, plan.stack.verl.checkpoint(plan.recipe.phase))
    on_nodes = "on every node " if plan.recipe.phase == "sft" and plan.facts.layout.nnodes > 1 else ""
    again = (
        "the same command again"
        if restart.resume_mode(plan.command) != "disable"
        else "it again with trainer.resume_mode=auto"
    )
    if step is None and not note:
        return (
            f"run: the trainer ended with exit status {returncode} before its first checkpoint: run {again} "
            f"{on_nodes}to start again at step 0"
        )
    where = restart.resume_phrase(step, note, none="step 0")
    return (
        f"run: the trainer ended with exit status {returncode}; run {again} {on_nodes}to resume from {where} in "
        f"{ckpt_dir}"
    )


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["run"]:
        args = build_run_parser().parse_intermixed_args(words[1:])
        return _run(args, stacks.export(stacks.resolve(args.stack)), os.environ)
    args = build_parser().parse_args(words)
    if args.command == "list":
        return _list()
    stack = stacks.export(stacks.resolve(args.stack))  # the verl child serves the same stack
    if args.command == "demand":
        return _demand(args, stack)
    recipe = _recipe(args.recipe)
    env = _run_env(args, recipe, args.hw, stack, os.environ)
    plan, _ = _plan(args, recipe, args.hw, stack, env, for_launch=args.argv)
    if plan.errors:
        return EXIT_FAILED
    if args.argv:
        sys.stdout.write("".join(f"{word}\n" for word in plan.command))
    return EXIT_OK


def recipe_demand(recipe: str, hw: str, stack: Stack, *, shared: bool = False) -> Demand:
    """A launch recipe's in-flight tool calls per sandbox, composed as the launcher does on ``stack``
    (``retool-launch demand``)."""
    from recipes.retool import TOOL_CONFIG_PATH

    entry = catalog.get(recipe)
    if entry.phase != "rl":  # an SFT config has no rollout to compose the tool into
        raise ValueError(f"recipe {recipe} runs no sandbox tool (an {entry.phase.upper()} recipe)")
    tool = f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOL_CONFIG_PATH}"
    overrides = [f"profile={hw}", *compose.stack_overrides(entry, stack), tool]
    cfg = compose.compose(entry, overrides)
    url = "http://sandbox.example:8080/run_code" if shared else "http://127.0.0.1:8080/run_code"
    found = demand(cfg, url)
    if found is None:
        raise ValueError(f"recipe {recipe} runs no sandbox tool")
    return found
