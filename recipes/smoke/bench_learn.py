"""``bash scripts/bench_learn.sh``: the learning check's sensitivity bench (issue 31). Does ``smoke.sh --learn``
fail when RL is broken, and pass when it is not?

    python -m recipes.smoke.bench_learn [--out DIR] [--seed N] [--only RUN]... [--force] [--dry-run]

Why: a check that cannot fail proves nothing. The learning check runs once as shipped, then once per sabotage of
:mod:`recipes.smoke.sabotage` (the weight sync skipped after the first, the reward's sign flipped, the loss mask over
the tool's response tokens). The shipped run must say "learned"; each sabotaged one "did NOT learn" and exit non-zero.
Exit 0 only then, else 1 with one line naming the runs that did not behave.

Design:

* Each run is the real command, ``bash scripts/smoke.sh --learn --out OUT/<run> ...``, in a child process whose
  environment and ``--rl-override`` carry its sabotage, so the switch reaches that run's processes only (trainers,
  Ray workers and vLLM servers inherit it; the launcher forwards ``VERL_USE_EXTERNAL_MODULES`` to the Ray job) and
  never the shipped run: the bench refuses to start with a switch already set in its own environment. smoke.sh picks
  the interpreter and builds the venv as it does for a user, so this module needs only the standard library.
* Time: model, data, SFT and merge run once, in the shipped run (~5 of its ~15 min). Each sabotage run starts from it
  with the smoke's own ``--from-sft OUT/shipped``: a ``reuse`` stage copies the shipped run's ``data/`` and ``sft/``
  (merged model, SFT curves) into the run's folder, then sandbox, RL, eval, plots and learn run as usual. Chosen over
  building :class:`~recipes.smoke.pipeline.Smoke` objects here: the option is one small part of the smoke, checked
  like its other options and useful alone (try an RL setting without redoing SFT); every run stays a plain smoke run
  with its own ``summary.json``, logs and exit status; and a sabotage's environment lives in its own process tree,
  not in this process's ``os.environ``. Copies, not links (~320 MB, seconds): no later run can change the shipped
  run's files. The bench stops after a shipped run that did not learn: sabotage runs would prove nothing.
* Evidence: every sabotage prints :data:`~recipes.smoke.sabotage.MARKER` when it first takes effect. A sabotage run
  whose RL log lacks its line tested nothing (a platform whose environment sets ``VERL_USE_EXTERNAL_MODULES`` itself,
  npu and cuda: the fused kernels, would drop the switches), and a shipped run with such a line was not the shipped
  one: either fails the bench. The bench is meant for the CPU, where the learning check's numbers were measured.

Output: a table (run, what was broken, val acc before -> after, tool calls before -> after, verdict, sabotage lines,
RL seconds), printed and written to ``OUT/bench_learn.json`` and ``OUT/bench_learn.md``; each run's artifacts in
``OUT/<run>/``, its console output in ``OUT/logs/<run>.log``. ``--only`` reruns a subset into an existing ``OUT``
(sabotage runs then start from the ``OUT/shipped`` already there); the table keeps the other runs' earlier results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from platforms import stacks
from platforms.cli import add_stack_option
from platforms.cli_errors import EXIT_OK, KitError, UsageError, check_writable, entry_point
from platforms.stacks import Stack
from recipes.launch.supervision.process_group import kill_group
from recipes.smoke.report import reusable_sft_problem
from recipes.smoke.sabotage import MARKER, SABOTAGES, switched_on
from recipes.smoke.supervisor import KIT_ROOT, default_out, exit_on_signals, popen_tied

SHIPPED = "shipped"
RUNS = (SHIPPED, *(sabotage.name for sabotage in SABOTAGES))
SMOKE_SH = KIT_ROOT / "scripts" / "smoke.sh"
LEARNED, NOT_LEARNED = "learned", "did NOT learn"
TASK = "learn"  # the learning check's task (recipes.smoke.learn.LEARN_TASK): what --from-sft must find in OUT/shipped


@dataclass(frozen=True)
class Run:
    """One learning check of the bench: its command, its environment's changes, what it must report."""

    name: str
    broken: str
    expect: str  # LEARNED | NOT_LEARNED
    out: Path
    argv: list[str]
    changes: dict[str, str]  # the environment against the bench's own: the sabotage's switches
    marker: str | None  # the sabotage's line in its RL log; None: the shipped run, where no MARKER line may appear
    sync_breaks_at: int | None = None  # the step the weight sync's witness must name (Sabotage.sync_breaks_at)
    mask_breaks_at: int | None = None  # the step the loss mask's witness must name (Sabotage.mask_breaks_at)

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {**environ, **self.changes}


