"""The learning check's task: products only the code interpreter computes, and data that leave RL something to learn.

Task: "What is a * b?" with a and b four-digit numbers. SmolLM2-135M cannot multiply in its head ("4831 * 2917 =
144342." greedy: a wrong number every time at this size); with the tool it writes ``print(a * b)``, reads the
seven- or eight-digit product back and boxes it. What it has to do is within its reach: copy two numbers from the
question into the call and one from the tool's output into the answer.

Data, in the real source schemas (so they pass through ``retool-prepare`` like the real datasets), with a short
question as the user message (``retool-prepare sft --keep-prompts``; RL and validation rows already in the kit's RL
schema): the kit's long instruction would triple every sequence the CPU trains on.

* SFT (JoeYing/ReTool-SFT raw rows): a share ``tool_share`` of the trajectories call the tool and answer right; the
  rest answer at once with a guess (the product with its last digits made up), which is wrong. SFT teaches the
  format and the copies; the policy it leaves calls the tool only sometimes, which is what RL has to change (as in
  ReTool, where RL raises tool use and accuracy together).
* RL train and validation: products never seen in SFT, and the validation products never seen in training.

Deterministic for a seed: ``python -m recipes.smoke.learn_data --out DIR --seed 1``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platforms.cli_errors import entry_point
from recipes.retool.schema import ABILITY, AGENT_NAME

OPERANDS = range(1000, 10000)
#: The validation split's data_source: what the val metrics are keyed by (val-core/<source>/acc/mean@k).
VAL_SOURCE = "product"
TRAIN_SOURCE = "product_train"
#: Trailing digits of the product a guess makes up (the leading ones a model might estimate).
GUESSED_DIGITS = 4


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def text(self) -> str:
        return f"What is {self.a} * {self.b}? Put the result in \\boxed{{}}."

    @property
    def code(self) -> str:
        return f"print({self.a} * {self.b})"

    @property
    def output(self) -> str:
        return str(self.a * self.b)

    @property
    def answer(self) -> str:
        return self.output

    def guess(self, rng: random.Random) -> str:
        """A wrong answer of the right length: the product's leading digits, the last ones made up."""
        head = self.output[:-GUESSED_DIGITS]
        while True:
            tail = "".join(str(rng.randrange(10)) for _ in range(GUESSED_DIGITS))
            if head + tail != self.output:
                return head + tail


@dataclass(frozen=True)
class Sizes:
    """Rows per split and the share of SFT trajectories that use the tool."""

    sft: int = 96
    train: int = 256
    #: 128 held-out problems (64 until CI's run of stop 60): recipes/smoke/learn.py's MIN_VAL_SAMPLES says why. The
    #: draws are sequential, so a seed's SFT and RL-train rows and its first 64 validation rows did not change.
    val: int = 128
    tool_share: float = 0.5


def split(seed: int, sizes: Sizes) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """Disjoint SFT, RL-train and validation problems (no product asked twice), drawn by ``seed``."""
    rng = random.Random(seed)
    need = sizes.sft + sizes.train + sizes.val
    problems: dict[tuple[int, int], Problem] = {}
    while len(problems) < need:
        a, b = rng.choice(OPERANDS), rng.choice(OPERANDS)
        problems.setdefault((min(a, b), max(a, b)), Problem(a, b))
    drawn = list(problems.values())
    return drawn[: sizes.sft], drawn[sizes.sft : sizes.sft + sizes.train], drawn[sizes.sft + sizes.train :]


def sft_row(problem: Problem, with_tool: bool, rng: random.Random) -> dict[str, Any]:
    """A ReTool-SFT raw row: with the tool, the code, its output and the right answer; without, a guess."""
    if with_tool:
        text = (
            f"<code>\n```python\n{problem.code}\n```\n</code>\n<interpreter>\n{problem.output}\n</interpreter>\n"
            f"<answer>\nThe result is \\boxed{{{problem.answer}}}.\n</answer>"
        )
    else:
        text = f"<answer>\nThe result is \\boxed{{{problem.guess(rng)}}}.\n</answer>"
    return {"messages": [{"role": "user", "content": problem.text}, {"role": "assistant", "content": text}]}


def rl_row(problem: Problem, source: str, index: int, split_name: str) -> dict[str, Any]:
    """A row in the kit's RL schema (``retool-prepare`` passes such rows through, checked)."""
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": problem.text}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": problem.answer},
        "agent_name": AGENT_NAME,
        "extra_info": {"index": index, "split": split_name, "problem": problem.text},
    }


def build(seed: int, sizes: Sizes = Sizes()) -> dict[str, list[dict[str, Any]]]:
    """File name -> rows (``learn_sft.jsonl``, ``learn_train.jsonl``, ``learn_val.jsonl``)."""
    sft, train, val = split(seed, sizes)
    rng = random.Random(seed + 1)
    tools = set(rng.sample(range(len(sft)), round(sizes.tool_share * len(sft))))
    return {
        "learn_sft.jsonl": [sft_row(p, i in tools, rng) for i, p in enumerate(sft)],
        "learn_train.jsonl": [rl_row(p, TRAIN_SOURCE, i, "train") for i, p in enumerate(train)],
        "learn_val.jsonl": [rl_row(p, VAL_SOURCE, i, "test") for i, p in enumerate(val)],
    }


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
