"""``python -m recipes.launch``: plan, check and (through the run scripts) launch a ReTool recipe.

    python -m recipes.launch plan --recipe qwen3_4b_dapo --hw a3 --dry-run [--no-path-check] [-- overrides...]
    python -m recipes.launch plan --recipe qwen3_4b_dapo --hw a3 --argv [-- overrides...]   # what run_*.sh execs
    python -m recipes.launch list

``--dry-run`` prints the table, problems and the exact command, and exits 0 only when nothing is wrong.
``--argv`` is the run scripts' mode: the same checks plus this machine's (platform, device count), the table on
stderr, and the command on stdout one argument per line for the script to ``exec``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from npu_kernels.env_presets import HARDWARE
from recipes.launch import catalog, inputs
from recipes.launch.plan import UsageError, build
from recipes.launch.report import render

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _epilog() -> str:
    lines = ["environment (inputs; each becomes an explicit override in the printed command):"]
    lines += [f"  {name:<24}{text}" for name, text in inputs.ENV_DOC.items()]
    lines += ["", "recipes: " + ", ".join(catalog.RECIPES), "profiles: " + ", ".join(HARDWARE)]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.launch",
        description="Compose, validate and launch the kit's ReTool recipes (verl 0.6.1) on a2, a3, cuda or cpu.",
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
    plan.add_argument("--hw", required=True, choices=HARDWARE, help="hardware profile")
    mode = plan.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="print table + command, start nothing")
    mode.add_argument("--argv", action="store_true", help="print the command one argument per line (run scripts)")
    plan.add_argument("--no-path-check", action="store_true", help="skip model/data/checkpoint/sandbox checks")
    plan.add_argument("overrides", nargs="*", help="Hydra overrides for verl (after --)")
    sub.add_parser("list", help="list the recipes and their run scripts")
    return parser


def _list() -> int:
    for recipe in catalog.RECIPES.values():
        print(f"{recipe.name:<18}{recipe.phase:<4}{recipe.script:<36}{recipe.reference}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        return _list()
    try:
        recipe = catalog.get(args.recipe)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    # verl and Hydra print while loading; in --argv mode stdout carries the command only.
    log = sys.stdout if args.dry_run else sys.stderr
    try:
        with contextlib.redirect_stdout(log):
            plan = build(recipe, args.hw, args.overrides, path_check=not args.no_path_check, for_launch=args.argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render(plan, dry_run=args.dry_run), file=log, flush=True)
    if plan.errors:
        return EXIT_FAILED
    if args.argv:
        sys.stdout.write("".join(f"{word}\n" for word in plan.command))
    return EXIT_OK