def plan(
    out: Path, seed: int, stack: Stack, *, force: bool = False, environ: Mapping[str, str] | None = None
) -> list[Run]:
    """Every run of the bench on ``stack`` (each smoke.sh gets its ``--stack``; a sabotage's reward goes to that
    stack's key), shipped first; the sabotage runs start from the shipped run's SFT (``--from-sft``)."""
    environ = os.environ if environ is None else environ

    def argv(name: str, *extra: str) -> list[str]:
        replace = ["--force"] if force else []
        words = ["bash", str(SMOKE_SH), *stack.cli_option.split(), "--learn", "--out", str(out / name)]
        return [*words, "--seed", str(seed), *replace, *extra]

    runs = [Run(SHIPPED, "nothing (as shipped)", LEARNED, out / SHIPPED, argv(SHIPPED), {}, None)]
    for sabotage in SABOTAGES:
        overrides = [word for override in sabotage.rl_overrides(stack) for word in ("--rl-override", override)]
        command = argv(sabotage.name, "--from-sft", str(out / SHIPPED), *overrides)
        changes = {k: v for k, v in sabotage.environment(environ).items() if environ.get(k) != v}
        runs.append(
            Run(
                sabotage.name,
                sabotage.broken,
                NOT_LEARNED,
                out / sabotage.name,
                command,
                changes,
                sabotage.marker,
                sabotage.sync_breaks_at,
                sabotage.mask_breaks_at,
            )
        )
    return runs


# ------------------------------------------------------------------------------------------------- the rows


@dataclass
class Row:
    """One line of the table: what a run measured and whether it behaved (``problem`` None)."""

    run: str
    broken: str
    expected: str
    verdict: str  # learned | did NOT learn | failed at <stage> | no summary | not run
    val_acc_before: float | None = None
    val_acc_after: float | None = None
    tool_calls_before: float | None = None
    tool_calls_after: float | None = None
    rl_seconds: float | None = None
    run_seconds: float | None = None
    sabotage_lines: int | None = None  # MARKER lines in the RL log (the sabotage's own for a sabotage run)
    sync_gaps: dict[str, float] | None = None  # each RL step's rollout/trainer probability gap (sync_witness)
    sync_failed_step: int | None = None  # the step the weight sync's witness named, if it failed
    mask_shares: dict[str, float] | None = None  # each RL step's share of trained tokens that are tool output
    mask_failed_step: int | None = None  # the step the loss mask's witness (mask_witness) named, if it failed
    exit_status: int | None = None  # None: measured by an earlier bench (--only), or not run
    tries: int = 1  # 2: its verdict is the learning check's second try's (recipes/smoke/learn.py second_try_warranted)
    earlier: bool = False
    out: str = ""
    problem: str | None = None


def verdict_label(verdict: str, tries: int) -> str:
    """A run's verdict as the tables print it: marked where the learning check's second try gave it."""
    return verdict + (" (second try)" if tries > 1 else "")


def _verdict(summary: Mapping) -> str:
    if summary.get("learn_ok"):
        return LEARNED
    if summary.get("failed_stage") == "learn" and NOT_LEARNED in str(summary.get("learn_verdict")):
        return NOT_LEARNED
    return f"failed at {summary.get('failed_stage') or 'an unknown stage'}"


def _marker_lines(run: Run) -> int:
    log = run.out / "logs" / "rl.log"
    if not log.is_file():
        return 0
    needle = run.marker or MARKER
    return sum(needle in line for line in log.read_text(errors="replace").splitlines())


