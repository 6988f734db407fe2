"""``retool-eval``: accuracy and tool use report of ReTool generations (verl validation dumps or any JSONL).

    retool-eval RUN/val_generations                      # verl's trainer.validation_data_dir: the last step's dump
    retool-eval RUN/val_generations --step 0 --data val.parquet --json eval.json --markdown eval.md
    retool-eval generations.jsonl --k 1,4,16

Why a separate tool: verl's own validation metrics are bootstrap estimates (random subsets of the k samples), are
grouped only as far as its logger shows them, and say nothing about tool use. From the same samples this computes,
per data source and per problem, exact numbers that two runs can be compared on:

* ``mean@k`` — mean accuracy of the k samples of a problem, averaged over problems, by the kit's verifier (the
  reward's ``acc``);
* ``strict mean@k`` — the same by the references' rule, verl's ``math_dapo`` strict ``\\boxed{}`` match (the
  reward's ``acc_strict``): the number to set beside a published result (verl's 0.60, the Ascend sample's 0.57);
* ``best@k`` — fraction of problems with at least one correct sample among its k;
* ``maj@k``  — majority vote over the k samples' extracted answers (samples without an answer do not vote; a tie
  goes to the answer seen first); the problem counts as solved when the voted answer's samples are correct;
* ``pass@j`` — the unbiased estimator ``1 - C(n-c, j) / C(n, j)`` (n samples, c correct), for j = 1, 2, 4, … ≤ n
  (or ``--k``), averaged over problems;
* tool use — tool calls per response (``<tool_call>`` blocks, and how many verl's hermes parser would accept), tool
  rounds (the reward's ``tool_rounds`` when dumped, else ``<tool_response>`` blocks), code errors (tracebacks,
  non-zero exits), timeouts and sandbox failures, as the kit's tool reports them in the tool response;
* response length — characters, and tokens with ``--tokenizer``.

Input records: see :mod:`recipes.retool.generations` (verl's dump, or any JSONL with common field names).
verl's dump has no ``data_source``: pass the validation parquet(s) with ``--data`` and each record is matched to the
row whose user prompt it contains (else every record is in ``all``). ``acc`` missing: the answer is checked with the
kit's verifier, as the reward does; ``acc_strict`` missing: with verl's ``math_dapo``, as the reward does.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from platforms.cli_errors import (
    EXIT_OK,
    ArgumentParser,
    UsageError,
    check_writable,
    counts_arg,
    entry_point,
    input_file,
    input_path,
    output_file,
)
from recipes.retool.generations import (
    OUTPUT_KEYS,
    Sample,
    assign_data_sources,
    data_source_index,
    dump_files,
    parse_tool_calls,
    read_records,
    to_sample,
)

__all__ = ["Report", "evaluate", "main", "parse_tool_calls", "pass_at_k", "to_markdown"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): the chance that k of the n samples, drawn without replacement, hit one
    of the c correct ones: ``1 - C(n-c, k) / C(n, k)``."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, have {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(samples: Sequence[Sample]) -> tuple[str, bool]:
    """``(voted answer, correct)``: the most frequent non-empty ``pred`` (first seen wins a tie)."""
    votes = Counter(s.pred for s in samples if s.pred)
    if not votes:
        return "", False
    best = max(votes.values())
    answer = next(s.pred for s in samples if s.pred and votes[s.pred] == best)
    return answer, any(s.correct for s in samples if s.pred == answer)


def default_ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def problem_text(prompt: str, limit: int = 80) -> str:
    """The bare problem inside a decoded chat prompt (the kit's template stripped), shortened for a table."""
    from recipes.retool.prompts import PROMPT_TEMPLATE

    text = prompt
    if "user\n" in text:
        text = text.rsplit("user\n", 1)[1]
    text = re.sub(r"\s*assistant\s*$", "", text)
    head, _, tail = PROMPT_TEMPLATE.partition("{problem}")
    if text.startswith(head.strip()[:40]):
        text = text[len(head.strip()) :]
        text = text.split(tail.strip()[:40])[0]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


@dataclass
class Report:
    """Everything ``retool-eval`` prints; ``to_json`` is its JSON output."""

    files: list[str]
    samples: int
    steps: list[int]
    ks: dict[str, list[int]] = field(default_factory=dict)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)
    tool_use: dict[str, Any] = field(default_factory=dict)
    unmatched: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _tool_summary(samples: Sequence[Sample]) -> dict[str, Any]:
    n = len(samples)
    return {
        "samples": n,
        "tool_calls": sum(s.tool_calls for s in samples),
        "tool_calls_well_formed": sum(s.tool_calls_ok for s in samples),
        "tool_rounds": sum(s.tool_rounds for s in samples),
        "tool_rounds_per_response": _mean(s.tool_rounds for s in samples),
        "responses_with_tool": sum(1 for s in samples if s.tool_rounds > 0),
        "code_errors": sum(s.code_errors for s in samples),
        "timeouts": sum(s.timeouts for s in samples),
        "sandbox_failures": sum(s.sandbox_failures for s in samples),
        "response_chars_mean": _mean(s.length_chars for s in samples),
        "response_chars_max": max((s.length_chars for s in samples), default=0),
        "response_tokens_mean": (
            _mean(s.length_tokens for s in samples if s.length_tokens is not None)
            if any(s.length_tokens is not None for s in samples)
            else None
        ),
    }


