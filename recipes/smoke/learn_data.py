"""The learning check's task: a question only the code interpreter can answer, and data that leave room to learn.

Task: "What is the last digit of $a^{b}$?" with a in {2, 3, 7, 8} and a two-digit b. The last digit cycles with
period 4 in b for these bases, so a model that cannot compute guesses right about one time in four at best; with the
tool it writes ``print(a**b)``, reads a 7-90 digit number back and boxes its last digit. Everything it has to learn
is within reach of the smoke's 64-wide, 2-layer model: two one-digit and one two-digit copy from the prompt into the
call, and one copy of the digit that ends the tool output.

Data, in the real source schemas (so they pass through ``retool-prepare`` like the real datasets):

* SFT (JoeYing/ReTool-SFT raw rows): a share ``tool_share`` of the trajectories call the tool and answer right; the
  rest answer at once with a guessed digit. SFT teaches the format and the copy; the policy it leaves calls the tool
  only sometimes, which is what RL has to change (as in ReTool, where RL raises tool use and accuracy together).
* RL train (DAPO-Math-17k rows) and validation (``problem``/``answer`` rows): problems never seen in SFT, and the
  validation problems never seen in training.

Deterministic for a seed: ``python -m recipes.smoke.learn_data --out DIR --seed 1``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_kernels.cli_errors import entry_point
from recipes.smoke.make_data import DAPO_TEMPLATE, RETOOL_TEMPLATE

BASES = (2, 3, 7, 8)
EXPONENTS = range(11, 100)
#: The validation split's data_source: what the val metrics are keyed by (val-core/<source>/acc/mean@k).
VAL_SOURCE = "last_digit"


@dataclass(frozen=True)
class Problem:
    base: int
    exponent: int

    @property
    def text(self) -> str:
        return f"What is the last digit of ${self.base}^{{{self.exponent}}}$?"

    @property
    def code(self) -> str:
        return f"print({self.base}**{self.exponent})"

    @property
    def output(self) -> str:
        return str(self.base**self.exponent)

    @property
    def answer(self) -> str:
        return self.output[-1]


@dataclass(frozen=True)
class Sizes:
    """Rows per split and the share of SFT trajectories that use the tool."""

    sft: int = 128
    train: int = 96
    val: int = 64
    tool_share: float = 0.5


def split(seed: int, sizes: Sizes) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """Disjoint SFT, RL-train and validation problems, shuffled by ``seed``."""
    problems = [Problem(a, b) for a in BASES for b in EXPONENTS]
    need = sizes.sft + sizes.train + sizes.val
    if need > len(problems):
        raise ValueError(f"{need} problems asked for, the task has {len(problems)}")
    random.Random(seed).shuffle(problems)
    return (
        problems[: sizes.sft],
        problems[sizes.sft : sizes.sft + sizes.train],
        problems[sizes.sft + sizes.train : need],
    )


def sft_row(problem: Problem, with_tool: bool, guess: str) -> dict[str, Any]:
    """A ReTool-SFT raw row: with the tool, the code, its output and the right answer; without, a guess."""
    answer = f"<answer>\n\\boxed{{{problem.answer if with_tool else guess}}}\n</answer>"
    if with_tool:
        answer = (
            f"<code>\n```python\n{problem.code}\n```\n</code>\n<interpreter>\n{problem.output}\n</interpreter>\n"
            + answer
        )
    return {
        "messages": [
            {"role": "user", "content": RETOOL_TEMPLATE.replace("{problem}", problem.text)},
            {"role": "assistant", "content": answer},
        ]
    }


def build(seed: int, sizes: Sizes = Sizes()) -> dict[str, list[dict[str, Any]]]:
    """File name -> rows (``learn_sft.jsonl``, ``learn_train.jsonl``, ``learn_val.jsonl``)."""
    sft, train, val = split(seed, sizes)
    rng = random.Random(seed + 1)
    tools = set(rng.sample(range(len(sft)), round(sizes.tool_share * len(sft))))
    sft_rows = [sft_row(p, i in tools, str(rng.randrange(10))) for i, p in enumerate(sft)]
    train_rows = [
        {
            "data_source": "learn_train",
            "prompt": [{"role": "user", "content": DAPO_TEMPLATE.replace("{problem}", p.text)}],
            "ability": "MATH",
            "reward_model": {"ground_truth": p.answer, "style": "rule"},
            "extra_info": {"index": f"learn-{i:04d}"},
        }
        for i, p in enumerate(train)
    ]
    val_rows = [{"problem": p.text, "answer": p.answer, "id": i} for i, p in enumerate(val)]
    return {"learn_sft.jsonl": sft_rows, "learn_train.jsonl": train_rows, "learn_val.jsonl": val_rows}


def write(out: Path, seed: int, sizes: Sizes = Sizes()) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in build(seed, sizes).items():
        paths[name] = out / name
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


@entry_point("python -m recipes.smoke.learn_data")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.smoke.learn_data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=1, help="problem split and SFT mix (default 1)")
    parser.add_argument("--tool-share", type=float, default=Sizes.tool_share, help="SFT rows that call the tool")
    args = parser.parse_args(argv)
    if not 0 <= args.tool_share <= 1:
        parser.error(f"--tool-share must be between 0 and 1, got {args.tool_share}")
    for path in write(args.out, args.seed, Sizes(tool_share=args.tool_share)).values():
        print(f"wrote {path} ({sum(1 for _ in path.open())} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