def measure(run: Run, exit_status: int | None, *, earlier: bool = False) -> Row:
    """The run's row, read from what it wrote: ``summary.json`` and its RL log."""
    row = Row(run.name, run.broken, run.expect, "no summary", exit_status=exit_status, earlier=earlier)
    row.out = str(run.out)
    path = run.out / "summary.json"
    if path.is_file():
        summary = json.loads(path.read_text())
        row.verdict = _verdict(summary)
        row.tries = int(summary.get("tries") or 1)
        row.val_acc_before, row.val_acc_after = summary.get("val_acc_before"), summary.get("val_acc_after")
        row.tool_calls_before = summary.get("tool_call_rate_before")
        row.tool_calls_after = summary.get("tool_call_rate_after")
        stages = {stage.get("name"): stage for stage in summary.get("stages", [])}
        row.rl_seconds = stages.get("rl", {}).get("seconds")
        row.run_seconds = summary.get("seconds")
        row.sync_gaps, row.mask_shares = summary.get("weight_sync_gaps"), summary.get("loss_mask_shares")
        row.sync_failed_step = _failed_step(summary.get("weight_sync_verdict"))
        row.mask_failed_step = _failed_step(summary.get("loss_mask_verdict"))
    row.sabotage_lines = _marker_lines(run)
    row.problem = _problem(run, row)
    return row


def _failed_step(verdict: object) -> int | None:
    failed_at = re.search(r"FAILED at step (\d+)", str(verdict))
    return int(failed_at.group(1)) if failed_at else None


def _problem(run: Run, row: Row) -> str | None:
    """Why the row fails the bench, in a few words; None when the run behaved."""
    if row.verdict != run.expect:
        if row.verdict == LEARNED:
            return f"{run.name} learned: the check missed it ({run.broken})"
        return f"{run.name} {row.verdict}" + (f" (exit {row.exit_status})" if row.exit_status is not None else "")
    if row.exit_status is not None and (row.exit_status == 0) != (run.expect == LEARNED):
        return f"{run.name} {row.verdict} but exited {row.exit_status}"
    if run.marker is None and row.sabotage_lines:
        return f"{run.name} ran with a sabotage ({row.sabotage_lines} {MARKER!r} lines in its RL log)"
    if run.marker is not None and not row.sabotage_lines:
        return f"{run.name} shows no {run.marker!r} line in its RL log: the sabotage never took effect"
    for what, named, want in (
        ("weight sync", row.sync_failed_step, run.sync_breaks_at),
        ("loss mask", row.mask_failed_step, run.mask_breaks_at),
    ):
        if named != want and row.verdict != "not run":
            return f"{run.name}: the {what}'s witness named {_step(named)}, not {_step(want)}"
    return None


def _step(step: int | None) -> str:
    return f"step {step}" if step else "none"


def not_run(run: Run, why: str) -> Row:
    return Row(run.name, run.broken, run.expect, "not run", out=str(run.out), problem=f"{run.name} not run ({why})")


# ------------------------------------------------------------------------------------------------ the table


def _pair(before: float | None, after: float | None, percent: bool = False) -> str:
    if before is None or after is None:
        return "-"
    return f"{before:.0%} -> {after:.0%}" if percent else f"{before:.2f} -> {after:.2f}"


def _by_step(values: dict[str, float] | None, failed: int | None, form: str) -> str:
    """A witness's reading per step (the weight sync's gap, the loss mask's share), the step it failed at in bold."""
    if not values:
        return "-"
    return " ".join(f"**{v:{form}}**" if int(step) == failed else f"{v:{form}}" for step, v in values.items())


