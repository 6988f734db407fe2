"""``bash scripts/bench_learn_seeds.sh``: the learning check's sensitivity bench on several seeds and stacks, judged
as one (issue 51).

    python -m recipes.smoke.bench_seeds [--out DIR] [--stacks 0.6.1,0.9.1] [--seeds 0,1,2] [--add DIR]... [--dry-run]

Why: one seed's bench proves little on its own. The 64-sample accuracy moves by about 0.1 with no learning at all,
so a sabotage can slip past the bar on one seed and a shipped run miss it on another: the reference's loss-mask
sabotage was judged "did NOT learn" by 0.03 on seed 1 (docs/measurements/learn_sabotage.yaml). Issue 51's claim is
the same runs behaving on the same seeds on every stack: the shipped run learns and each sabotage does not, the weight
sync's and the loss mask's witnesses naming the step each breaks at. This command runs ``bench_learn.sh`` once per
stack and seed, and judges them together.

Design:

* Each stack and seed is one plain ``bash scripts/bench_learn.sh --stack S --seed N --out OUT/S/seed-N`` in a child
  process: the bench a user already knows, with its own folder, table and exit status (smoke.sh picks each stack's
  interpreter); this module plans, runs, reads and judges, with the standard library only.
* Resume: a run that finished with a verdict (right or wrong) is kept; its verdict stands. Runs that did not finish
  (crashed, killed, never started) run again with ``--only`` and ``--force``, all four when the shipped run did not
  finish: the sabotages start from its SFT model. A four-hour bench killed in its third hour loses one run.
* ``--add DIR``: a bench run elsewhere (another machine, another day) stands for its stack and seed, read from its
  ``bench_learn.json``; nothing of it runs again.
* The table: per stack, one row per run and one column per seed. A cell holds the accuracy before -> after against
  the judge's bar (:func:`recipes.smoke.learn.needed_acc`) and by how much it cleared or missed it, the witness that
  named a step and its reading there, and the verdict: how clearly each run behaved, not only whether.

Exit 0 only when every run of every chosen stack behaved on every chosen seed; else 1, one line naming the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import stacks
from platforms.cli_errors import EXIT_OK, KitError, UsageError, check_writable, entry_point
from recipes.launch.supervision.process_group import kill_group
from recipes.smoke.bench_learn import LEARNED, NOT_LEARNED, RUNS, SHIPPED, verdict_label
from recipes.smoke.learn import needed_acc
from recipes.smoke.supervisor import KIT_ROOT, default_out, exit_on_signals, popen_tied

BENCH_SH = KIT_ROOT / "scripts" / "bench_learn.sh"
REPORT = "bench_learn.json"
DEFAULT_SEEDS = (0, 1, 2)  # issue 51: the same 3 seeds on both stacks
FINISHED = (LEARNED, NOT_LEARNED)  # a run with another verdict (failed at a stage, no summary, not run) did not finish


@dataclass(frozen=True)
class Bench:
    """One seed's bench on one stack, as ``bench_learn.sh`` wrote it (``rows``: its report's, one per run)."""

    stack: str
    seed: int
    folder: Path
    rows: tuple[dict, ...]

    def row(self, run: str) -> dict | None:
        return next((row for row in self.rows if row.get("run") == run), None)

    def unfinished(self) -> list[str]:
        """The runs to run again: those without a finished verdict; all of them when the shipped run did not finish."""
        shipped = self.row(SHIPPED)
        if shipped is None or shipped.get("verdict") not in FINISHED:
            return list(RUNS)
        if shipped["verdict"] != LEARNED:
            return []  # the bench's answer: sabotages from a model that did not learn would prove nothing
        return [run for run in RUNS if (self.row(run) or {}).get("verdict") not in FINISHED]


def _stack_of(folder: Path, report: Mapping) -> str | None:
    """The report's stack; a bench written before reports named it: its runs' ``summary.json``."""
    if report.get("stack"):
        return str(report["stack"])
    for run in RUNS:
        summary = folder / run / "summary.json"
        if summary.is_file():
            return json.loads(summary.read_text()).get("stack")
    return None


def load(folder: Path) -> Bench | None:
    """The bench in ``folder``; None when none finished writing there (no report yet)."""
    path = folder / REPORT
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    stack = _stack_of(folder, report)
    if stack is None or "seed" not in report:
        raise UsageError(f"{path} names no stack or seed", "a report of scripts/bench_learn.sh")
    return Bench(stack, int(report["seed"]), folder, tuple(report.get("rows", ())))


# ------------------------------------------------------------------------------------------- judging, the table


def seeds_text(seeds: Sequence[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def cell(row: dict | None) -> str:
    """One run on one seed: accuracy against the bar and the margin, the witness's step, the verdict."""
    if row is None:
        return "not run"
    parts = []
    before, after = row.get("val_acc_before"), row.get("val_acc_after")
    if before is not None and after is not None:
        bar = needed_acc(before)
        parts.append(f"{before:.2f} -> {after:.2f} (bar {bar:.2f}, {after - bar:+.2f})")
    for what, step, readings, form in (
        ("sync gap", row.get("sync_failed_step"), row.get("sync_gaps"), ".2e"),
        ("tool share", row.get("mask_failed_step"), row.get("mask_shares"), ".3f"),
    ):
        if step:
            parts.append(f"{what} {(readings or {}).get(str(step), float('nan')):{form}} at step {step}")
    verdict = verdict_label(row.get("verdict", "?"), row.get("tries") or 1)
    parts.append(verdict + ("" if row.get("problem") is None else " (NOT as it must)"))
    return "; ".join(parts)


