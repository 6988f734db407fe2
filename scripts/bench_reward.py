#!/usr/bin/env python3
"""Benchmark the kit's ReTool reward against verl's ``math_dapo`` strict-box scorer on realistic responses.

    python scripts/bench_reward.py [--n 512] [--seed 0] [--cpu 0 | --no-pin] [--json out.json]

Builds ``--n`` long multi-turn responses (reasoning text, hermes tool calls, tool outputs as verl decodes them,
integer ground truths like AIME / DAPO-Math-17k) ending in the answer formats models actually produce, then, in
one run on the same inputs: times ``recipes/retool/reward.py:compute_score`` (total and per call, pinned to one
core; the math-verify worker start is timed apart as a one-off) and verl's
``math_dapo.compute_score(strict_box_verify=True)``, and prints an agreement table on correctness plus every
case where the two disagree. Target: the 512 responses in under 0.5 s on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from platforms.cli_errors import entry_point  # noqa: E402
from recipes.retool.reward import compute_score  # noqa: E402
from recipes.retool.verify import math_verify_pool  # noqa: E402

SENTENCES = [
    "Let me set up the problem carefully before computing anything.",
    "We can rewrite the condition as a congruence and count the residues.",
    "By symmetry it suffices to consider the case where $a \\le b$.",
    "Substituting $x = 2\\cos\\theta$ turns the equation into a trigonometric identity.",
    "The discriminant must be a perfect square, so $k^2 - 4m = t^2$ for some integer $t$.",
    "This gives a telescoping sum, and most of the terms cancel.",
    "Wait, I should double-check the boundary case $n = 0$.",
    "Using Vieta's formulas, the sum of the roots is $\\frac{b}{a}$ with the sign flipped.",
    "Let me verify this numerically with a quick script rather than trusting the algebra.",
    "Hmm, that does not match the earlier estimate, so something is off in the second step.",
    "The number of lattice points on the segment is $\\gcd(p, q) + 1$.",
    "So the probability is $\\frac{m}{n}$ in lowest terms and we need $m + n$.",
]
CODE = [
    "from itertools import product\n"
    "count = sum(1 for a, b in product(range(1, 21), repeat=2) if a + b == 21 and a < b)\ncount",
    "import sympy as sp\nx = sp.symbols('x')\nsp.factor(x**4 - 5*x**2 + 4)",
    "total = 0\nfor n in range(1, 1000):\n    if n % 7 == 3 and n % 11 == 5:\n        total += n\nprint(total)",
    "from fractions import Fraction\np = Fraction(5, 36) + Fraction(1, 6)\nprint(p, p.numerator + p.denominator)",
]
TRAILER = " I am confident in this result because the numeric check agrees with the algebraic derivation above."


@dataclass
class Case:
    index: int
    fmt: str
    ground_truth: str
    response: str
    num_turns: int


def _reasoning(rng: random.Random, n_sentences: int) -> str:
    return " ".join(rng.choice(SENTENCES) for _ in range(n_sentences))


def _turns(rng: random.Random, rounds: int) -> str:
    """Reasoning with ``rounds`` tool calls, rendered like verl decodes a Qwen trajectory (specials skipped)."""
    parts = []
    for _ in range(rounds):
        code = rng.choice(CODE)
        call = json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
        output = str(rng.randint(1, 10**6))
        parts.append(f"{_reasoning(rng, rng.randint(6, 30))}\n<tool_call>\n{call}\n</tool_call>\n")
        parts.append(f"user\n<tool_response>\n{output}\n</tool_response>\nassistant\n")
    parts.append(_reasoning(rng, rng.randint(10, 60)))
    return "".join(parts)


def _wrong(rng: random.Random, gt: int) -> int:
    return gt + rng.choice([-1, 1]) * rng.randint(1, 50)


# (name, weight, needs gt >= 1000, builder(rng, gt) -> final text)
FORMATS = [
    ("boxed", 28, False, lambda r, g: f"\n\nTherefore the answer is $\\boxed{{{g}}}$."),
    ("boxed_wrong", 14, False, lambda r, g: f"\n\nThus the answer is \\boxed{{{_wrong(r, g)}}}."),
    ("answer_tag_boxed", 8, False, lambda r, g: f"\n<answer>\n\\boxed{{{g}}}\n</answer>"),
    ("boxed_then_remarks", 6, False, lambda r, g: f"\nSo the answer is \\boxed{{{g}}}.{TRAILER}"),
    ("boxed_spaces", 4, False, lambda r, g: f"\nThe answer is \\boxed{{ {g} }}"),
    ("boxed_decimal", 4, False, lambda r, g: f"\nThe answer is \\boxed{{{g}.0}}"),
    ("boxed_quotes", 5, False, lambda r, g: f"\n<answer>\n\\boxed{{'{g}'}}\n</answer>"),
    ("boxed_degrees", 2, False, lambda r, g: f"\nThe angle is \\boxed{{{g}^\\circ}}."),
    ("boxed_text_unit", 2, False, lambda r, g: f"\nThe length is \\boxed{{{g} \\text{{ cm}}}}."),
    ("boxed_thousands", 2, True, lambda r, g: f"\nThe answer is \\boxed{{{g // 1000}{{,}}{g % 1000:03d}}}."),
    ("boxed_comma", 2, True, lambda r, g: f"\nThe answer is \\boxed{{{g // 1000},{g % 1000:03d}}}."),
    ("boxed_equation", 3, False, lambda r, g: f"\nHence \\boxed{{n = {g}}}."),
    ("fbox", 1, False, lambda r, g: f"\nFinal: \\fbox{{{g}}}"),
    ("boxed_space_arg", 1, False, lambda r, g: f"\nFinal answer: $\\boxed {g}$"),
    ("boxed_frac", 2, False, lambda r, g: f"\nThe answer is \\boxed{{\\frac{{{2 * g}}}{{2}}}}."),
    (
        "boxed_symbolic_wrong",
        2,
        False,
        lambda r, g: f"\nThe answer is \\boxed{{{r.randint(2, 9)}\\sqrt{{{r.choice([2, 3, 5])}}}}}.",
    ),
    ("answer_tag_plain", 3, False, lambda r, g: f"\n<answer>{g}</answer>"),
    ("dapo_answer_line", 3, False, lambda r, g: f"\nAnswer: {g}"),
    ("truncated_no_answer", 5, False, lambda r, g: " and therefore the next step is to"),
    (
        "box_only_in_tool_output",
        1,
        False,
        lambda r, g: f"\nuser\n<tool_response>\n\\boxed{{{g}}}\n</tool_response>\nassistant\nSo",
    ),
]


def build_cases(n: int, seed: int) -> list[Case]:
    """``n`` cases whose answer formats follow the FORMATS weights exactly (every format appears), shuffled."""
    rng = random.Random(seed)
    total = sum(w for _, w, _, _ in FORMATS)
    counts = [max(1, round(n * weight / total)) for _, weight, _, _ in FORMATS]
    while sum(counts) != n:  # absorb rounding in the most common format
        largest = counts.index(max(counts))
        counts[largest] += 1 if sum(counts) < n else -1
    plan = [fmt for fmt, count in zip(FORMATS, counts, strict=True) for _ in range(count)]
    rng.shuffle(plan)
    cases = []
    for index, (name, _, big, build) in enumerate(plan):
        gt = rng.randint(1000, 99999) if big else rng.choice([rng.randint(0, 999), rng.randint(0, 99)])
        rounds = rng.choice([0, 1, 1, 2, 2, 3, 4, 6])
        response = _turns(rng, rounds) + build(rng, gt)
        cases.append(Case(index, name, str(gt), response, 2 * rounds + 2))
    return cases


def pin_to_one_core(cpu: int | None) -> str:
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return "not pinned"
    allowed = sorted(os.sched_getaffinity(0))
    chosen = cpu if cpu in allowed else allowed[0]
    os.sched_setaffinity(0, {chosen})
    return f"pinned to CPU {chosen} (math-verify worker inherits it)"


@dataclass
class Run:
    """Both scorers on the same cases: their results, and how long each took."""

    cases: list[Case]
    ours: list[dict]
    verl: list[dict]
    per_call_s: list[float]
    ours_total_s: float
    verl_total_s: float
    warm_up_s: float


def score_both(cases: list[Case]) -> Run:
    """The kit's reward (per call and in total; the math-verify worker start apart) and verl's strict scorer."""
    print("[bench] importing verl's math_dapo (not timed) ...", flush=True)
    from verl.utils.reward_score import math_dapo

    start = time.perf_counter()
    math_verify_pool().warm_up()
    warm_up_s = time.perf_counter() - start

    ours, per_call = [], []
    start = time.perf_counter()
    for case in cases:
        t0 = time.perf_counter()
        ours.append(compute_score("bench", case.response, case.ground_truth, {"num_turns": case.num_turns}))
        per_call.append(time.perf_counter() - t0)
    ours_total = time.perf_counter() - start

    verl, start = [], time.perf_counter()
    for case in cases:
        verl.append(math_dapo.compute_score(case.response, case.ground_truth, strict_box_verify=True))
    return Run(cases, ours, verl, per_call, ours_total, time.perf_counter() - start, warm_up_s)


def print_timing(run: Run) -> None:
    n, ours_total, verl_total = len(run.cases), run.ours_total_s, run.verl_total_s
    per_call_ms = sorted(t * 1000 for t in run.per_call_s)
    print()
    print(f"kit reward  : {n} responses in {ours_total * 1000:.1f} ms total; per call mean "
          f"{statistics.mean(per_call_ms):.3f} ms, p50 {per_call_ms[len(per_call_ms) // 2]:.3f} ms, "
          f"p99 {per_call_ms[int(len(per_call_ms) * 0.99) - 1]:.3f} ms, max {per_call_ms[-1]:.1f} ms")  # fmt: skip
    print(f"              math-verify worker start (once per process, not included): {run.warm_up_s * 1000:.0f} ms")
    target = "MET" if ours_total < 0.5 else "MISSED"
    print(f"              target < 500 ms for 512 on one core: {target}")
    print(f"verl strict : {n} responses in {verl_total * 1000:.1f} ms total "
          f"({verl_total * 1000 / n:.3f} ms per call)")  # fmt: skip
    methods = Counter(r["verifier"] for r in run.ours)
    print(f"kit deciders: {dict(sorted(methods.items()))}")


def print_agreement(run: Run) -> None:
    """The correctness table, the per-format counts, and every case where the two scorers differ."""
    cases, ours, verl = run.cases, run.ours, run.verl
    table = Counter((bool(o["acc"]), bool(v["acc"])) for o, v in zip(ours, verl, strict=True))
    print("\nAgreement on correctness (rows: kit reward, columns: verl math_dapo strict)")
    print(f"{'':>14} {'verl correct':>13} {'verl wrong':>11}")
    for mine in (True, False):
        label = "kit correct" if mine else "kit wrong"
        print(f"{label:>14} {table[(mine, True)]:>13} {table[(mine, False)]:>11}")
    agree = table[(True, True)] + table[(False, False)]
    print(f"agreement: {agree}/{len(cases)} ({100 * agree / len(cases):.1f}%)")

    by_format: dict[str, Counter] = {}
    for case, o, v in zip(cases, ours, verl, strict=True):
        counter = by_format.setdefault(case.fmt, Counter())
        counter["n"] += 1
        counter["kit"] += bool(o["acc"])
        counter["verl"] += bool(v["acc"])
    print(f"\n{'format':<24} {'n':>4} {'kit correct':>12} {'verl correct':>13}")
    for fmt, _, _, _ in FORMATS:
        c = by_format.get(fmt)
        if c:
            print(f"{fmt:<24} {c['n']:>4} {c['kit']:>12} {c['verl']:>13}")

    differing = [(c, o, v) for c, o, v in zip(cases, ours, verl, strict=True) if bool(o["acc"]) != bool(v["acc"])]
    print(f"\nEvery case where they differ ({len(differing)}):")
    for case, o, v in differing:
        tail = case.response[-70:].replace("\n", "\\n")
        print(f"  #{case.index:<4} {case.fmt:<22} gt={case.ground_truth:<6} kit={o['acc']!s:<5} ({o['verifier']}, "
              f"pred {o['pred']!r}) verl={v['acc']!s:<5} (pred {v['pred']!r}) tail={tail!r}")  # fmt: skip


def write_json(run: Run, path: Path) -> None:
    payload = {
        "timing": {"kit_total_s": run.ours_total_s, "verl_total_s": run.verl_total_s, "warm_up_s": run.warm_up_s},
        "cases": [
            {**asdict(c), "kit": o, "verl": {**v, "acc": bool(v["acc"])}}
            for c, o, v in zip(run.cases, run.ours, run.verl, strict=True)
        ],
    }
    path.write_text(json.dumps(payload, indent=1))


@entry_point("python scripts/bench_reward.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="number of responses (default 512)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=0, help="CPU to pin to (default 0)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    parser.add_argument("--json", type=Path, help="also write cases, results and timings here")
    args = parser.parse_args(argv)

    pinning = pin_to_one_core(None if args.no_pin else args.cpu)
    print(f"[bench] building {args.n} responses (seed {args.seed}); {pinning}", flush=True)
    cases = build_cases(args.n, args.seed)
    chars = [len(c.response) for c in cases]
    print(f"[bench] response length: mean {statistics.mean(chars):,.0f} chars, max {max(chars):,}", flush=True)
    run = score_both(cases)
    print_timing(run)
    print_agreement(run)
    if args.json:
        write_json(run, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