def render(rows: Sequence[Row]) -> str:
    """The table, in Markdown (what OUT/bench_learn.md holds and the terminal shows)."""
    header = ["run", "what was broken", "val acc", "tool calls", "sync gap by step", "tool share of loss by step"]
    header += ["verdict", "sabotage lines", "RL s", "ok"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        cells = [
            row.run + (" (earlier)" if row.earlier else ""),
            row.broken,
            _pair(row.val_acc_before, row.val_acc_after),
            _pair(row.tool_calls_before, row.tool_calls_after, percent=True),
            _by_step(row.sync_gaps, row.sync_failed_step, ".2e"),
            _by_step(row.mask_shares, row.mask_failed_step, ".3f"),
            verdict_label(row.verdict, row.tries),
            "-" if row.sabotage_lines is None else str(row.sabotage_lines),
            "-" if row.rl_seconds is None else f"{row.rl_seconds:.0f}",
            "yes" if row.problem is None else "NO",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(out: Path, rows: Sequence[Row], seed: int, stack: Stack) -> dict:
    """OUT/bench_learn.json and OUT/bench_learn.md; returns what the JSON holds (its seed and stack: what
    ``bench_learn_seeds.sh`` files the bench under)."""
    problems = [row.problem for row in rows if row.problem]
    report = {
        "ok": not problems,
        "problems": problems,
        "seed": seed,
        "stack": stack.name,
        "out": str(out),
        "rows": [asdict(r) for r in rows],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_learn.json").write_text(json.dumps(report, indent=2) + "\n")
    verdict = "every run behaved" if not problems else "FAILED: " + "; ".join(problems)
    title = f"# Learning check sensitivity bench (stack {stack.name}, seed {seed})\n\n"
    (out / "bench_learn.md").write_text(title + render(rows) + f"\n\n{verdict}\n")
    return report


# ---------------------------------------------------------------------------------------------------- running


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def run_smoke(run: Run, log: Path) -> int:
    """One learning check: its console output shown and kept in ``log``; its process group dies with the bench."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as kept:
        proc = popen_tied(run.argv, stdout=subprocess.PIPE, env=run.environment(os.environ))
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                sys.stdout.write(line)
                sys.stdout.flush()
                kept.write(line)
            return proc.wait()
        finally:
            if proc.poll() is None:
                kill_group(proc)


Runner = Callable[[Run, Path], int]


def execute(runs: Sequence[Run], selected: Sequence[str], out: Path, runner: Runner = run_smoke) -> list[Row]:
    """The selected runs in order, shipped first; a run not selected keeps the row of its earlier result in ``out``
    (none when it has none). After a shipped run that did not learn, the sabotage runs are not started."""
    rows: list[Row] = []
    stop = ""
    chosen = [run for run in runs if run.name in selected]
    for run in runs:
        if run.name not in selected:
            if (run.out / "summary.json").is_file():
                rows.append(measure(run, None, earlier=True))
            continue
        if stop:
            rows.append(not_run(run, stop))
            continue
        say(f"run {chosen.index(run) + 1}/{len(chosen)}: {run.name}: {run.broken} (must report: {run.expect}) ...")
        t0 = time.monotonic()
        status = runner(run, out / "logs" / f"{run.name}.log")
        row = measure(run, status)
        say(f"run {run.name}: {row.verdict} (exit {status}) in {time.monotonic() - t0:.0f} s")
        if run.name == SHIPPED and row.verdict != LEARNED:
            stop = "the shipped run did not learn: a sabotage run would prove nothing"
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- command line

EPILOG = """\
Runs (in this order; --only picks some):
  shipped      bash scripts/smoke.sh --learn as shipped: must report "learned" (exit 0)
  weight-sync  KIT_TEST_WEIGHT_SYNC=first-only: vLLM keeps the SFT weights: must report "did NOT learn" (exit 1),
               the weight sync's witness naming step 2 (recipes/smoke/sync_witness.py)
  reward-sign  the kit's reward with its training score negated: must report "did NOT learn"
  loss-mask    KIT_TEST_LOSS_MASK=tool-tokens: the tool's output is trained on: must report "did NOT learn",
               the loss mask's witness naming step 1 (recipes/smoke/mask_witness.py)
The sabotage runs start from the shipped run's data and merged SFT model (smoke.sh --from-sft OUT/shipped) and run
only sandbox, RL, eval, plots and learn. Expected on 2 CPU cores: ~15 min for the shipped run, ~10 min for each
sabotage run, ~45 min in all. Writes OUT/bench_learn.{json,md}, OUT/<run>/ (each run's smoke artifacts) and
OUT/logs/<run>.log; exits 0 only when every run reported what it must, else 1 with one line naming the others.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bash scripts/bench_learn.sh",
        description="The learning check's sensitivity bench: smoke.sh --learn as shipped, then with each sabotage.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the runs go (default: build/bench_learn/<date>-<time> in the kit)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the learning check's --seed, for every run (default 0)")
    parser.add_argument(
        "--only",
        action="append",
        choices=RUNS,
        metavar="RUN",
        help=f"run only this one (repeatable; {', '.join(RUNS)}). Sabotage runs without shipped start from the "
        "OUT/shipped an earlier bench left; the table keeps the earlier results of the runs not chosen",
    )
    parser.add_argument("--force", action="store_true", help="replace the chosen runs' folders when not empty")
    parser.add_argument("--dry-run", action="store_true", help="print what each run would change; start nothing")
    add_stack_option(parser)
    return parser


def preflight(out: Path, selected: Sequence[str], force: bool, environ: Mapping[str, str] | None = None) -> None:
    """What the bench needs before its first run, so a refusal never comes after 15 minutes of training."""
    environ = os.environ if environ is None else environ
    already = switched_on(environ)
    if already:
        raise UsageError(
            f"a sabotage is switched on here: {', '.join(already)}", "unset it: the bench sets each per run"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    check_writable("--out", out, folder=True)  # issue 33: the dry run said nothing of /proc or a read-only mount
    busy = [name for name in selected if (out / name).is_dir() and any((out / name).iterdir())]
    if busy and not force:
        raise UsageError(f"{', '.join(str(out / name) for name in busy)} not empty", "another --out, or --force")
    if SHIPPED not in selected:
        problem = reusable_sft_problem(out / SHIPPED, TASK)
        if problem:
            raise UsageError(f"the sabotage runs start from OUT/shipped: {problem}", "add --only shipped")


def describe(runs: Sequence[Run], selected: Sequence[str], out: Path, seed: int) -> str:
    """The dry run: each run's command, its environment's changes, and the line its RL log must (not) hold."""
    lines = [f"[bench] dry run into {out} (seed {seed}); each run is scripts/smoke.sh --learn; nothing is started"]
    for run in runs:
        if run.name not in selected:
            lines.append(f"== {run.name}: not chosen (an earlier result in {run.out} stays in the table)")
            continue
        lines.append(f"== {run.name}: {run.broken}; must report: {run.expect}")
        lines += [f"  env {key}={value}" for key, value in sorted(run.changes.items())]
        lines.append("  $ " + shlex.join(run.argv))
        if run.name == SHIPPED:
            lines.append("  stages: all (model, data, SFT, merge, sandbox, RL, eval, plots, learn)")
            lines.append(f"  evidence: no {MARKER!r} line in {run.out / 'logs' / 'rl.log'}")
        else:
            lines.append(f"  stages: reuse (copies {out / SHIPPED}'s data/ and sft/), sandbox, RL, eval, plots, learn")
            lines.append(f"  evidence: a {run.marker!r} line in {run.out / 'logs' / 'rl.log'}")
    return "\n".join(lines)


@entry_point("bench-learn")
def main(argv: Sequence[str] | None = None, runner: Runner = run_smoke) -> int:
    args = build_parser().parse_args(argv)
    stack = stacks.export(stacks.resolve(args.stack))  # once, here: every run and its reward key follow it
    out = (args.out or default_out("bench_learn")).resolve()
    runs = plan(out, args.seed, stack, force=args.force)
    selected = [name for name in RUNS if not args.only or name in args.only]
    preflight(out, selected, args.force)
    if args.dry_run:
        print(describe(runs, selected, out, args.seed))
        return EXIT_OK
    exit_on_signals()
    rows = execute(runs, selected, out, runner)
    report = write_report(out, rows, args.seed, stack)
    print(render(rows), flush=True)
    if report["problems"]:
        raise KitError("; ".join(report["problems"]), f"table: {out / 'bench_learn.md'}")
    say(f"every run reported what it must ({', '.join(row.run for row in rows)}); table: {out / 'bench_learn.md'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