def judge(benches: Mapping[tuple[str, int], Bench], chosen: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """Why the claim fails, one entry per stack and seed that fails it: no bench, a run missing, a run misbehaved."""
    problems = []
    for stack in chosen:
        for seed in seeds:
            where = f"stack {stack} seed {seed}"
            bench = benches.get((stack, seed))
            if bench is None:
                problems.append(f"{where}: no bench")
                continue
            missing = [run for run in RUNS if bench.row(run) is None]
            if missing:
                problems.append(f"{where}: {', '.join(missing)} not run")
            problems += [f"{where}: {row['problem']}" for row in bench.rows if row.get("problem")]
    return problems


def render(benches: Mapping[tuple[str, int], Bench], chosen: Sequence[str], seeds: Sequence[int]) -> str:
    """Per stack, a table of run x seed (what OUT/bench_seeds.md holds and the terminal shows)."""
    lines: list[str] = []
    for stack in chosen:
        header = ["run", *(f"seed {seed}" for seed in seeds)]
        lines += [
            f"## stack {stack}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
        ]
        for run in RUNS:
            row = [cell(benches[(stack, s)].row(run)) if (stack, s) in benches else "no bench" for s in seeds]
            lines.append("| " + " | ".join([run, *row]) + " |")
        lines.append("")
    return "\n".join(lines)


def write_report(out: Path, benches: Mapping[tuple[str, int], Bench], chosen: Sequence[str], seeds: Sequence[int]):
    """OUT/bench_seeds.json and OUT/bench_seeds.md; returns the problems (none: the claim holds)."""
    problems = judge(benches, chosen, seeds)
    report = {
        "ok": not problems,
        "problems": problems,
        "stacks": list(chosen),
        "seeds": list(seeds),
        "benches": [
            {"stack": b.stack, "seed": b.seed, "folder": str(b.folder), "rows": list(b.rows)} for b in benches.values()
        ],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_seeds.json").write_text(json.dumps(report, indent=2) + "\n")
    verdict = f"every run behaved on {seeds_text(seeds)}" if not problems else "FAILED: " + "; ".join(problems)
    title = f"# Learning check sensitivity bench on stacks {', '.join(chosen)}\n\n"
    (out / "bench_seeds.md").write_text(title + render(benches, chosen, seeds) + f"\n{verdict}\n")
    return problems


# ---------------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Step:
    """What one stack and seed needs: nothing (``runs`` empty: kept or added), or a bench of ``runs``."""

    stack: str
    seed: int
    folder: Path
    runs: tuple[str, ...]
    why: str

    def argv(self) -> list[str]:
        words = ["bash", str(BENCH_SH), "--stack", self.stack, "--seed", str(self.seed), "--out", str(self.folder)]
        if self.folder.is_dir() and any(self.folder.iterdir()):
            words.append("--force")  # only the chosen runs' folders are replaced: the finished ones stay
        if len(self.runs) < len(RUNS):
            words += [word for run in self.runs for word in ("--only", run)]
        return words


def plan(out: Path, chosen: Sequence[str], seeds: Sequence[int], added: Mapping[tuple[str, int], Bench]) -> list[Step]:
    """Seed by seed (every stack's seed 0 first: the earliest cross-stack answer), what each pair needs."""
    steps = []
    for seed in seeds:
        for stack in chosen:
            if (stack, seed) in added:
                steps.append(Step(stack, seed, added[(stack, seed)].folder, (), "added (--add)"))
                continue
            folder = out / stack / f"seed-{seed}"
            bench = load(folder)
            if bench is not None and (bench.stack, bench.seed) != (stack, seed):
                raise UsageError(f"{folder} holds stack {bench.stack} seed {bench.seed}'s bench", "another --out")
            runs = tuple(RUNS) if bench is None else tuple(bench.unfinished())
            why = "new" if bench is None else ("finished" if not runs else "unfinished: " + ", ".join(runs))
            steps.append(Step(stack, seed, folder, runs, why))
    return steps


def say(message: str) -> None:
    print(f"[seeds] {message}", flush=True)


def run_bench(argv: list[str]) -> int:
    """One ``bench_learn.sh``: its output goes to this terminal; its process group dies with this command."""
    proc = popen_tied(argv)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            kill_group(proc)


Runner = Callable[[list[str]], int]


def execute(steps: Sequence[Step], runner: Runner = run_bench) -> dict[tuple[str, int], Bench]:
    """Every step that has runs, in order; a failed bench does not stop the others (its table says why)."""
    todo = [step for step in steps if step.runs]
    for number, step in enumerate(todo, 1):
        say(f"bench {number}/{len(todo)}: stack {step.stack} seed {step.seed} ({step.why}) ...")
        status = runner(step.argv())
        say(f"bench stack {step.stack} seed {step.seed}: exit {status}")
    benches = {}
    for step in steps:
        bench = load(step.folder)
        if bench is not None:
            benches[(step.stack, step.seed)] = bench
    return benches


# ---------------------------------------------------------------------------------------------- command line

EPILOG = f"""\
Each stack and seed is bash scripts/bench_learn.sh --stack S --seed N --out OUT/S/seed-N (its --help says what each
of the four runs must report). Runs that finished are kept when OUT is used again; the others run again. Measured on
2 CPU cores: 28-30 min a seed on the reference, 37-39 min on the current stack, so about 3.5 h for both stacks on 3
seeds (docs/measurements/bench_seeds.yaml). Writes OUT/bench_seeds.{{json,md}}: per stack, run x seed, each cell the
accuracy before -> after against the judge's bar and the margin, the witness that named a step, the verdict. Exits 0
only when every run behaved on every seed of every stack, else 1.
Stacks: {", ".join(stacks.names())}.
"""


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(word) for word in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated seeds, e.g. 0,1,2") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: distinct seeds, none negative")
    return seeds


def _stacks(text: str) -> tuple[str, ...]:
    chosen = tuple(word.strip() for word in text.split(","))
    unknown = [name for name in chosen if name not in stacks.names()]
    if unknown or len(set(chosen)) != len(chosen):
        raise argparse.ArgumentTypeError(f"{text!r}: distinct stacks among {', '.join(stacks.names())}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bash scripts/bench_learn_seeds.sh",
        description="The learning check's sensitivity bench on several seeds and stacks, judged as one.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the benches go (default: build/bench_seeds/<date>-<time> in the kit); used again, it resumes",
    )
    parser.add_argument(
        "--stacks",
        type=_stacks,
        default=stacks.names(),
        metavar="LIST",
        help=f"comma-separated (default: every stack, {','.join(stacks.names())})",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds,
        default=DEFAULT_SEEDS,
        metavar="LIST",
        help=f"comma-separated (default: {','.join(map(str, DEFAULT_SEEDS))})",
    )
    parser.add_argument(
        "--add",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a bench_learn.sh --out folder run elsewhere: it stands for its stack and seed "
        "(repeatable); nothing of it runs again",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what each stack and seed needs; start nothing")
    return parser


def added_benches(folders: Sequence[Path], chosen: Sequence[str], seeds: Sequence[int]) -> dict:
    """``--add``'s benches by stack and seed, each checked before the first run."""
    added: dict[tuple[str, int], Bench] = {}
    for folder in folders:
        bench = load(folder.resolve())
        if bench is None:
            raise UsageError(f"--add {folder}: no {REPORT} in it", "a scripts/bench_learn.sh --out folder")
        key = (bench.stack, bench.seed)
        if bench.stack not in chosen or bench.seed not in seeds:
            raise UsageError(f"--add {folder} is stack {bench.stack} seed {bench.seed}", "add it to --stacks/--seeds")
        if key in added:
            raise UsageError(f"--add {folder}: stack {bench.stack} seed {bench.seed} is added twice")
        added[key] = bench
    return added


@entry_point("bench-learn-seeds")
def main(argv: Sequence[str] | None = None, runner: Runner = run_bench) -> int:
    args = build_parser().parse_args(argv)
    out = (args.out or default_out("bench_seeds")).resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    check_writable("--out", out, folder=True)
    steps = plan(out, args.stacks, args.seeds, added_benches(args.add, args.stacks, args.seeds))
    if args.dry_run:
        for step in steps:
            command = " ".join(step.argv()) if step.runs else "nothing to run"
            print(f"[seeds] stack {step.stack} seed {step.seed}: {step.why}\n  $ {command}")
        return EXIT_OK
    exit_on_signals()
    benches = execute(steps, runner)
    problems = write_report(out, benches, args.stacks, args.seeds)
    print(render(benches, args.stacks, args.seeds), flush=True)
    if problems:
        raise KitError("; ".join(problems), f"table: {out / 'bench_seeds.md'}")
    say(f"every run behaved on {seeds_text(args.seeds)} of stack(s) {', '.join(args.stacks)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