def evaluate(samples: Sequence[Sample], ks: Sequence[int] | None = None) -> Report:
    """Per-source and per-problem metrics (see the module docstring for the definitions)."""
    report = Report(files=[], samples=len(samples), steps=sorted({s.step for s in samples if s.step is not None}))
    by_source: dict[str, dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        by_source[sample.data_source][sample.prompt].append(sample)
    for source in sorted(by_source):
        problems = by_source[source]
        n_min = min(len(group) for group in problems.values())
        wanted = sorted({k for k in (ks or default_ks(n_min)) if k <= n_min})
        report.ks[source] = wanted
        rows = []
        for prompt, group in problems.items():
            n, c = len(group), sum(s.correct for s in group)
            strict = sum(s.correct_strict for s in group)
            voted, maj_ok = majority_correct(group)
            row = {
                "data_source": source,
                "problem": problem_text(prompt),
                "ground_truth": group[0].ground_truth,
                "n": n,
                "correct": c,
                "correct_strict": strict,
                f"mean@{n}": c / n,
                f"strict_mean@{n}": strict / n,
                f"best@{n}": float(c > 0),
                f"maj@{n}": float(maj_ok),
                "majority_answer": voted,
                **{f"pass@{k}": pass_at_k(n, c, k) for k in wanted},
                "tool_rounds_mean": _mean(s.tool_rounds for s in group),
                "response_chars_mean": _mean(s.length_chars for s in group),
            }
            rows.append(row)
            report.problems.append(row)
        metrics: dict[str, Any] = {"problems": len(rows), "samples": sum(r["n"] for r in rows), "n": n_min}
        metrics[f"mean@{n_min}"] = _mean(r["correct"] / r["n"] for r in rows)
        metrics[f"strict_mean@{n_min}"] = _mean(r["correct_strict"] / r["n"] for r in rows)
        metrics[f"best@{n_min}"] = _mean(float(r["correct"] > 0) for r in rows)
        metrics[f"maj@{n_min}"] = _mean(r[f"maj@{r['n']}"] for r in rows)
        for k in wanted:
            metrics[f"pass@{k}"] = _mean(r[f"pass@{k}"] for r in rows)
        metrics["tool_use"] = _tool_summary([s for group in problems.values() for s in group])
        report.sources[source] = metrics
    report.tool_use = _tool_summary(samples)
    return report


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def to_markdown(report: Report) -> str:
    out = [f"# ReTool evaluation: {report.samples} samples" + (f", step {report.steps}" if report.steps else "")]
    out += ["", "Files: " + ", ".join(report.files), ""]
    if report.unmatched:
        out += [f"{report.unmatched} samples matched no --data prompt (data source `all`).", ""]
    out += ["## Accuracy per data source", ""]
    out += [
        "mean@k: the kit's verifier (the reward's `acc`); strict mean@k: verl's `math_dapo` strict `\\boxed{}` "
        "match (`acc_strict`), the rule the published ReTool results were scored with.",
        "",
    ]
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = defaultdict(list)  # one table per (n, ks)
    for source, m in report.sources.items():
        groups[(m["n"], tuple(report.ks[source]))].append(source)
    for (n, ks), sources in groups.items():
        header = ["data source", "problems", "samples", f"mean@{n}", f"strict mean@{n}", f"maj@{n}", f"best@{n}"]
        header += [f"pass@{k}" for k in ks]
        rows = []
        for source in sources:
            m = report.sources[source]
            row = [source, m["problems"], m["samples"], m[f"mean@{n}"], m[f"strict_mean@{n}"], m[f"maj@{n}"]]
            row.append(m[f"best@{n}"])
            rows.append(row + [m[f"pass@{k}"] for k in ks])
        out += _table(header, rows) + [""]
    out += ["## Tool use and response length", ""]
    header = ["data source", "tool calls (well-formed)", "rounds/response", "with tool", "code errors", "timeouts"]
    header += ["sandbox failures", "response chars (mean/max)"]
    rows = []
    per_source = [(s, m["tool_use"]) for s, m in report.sources.items()]
    total = [("total", report.tool_use)] if len(per_source) > 1 else []  # one source: its row is the total
    for source, tool in [*per_source, *total]:
        rows.append(
            [
                source,
                f"{tool['tool_calls']} ({tool['tool_calls_well_formed']})",
                tool["tool_rounds_per_response"],
                f"{tool['responses_with_tool']}/{tool['samples']}",
                tool["code_errors"],
                tool["timeouts"],
                tool["sandbox_failures"],
                f"{tool['response_chars_mean']:.0f}/{tool['response_chars_max']}",
            ]
        )
    out += _table(header, rows) + ["", "## Per problem", ""]
    header = ["data source", "problem", "answer", "correct/n", "strict/n", "majority", "tool rounds", "chars"]
    rows = [
        [
            p["data_source"],
            p["problem"],
            p["ground_truth"],
            f"{p['correct']}/{p['n']}",
            f"{p['correct_strict']}/{p['n']}",
            p["majority_answer"],
            p["tool_rounds_mean"],
            f"{p['response_chars_mean']:.0f}",
        ]
        for p in report.problems
    ]
    return "\n".join(out + _table(header, rows)) + "\n"


def check_args(args: argparse.Namespace) -> None:
    """Options that cannot work together or with these inputs: a UsageError naming them, before any reading."""
    if args.step is not None and args.all_steps:
        raise UsageError("--step and --all-steps: give one (a step's file, or every step's)")
    if args.quiet and args.json is None and args.markdown is None:
        # issue 44: --quiet alone printed and wrote nothing, exit 0: a run whose report went nowhere
        raise UsageError("--quiet without --json or --markdown: the report would go nowhere", "add --json FILE")
    files = [str(path) for path in args.inputs if path.is_file()]
    if args.step is not None and files:
        raise UsageError(f"--step {args.step} picks a file in a dump folder, but {files[0]} is a file")
    tokenizer = args.tokenizer or ""
    looks_like_path = tokenizer.startswith((".", "/", "~")) or tokenizer.count("/") > 1  # a hub id is org/name
    if looks_like_path and not Path(tokenizer).expanduser().is_dir():
        raise UsageError(f"--tokenizer {tokenizer}: no such folder (a tokenizer folder, or a hub name org/name)")
    for option, target in (("--json", args.json), ("--markdown", args.markdown)):
        if target is not None:
            _refuse_overwriting_an_input(option, target, args)
            check_writable(option, target)
    if args.json is not None and args.markdown is not None and args.json.resolve() == args.markdown.resolve():
        raise UsageError(f"--json and --markdown name the same file {args.json}: give two files")


def _refuse_overwriting_an_input(option: str, target: Path, args: argparse.Namespace) -> None:
    """A report written over the generations it reads would lose them (``retool-eval g.jsonl --json g.jsonl`` did,
    exit 0); a ``.jsonl`` report inside a dump folder would be read as generations the next time."""
    where = target.resolve()
    for given in [*args.inputs, *args.data]:
        source = given.resolve()
        if where == source:
            raise UsageError(f"{option} {target} is the input {given}: writing the report there would destroy it")
        if source.is_dir() and where.parent == source and where.suffix == ".jsonl":
            raise UsageError(
                f"{option} {target} is a .jsonl file in the dump folder {given}: it would be read as "
                "generations next time; write the report elsewhere or with another suffix"
            )


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="retool-eval",
        description="Accuracy (mean@k by the kit's verifier and by verl's strict math_dapo rule, maj@k, best@k, "
        "unbiased pass@k) and tool use of ReTool generations, per data source and per problem, from verl validation "
        "dumps (trainer.validation_data_dir) or any JSONL.",
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("inputs", nargs="+", type=input_path(), help="dump folder(s) or .jsonl file(s)")
    parser.add_argument("--step", type=int, help="in a dump folder, this step's file (default: the last step)")
    parser.add_argument("--all-steps", action="store_true", help="in a dump folder, every step's file together")
    parser.add_argument(
        "--data", type=input_file(), action="append", default=[], help="RL/val parquet: data_source lookup"
    )
    parser.add_argument("--k", type=counts_arg, help="comma-separated k for pass@k (default 1, 2, 4, ... up to n)")
    parser.add_argument("--tokenizer", help="tokenizer (path or name) to also count response tokens")
    parser.add_argument("--tool-name", default="code_interpreter", help="tool a well-formed call must name")
    parser.add_argument("--json", type=output_file(".json"), help="write the report as JSON here")
    parser.add_argument(
        "--markdown",
        type=output_file(".md", ".markdown", ".txt"),
        help="write the report as Markdown here (default: stdout)",
    )
    parser.add_argument("--force", action="store_true", help="replace a --json or --markdown file that exists")
    parser.add_argument("--quiet", action="store_true", help="print nothing to stdout")
    return parser


def token_counter(name: str) -> Callable[[str], int]:
    """How many tokens a response is, without special tokens. A folder with a ``tokenizer.json`` is read by the
    ``tokenizers`` library, the backend a transformers fast tokenizer encodes with, so the count is the same
    (tests/smoke/test_eval.py) without importing transformers and torch: 5 of the eval stage's 7.5 s on a 2-core Xeon
    (the learning check's eval, 2026-12-01). Anything else (a hub name, a slow-only tokenizer) goes through
    transformers' AutoTokenizer."""
    folder = Path(name).expanduser()
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return lambda text: len(fast.encode(text, add_special_tokens=False).ids)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:  # transformers: not a tokenizer folder, a hub name this machine cannot
        # fetch (OSError), or a folder whose config names no tokenizer class (ValueError)
        raise UsageError(f"--tokenizer {name}: cannot load a tokenizer ({exc})") from None
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


def run(args: argparse.Namespace) -> Report:
    files = [f for path in args.inputs for f in dump_files(path, args.step, args.all_steps)]
    records = read_records(files)
    if not records:
        raise UsageError(f"no records in {', '.join(map(str, files))}")
    unknown = [i for i, r in enumerate(records, 1) if not any(key in r for key in OUTPUT_KEYS)]
    if unknown:
        raise UsageError(
            f"{len(unknown)} of {len(records)} records (first: record {unknown[0]}) have no response field "
            f"({', '.join(OUTPUT_KEYS)}): not a generations file?"
        )
    samples = [to_sample(r, args.tool_name or None) for r in records]
    unmatched = 0
    if args.data:
        unmatched = assign_data_sources(samples, data_source_index(args.data))
    if args.tokenizer:
        count = token_counter(args.tokenizer)
        for sample in samples:
            sample.length_tokens = count(sample.response)
    report = evaluate(samples, args.k)
    dropped = sorted({k for k in args.k or () if not any(k in ks for ks in report.ks.values())})
    if dropped:
        most = max(max(ks, default=0) for ks in report.ks.values())
        too_big = ",".join(map(str, dropped))
        raise UsageError(f"--k {too_big}: more than the samples per problem (largest k here: {most})")
    report.files = [str(f) for f in files]
    report.unmatched = unmatched
    return report


@entry_point("retool-eval")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    report = run(args)
    markdown = to_markdown(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown)
    if not args.quiet and not args.markdown:
        print(markdown, end="")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
