"""The dry runs whose output is held byte for byte (tests/recipes/test_dry_run_golden.py), and how to record them.

Why: issue 41 moved every number of the dry-run table into the plan (computed once, then only formatted); a refactor of
that kind must not change one byte of what a user sees or of the command a launch runs. Each case is the launcher's
``run RECIPE --dry-run`` in-process, with a fixed environment (HOME and the data under a temporary folder), its stdout
normalised only for the paths that differ between machines (the temporary folder, the kit's root, the interpreter).

Record again after an intended change of the output (and read the diff before committing it)::

    .venv/bin/python tests/dry_run_cases.py --write tests/fixtures/dry_runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit_testing import LAUNCH_VARS

REPO_ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = REPO_ROOT / "tests" / "fixtures" / "dry_runs"
RECIPES = ("qwen3_4b_sft", "qwen3_4b_dapo", "qwen2.5_7b_sft", "qwen2.5_7b_dapo", "qwen2.5_32b_sft", "qwen2.5_32b_dapo")
PROFILES = ("a2", "a3", "cuda", "h200", "cpu")
#: Rows of the training parquet a case can ask for (steps per epoch, total steps and checkpoint count follow it).
TRAIN_ROWS = 1000
#: What the launcher reads from the environment (kit_testing.LAUNCH_VARS) and the kernels' switches: unset for every
#: case, so a case is a function of its own environment.
CLEARED = (*LAUNCH_VARS, "KIT_FUSED_KERNELS", "KIT_FUSED_OPS")


@dataclass(frozen=True)
class Case:
    """One dry run: the launcher's arguments after ``run``, extra environment, and whether it reads a parquet."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    train_parquet: bool = False  # TRAIN_FILE = a parquet of TRAIN_ROWS rows (the step arithmetic then has numbers)
    model: bool = False  # MODEL_PATH = a folder with a small config.json (the table then reads the model's shape)


def cases() -> list[Case]:
    """Every recipe on every profile (30), then the shapes that exercise the rest of the table's arithmetic."""
    found = [
        # the cpu profile's SFT default is the kit's tiny model in build/, there or not: a model folder of its own
        Case(f"{r}__{hw}", (r, "--hw", hw, "--dry-run", "--no-path-check"), model=hw == "cpu" and r.endswith("_sft"))
        for r in RECIPES
        for hw in PROFILES
    ]
    found += [
        Case("qwen3_4b_dapo__a3__rows", ("qwen3_4b_dapo", "--hw", "a3", "--dry-run", "--no-path-check"), {}, True),
        Case("qwen3_4b_sft__a2__rows", ("qwen3_4b_sft", "--hw", "a2", "--dry-run", "--no-path-check"), {}, True),
        Case(
            "qwen2.5_7b_dapo__a2__save5_n8",
            ("qwen2.5_7b_dapo", "--hw", "a2", "--dry-run", "--no-path-check")
            + ("trainer.save_freq=5", "actor_rollout_ref.rollout.n=8", "trainer.total_epochs=2"),
            {},
            True,
        ),
        Case(
            "qwen3_4b_dapo__a3__two_nodes",
            ("qwen3_4b_dapo", "--hw", "a3", "--dry-run", "--no-path-check", "trainer.nnodes=2"),
        ),
        Case(
            "qwen2.5_32b_sft__a3__two_nodes",
            ("qwen2.5_32b_sft", "--hw", "a3", "--dry-run", "--no-path-check", "trainer.nnodes=2"),
            {"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "0"},
        ),
        Case("qwen3_4b_dapo__a2__parity", ("qwen3_4b_dapo", "--hw", "a2", "--dry-run", "--no-path-check", "--parity")),
        # refused (the layout divides 2 CPU ranks by SP 4): the errors are held too
        Case(
            "qwen3_4b_dapo__cpu__full",
            ("qwen3_4b_dapo", "--hw", "cpu", "--dry-run", "--no-path-check", "--scale", "full"),
        ),
        Case(
            "qwen3_4b_dapo__cuda__ray_address",
            ("qwen3_4b_dapo", "--hw", "cuda", "--dry-run", "--no-path-check"),
            {"RAY_ADDRESS": "10.0.0.1:6379"},
        ),
        Case(
            "qwen3_4b_sft__h200__batch_epochs",
            ("qwen3_4b_sft", "--hw", "h200", "--dry-run", "--no-path-check")
            + ("data.train_batch_size=64", "trainer.total_epochs=3", "trainer.total_training_steps=20"),
            {},
            True,
        ),
        Case(
            "qwen2.5_32b_dapo__a3__max_restarts",
            ("qwen2.5_32b_dapo", "--hw", "a3", "--dry-run", "--no-path-check", "--max-restarts", "2")
            + ("trainer.save_freq=10",),
        ),
    ]
    return found


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for name in CLEARED:
        os.environ.pop(name, None)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _train_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(TRAIN_ROWS)]}), path)
    return path


def _model(path: Path) -> Path:
    """A model folder whose config.json gives a shape (tests/recipes/conftest.py ``make_model``'s)."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "vocab_size": 512,
        "tie_word_embeddings": True,
    }
    (path / "config.json").write_text(json.dumps(config))
    return path


def normalise(text: str, tmp: Path) -> str:
    """The output less what differs between machines: the temporary folder, the kit's root, the interpreter."""
    return text.replace(str(tmp), "<TMP>").replace(sys.executable, "<PYTHON>").replace(str(REPO_ROOT), "<KIT>")


#: "patch 0028", "patches 0017/0025", "patches/0.9.1/0006": a patch of a series named in what a user reads.
_PATCH_NUMBER = re.compile(r"\bpatch(?:es)?[ /](?:0\.9\.1/)?(\d{4})\b")


def foreign_patches(text: str, stack: Any) -> list[str]:
    """The patch numbers ``text`` credits that ``stack``'s series (``Stack.patch_dir``) lacks: a message of another
    stack (issue 52 row 5: 0.9.1's dry run credited the reference's patch 0028)."""
    series = {path.name[:4] for path in stack.patch_dir.glob("*.patch")}
    return sorted({number for number in _PATCH_NUMBER.findall(text) if number not in series})


def run_case(case: Case, tmp: Path) -> tuple[int, str]:
    """(exit status, normalised stdout) of one dry run, in this process, as ``recipes/run_recipe.sh`` runs it."""
    from recipes.launch import cli

    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), **case.env}
    if case.train_parquet:
        env["TRAIN_FILE"] = str(_train_parquet(tmp / "data" / "train.parquet"))
    if case.model:
        env["MODEL_PATH"] = str(_model(tmp / "model"))
    out = io.StringIO()
    with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["run", *case.args])
    return rc, normalise(out.getvalue(), tmp)


def record(rc: int, text: str) -> str:
    """What a golden file holds: the exit status on the first line, then the normalised stdout."""
    return f"# exit {rc}\n{text}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, required=True, metavar="DIR", help="folder for <case>.txt")
    args = parser.parse_args()
    import tempfile

    args.write.mkdir(parents=True, exist_ok=True)
    for case in cases():
        with tempfile.TemporaryDirectory() as tmp:
            rc, text = run_case(case, Path(tmp))
        (args.write / f"{case.name}.txt").write_text(record(rc, text))
    print(f"{len(cases())} dry runs written to {args.write}")
    return 0


if __name__ == "__main__":
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    sys.exit(main())
