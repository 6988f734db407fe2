"""Write the smoke run's input fixtures (``recipes/smoke/data/*.jsonl``) in the real source schemas.

Why generated, and why this shape: the smoke must push data through ``retool-prepare`` exactly as a real run does,
so every file is in the schema of the dataset it stands for (JoeYing/ReTool-SFT raw trajectories, DAPO-Math-17k
rows, AIME 2025 ``problem``/``answer`` rows). But the model is a 64-wide, 2-layer random Qwen3 that gets a few
hundred CPU steps of SFT, so the trajectories are deliberately short and regular: one ``print(<expression>)`` code
call, its output, and a bare ``\\boxed{}`` answer. That is what lets the tiny model learn to open every answer with a
well-formed hermes ``<tool_call>`` (which the RL stage then sends to the sandbox), in seconds instead of hours.
The numbers are drawn with a fixed seed, so the shipped files are reproducible (``tests/smoke`` checks it):

    python -m recipes.smoke.make_data [--out recipes/smoke/data]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from platforms.cli_errors import entry_point

DATA_DIR = Path(__file__).resolve().parent / "data"
SEED = 20250101
N_SFT, N_RL, N_VAL = 96, 32, 6

# The original ReTool-SFT user template (JoeYing/ReTool-SFT), which retool-prepare strips back to the problem.
RETOOL_TEMPLATE = (
    "Solve the following problem step by step. You now have the ability to selectively write executable Python "
    "code to enhance your reasoning process. The Python code will be executed by an external sandbox, and the output "
    "(wrapped in `<interpreter>output_str</interpreter>`) can be returned to aid your reasoning and help you arrive "
    "at the final answer. The Python code should be complete scripts, including necessary imports. \nEach code "
    "snippet is wrapped with `<code>\n```python\ncode snippet\n```\n</code>`.\nThe last part of your response should "
    "be in the following format:\n<answer>\n\\boxed{'The final answer goes here.'}\n</answer>\n\n*user question:*\n"
    "Answer the following Math Problem and put the answer in the format of \\boxed{answer}\n\n{problem}\n\n\n"
    "Remember to place the final answer in the last part using the format: \n<answer>\n"
    "\\boxed{'The final answer goes here.'}\n</answer>"
)
# DAPO-Math-17k's wrapper around every problem (retool-prepare strips it too).
DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)

# (problem text, Python expression) makers; the answer is what the expression prints. Single-digit operands on
# purpose: a 2-layer model can then close every number from local context (the digit after "(" is followed by the
# operator, the digit after the operator by ")"), where multi-digit numbers need counting it does not learn in
# minutes, and a call it cannot close is not parseable and never reaches the sandbox.
Maker = Callable[[random.Random], tuple[str, str]]
MAKERS: tuple[Maker, ...] = (
    lambda r: (lambda a, b: (f"What is ${a} \\times {b}$?", f"{a} * {b}"))(r.randint(2, 9), r.randint(2, 9)),
    lambda r: (lambda a, b: (f"Compute ${a} + {b}$.", f"{a} + {b}"))(r.randint(1, 9), r.randint(1, 9)),
    lambda r: (lambda a, b: (f"What is ${a} - {b}$?", f"{a} - {b}"))(r.randint(1, 9), r.randint(1, 9)),
)


def problems(rng: random.Random, n: int, seen: set[str]) -> Iterator[tuple[str, str, int]]:
    """``n`` distinct (problem, expression, answer) triples not in ``seen`` (train and val never overlap)."""
    made = 0
    while made < n:
        problem, expr = MAKERS[made % len(MAKERS)](rng)
        if problem in seen:
            continue
        seen.add(problem)
        made += 1
        yield problem, expr, eval(expr)  # noqa: S307  (our own arithmetic literals)


def sft_row(problem: str, expr: str, answer: int) -> dict[str, Any]:
    """A JoeYing/ReTool-SFT raw row: ReTool-template user turn, one assistant string with code and output."""
    assistant = (
        f"<code>\n```python\nprint({expr})\n```\n</code>\n<interpreter>\n{answer}\n</interpreter>\n"
        f"<answer>\n\\boxed{{{answer}}}\n</answer>"
    )
    return {
        "messages": [
            {"role": "user", "content": RETOOL_TEMPLATE.replace("{problem}", problem)},
            {"role": "assistant", "content": assistant},
        ]
    }


def dapo_row(problem: str, answer: int, index: int) -> dict[str, Any]:
    """A BytedTsinghua-SIA/DAPO-Math-17k row."""
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": DAPO_TEMPLATE.replace("{problem}", problem), "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": str(answer), "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": f"smoke-{index:04d}"},
    }


def val_row(problem: str, answer: int, index: int) -> dict[str, Any]:
    """A row in the yentinglin/aime_2025 schema (``problem``/``answer``), the validation sets' layout."""
    return {"problem": problem, "answer": str(answer), "id": index, "solution": "", "url": "", "year": 2025}


def build() -> dict[str, list[dict[str, Any]]]:
    """File name -> rows, deterministic for :data:`SEED`."""
    rng = random.Random(SEED)
    seen: set[str] = set()
    sft = [sft_row(p, e, a) for p, e, a in problems(rng, N_SFT, seen)]
    rl = [dapo_row(p, a, i) for i, (p, _, a) in enumerate(problems(rng, N_RL, seen))]
    val = [val_row(p, a, i) for i, (p, _, a) in enumerate(problems(rng, N_VAL, seen))]
    return {"retool_sft.jsonl": sft, "dapo_math.jsonl": rl, "smoke_val.jsonl": val}


def render(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


@entry_point("python -m recipes.smoke.make_data")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.smoke.make_data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in build().items():
        (args.out / name).write_text(render(rows))
        print(f"wrote {len(rows)} rows to {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
