#!/usr/bin/env python3
"""The learning check's speed bench: ``smoke.sh --learn`` with the previous settings and as shipped, in one run.

Why (issue 42): the check took 22 minutes on a 2-core AVX-512 machine where it should take 10; every change that
speeds it up must show what it gained against the settings before it, measured on the same machine in the same run,
and what the compute phases achieve against the hardware. This runs

* ``previous``: the settings before issue 42's changes: sdpa's dense attention over packed sequences in both trainers
  (``--sft-override model.attn_implementation=sdpa``, ``--rl-override
  ++actor_rollout_ref.model.override_config.attn_implementation=sdpa``) and verl without patch 0030 (the trainer's
  old log-prob pass on: a copy of the patched tree at the commit before it, first on ``PYTHONPATH``);
* ``current``: ``bash scripts/smoke.sh --learn`` as shipped;

then prints per stage and per RL step phase the seconds, the achieved GFLOPS of the phases that compute, and the
speed-up (recipes/smoke/speed.py says how each is counted), with the CPU's model and flags. Writes
``OUT/bench_learn_speed.{md,json}`` and each run's smoke artifacts under ``OUT/<run>``.

    python scripts/bench_learn_speed.py                         # both runs, ~25 min on 2 cores
    python scripts/bench_learn_speed.py --only current          # one run; the table keeps an earlier previous/
    python scripts/bench_learn_speed.py --analyze --out DIR     # the table of runs already in DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from platforms import stacks  # noqa: E402
from platforms.cli import add_stack_option  # noqa: E402
from platforms.cli_errors import EXIT_FAILED, EXIT_OK, UsageError, check_writable, entry_point  # noqa: E402
from platforms.cpu_info import cpu_info  # noqa: E402
from platforms.stacks import Stack  # noqa: E402
from recipes.smoke import speed  # noqa: E402

RUNS = ("previous", "current")
#: The previous settings run verl without the patch that skips the old log-prob pass of an on-policy update and the
#: ones after it (0.6.1's 0030, 0.9.1's 0014): found in each stack's series by this part of its file name.
PREVIOUS_WITHOUT = "skip-the-old-log-prob-pass"
PREVIOUS_OVERRIDES = (
    "--sft-override",
    "model.attn_implementation=sdpa",
    "--rl-override",
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # the platform adds the key: ++ overrides it
)


def previous_verl(out: Path, stack: Stack) -> Path:
    """A copy of ``stack``'s patched verl tree without its old-log-prob skip and the patches after it (``git
    worktree`` at its parent), made once under ``out``: the verl the previous settings run, first on PYTHONPATH."""
    dest = out / "verl-previous"
    if (dest / "verl" / "__init__.py").is_file():
        return dest
    tree = stack.verl_tree
    patch = previous_patch(stack)
    subject = _patch_subject(patch)
    commit = subprocess.run(
        ["git", "-C", str(tree), "log", "--format=%H", "-F", f"--grep={subject}", "-1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not commit:
        raise UsageError(f"no commit of {patch.name} in {tree}", "bash scripts/test.sh builds it")
    subprocess.run(["git", "-C", str(tree), "worktree", "add", "--detach", str(dest), f"{commit}~1"], check=True)
    return dest


def previous_patch(stack: Stack) -> Path:
    """The patch of ``stack``'s series that skips the old log-prob pass: the previous settings are the verl without
    it. A series without one has no previous run: one line, before anything runs."""
    found = sorted(stack.patch_dir.glob(f"[0-9][0-9][0-9][0-9]-*{PREVIOUS_WITHOUT}*.patch"))
    if not found:
        raise UsageError(
            f"stack {stack.name}'s series ({stack.patch_subdir}/) has no patch named *{PREVIOUS_WITHOUT}*: no "
            "previous settings to run",
            f"--only current{stack.cli_option}",
        )
    return found[0]


def _patch_subject(patch: Path) -> str:
    lines = patch.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Subject: "))
    subject = lines[start].removeprefix("Subject: ")
    for line in lines[start + 1 :]:  # a folded header continues on lines that start with a space
        if not line.startswith(" "):
            break
        subject += line
    return subject.split("] ", 1)[-1].strip()


def command(run: str, out: Path, seed: int, stack: Stack) -> list[str]:
    """``run``'s smoke.sh on ``stack`` (its ``--stack``, none for the default)."""
    argv = ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), *stack.cli_option.split(), "--learn", "--seed", str(seed)]
    argv += ["--out", str(out / run)]
    return argv + (list(PREVIOUS_OVERRIDES) if run == "previous" else []) + ["--force"]


def run_one(run: str, out: Path, seed: int, stack: Stack) -> int:
    env = dict(os.environ)
    if run == "previous":
        verl = previous_verl(out, stack)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(verl), env.get("PYTHONPATH", "")) if p)
    log = out / "logs" / f"{run}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = command(run, out, seed, stack)
    print(f"[bench] {run}: {' '.join(argv)} (log {log})", flush=True)
    with log.open("w") as handle:
        return subprocess.run(argv, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode


def stack_out(out: Path, stack: Stack, every: bool) -> Path:
    """Where ``stack``'s runs go: ``OUT`` for one stack (as before), ``OUT/<stack>`` with ``--all-stacks``."""
    return out / stack.name if every else out


def _runs(out: Path, stack: Stack) -> dict[str, speed.RunSpeed]:
    """``stack``'s finished runs under ``out``, read once, by run name; a current one is required."""
    found = {
        run: speed.read_run(out / run, f"{run} ({stack.name})")
        for run in RUNS
        if (out / run / "summary.json").is_file()
    }
    if "current" not in found:
        raise UsageError(f"no finished current run under {out}", "run the bench without --analyze first")
    return found


def report(out: Path, chosen: list[Stack], every: bool) -> int:
    """The tables of the runs under ``out``: each stack's previous against current, and with several stacks each
    other stack's current run against the reference's (ratio: reference seconds / that stack's), printed and written
    as .md and .json."""
    sections, payload = [], {}
    found = {stack.name: _runs(stack_out(out, stack, every), stack) for stack in chosen}
    for stack in chosen:
        previous, current = found[stack.name].get("previous"), found[stack.name]["current"]
        sections.append((f"stack {stack.name}: previous settings against current", speed.render(previous, current)))
        payload[stack.name] = speed.as_json(previous, current)
    reference = dataclasses.replace(found[chosen[0].name]["current"], label=f"{chosen[0].name} current")
    for other in chosen[1:]:
        theirs = dataclasses.replace(found[other.name]["current"], label=f"{other.name} current")
        sections.append(
            (f"stack {other.name} against the reference {chosen[0].name} (same run)", speed.render(reference, theirs))
        )
        payload[f"{other.name} vs {chosen[0].name}"] = speed.as_json(reference, theirs)
    runs = [run for by_name in found.values() for run in by_name.values()]
    machine = runs[0].machine or cpu_info()
    flags = ", ".join(f"{flag} {'yes' if on else 'no'}" for flag, on in machine.get("flags", {}).items())
    head = f"CPU: {machine.get('model')}, {machine.get('cores')} cores; {flags}"
    text = "\n\n".join([head, *(f"{title}\n\n{table}" for title, table in sections)])
    print(text + "\n")
    md = "\n\n".join([head, *(f"## {title}\n\n```\n{table}\n```" for title, table in sections)])
    (out / "bench_learn_speed.md").write_text(md + "\n")
    (out / "bench_learn_speed.json").write_text(json.dumps({"machine": machine, **payload}, indent=2) + "\n")
    return EXIT_OK if all(run.learned for run in runs) else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench_learn_speed.py",
        description="The learning check with the previous settings and as shipped: seconds per stage and RL phase, "
        "achieved GFLOPS, speed-ups (issue 42); with --all-stacks on every stack in one run, each stack's current run "
        "also set against the reference's (issue 51).",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "bench_learn_speed", help="%(default)s")
    parser.add_argument("--seed", type=int, default=0, help="the learning check's --seed for every run (default 0)")
    parser.add_argument("--only", choices=RUNS, action="append", help="run only this one (repeatable)")
    parser.add_argument(
        "--all-stacks",
        action="store_true",
        help=f"the runs on every stack ({', '.join(stacks.names())}; the reference first), under OUT/<stack>/",
    )
    parser.add_argument("--analyze", action="store_true", help="run nothing: the table of the runs in --out")
    parser.add_argument("--dry-run", action="store_true", help="print each run's command; start nothing")
    add_stack_option(parser)  # its verl tree (the previous run's base) and every smoke.sh's --stack
    return parser


def chosen_stacks(args: argparse.Namespace) -> list[Stack]:
    """The stacks the bench serves, the reference first: every one with --all-stacks, else the --stack one."""
    if args.all_stacks:
        if args.stack:
            raise UsageError("--all-stacks and --stack name the stacks twice", "give one of them")
        return sorted(stacks.STACKS.values(), key=lambda stack: not stack.is_default)
    return [stacks.resolve(args.stack)]


@entry_point("bench_learn_speed")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = chosen_stacks(args)  # once, here: each stack's verl tree and its runs' --stack
    every = args.all_stacks
    out = args.out.resolve()
    selected = [] if args.analyze else (args.only or list(RUNS))
    check_writable("--out", out, folder=True)  # the dry run too: it must not pass where the run fails
    if "previous" in selected:
        for stack in chosen:
            previous_patch(stack)  # a series without the skip has no previous run: said before anything starts
    for stack in chosen:
        folder = stack_out(out, stack, every)
        for run in selected:
            if args.dry_run:
                extra = f"PYTHONPATH={folder / 'verl-previous'} (verl without {previous_patch(stack).name}) " * (
                    run == "previous"
                )
                print(f"{stack.name} {run}: {extra}{' '.join(command(run, folder, args.seed, stack))}")
                continue
            status = run_one(run, folder, args.seed, stacks.export(stack))
            print(f"[bench] {stack.name} {run}: exit {status}", flush=True)
    return EXIT_OK if args.dry_run else report(out, chosen, every)


if __name__ == "__main__":
    sys.exit(main())
