"""Score a Hugging Face model on the RL recipe's validation set (AIME) with the kit's sandbox and verifier.

Why: the base model, the merged SFT model (scripts/sft_to_rl.sh) and a merged RL step (scripts/rl_to_hf.sh) are
compared by running each through the same validation: the RL recipe's own, so the prompts, the tool, the sandbox,
the reward (the kit's verifier) and the sampling (``val_kwargs``: n=30, top_p 0.6 in the reference) are those the
RL run reports. verl has the switch for it (``trainer.val_only=True`` with ``val_before_train=True``:
build/verl/verl/trainer/ppo/ray_trainer.py:1256-1263 validates once and returns); this command sets it, with the
model as ``actor_rollout_ref.model.path`` (no RL checkpoint: ``trainer.resume_mode=disable``), no checkpoints
(``trainer.save_freq=-1``), and the validation dumps under ``$CKPT_ROOT/eval/LABEL`` (the run scripts mount
CKPT_ROOT into a container; the launcher checks the folder as it checks checkpoints). It goes through the kit's
launcher (``recipes/run_recipe.sh``): the same config checks, path and sandbox checks, platform setup and rollout
engine (vLLM where it runs) as training. Then ``retool-eval`` reads the dump and writes ``eval.md`` and
``eval.json`` beside it. Three labels, three calls: base, SFT and RL side by side.

    python -m recipes.launch.handoffs.eval_model --recipe qwen3_4b --hw a3 --model DIR --name LABEL [--n 30] [--dry-run]
                                                 [--stack NAME] [--force] [overrides...]

The stack is resolved once in :func:`main` and named to the launcher it runs (``--stack``), so the validation runs
on the stack this command was asked for, whatever the child's environment says.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import default_hardware, stacks
from platforms.cli import add_profile_option, add_stack_option
from platforms.cli_errors import EXIT_OK, KitError, UsageError, check_writable, entry_point, whole_number_arg
from recipes.launch.handoffs import handoff
from recipes.launch.planning.plan import check_user_overrides, hydra_override, override_key
from recipes.launch.run_inputs import catalog, inputs

PROG = "eval_model"
EVAL_DIR = "eval"  # under CKPT_ROOT: one folder per label
DUMP_DIR = "val_generations"
REPORT_FILES = ("eval.md", "eval.json")
VAL_N_KEY = "actor_rollout_ref.rollout.val_kwargs.n"
#: Keys this command sets for what it is: the user cannot move them (--model, --name say where instead).
OWN_KEYS = (
    "actor_rollout_ref.model.path",
    "trainer.val_only",
    "trainer.val_before_train",
    "trainer.resume_mode",
    "trainer.validation_data_dir",
    "trainer.default_local_dir",
)
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class EvalError(KitError):
    """The validation run or the report failed (exit 1)."""


@dataclass(frozen=True)
class Evaluation:
    rl: catalog.Recipe
    hw: str
    model: Path
    label: str
    folder: Path  # $CKPT_ROOT/eval/LABEL
    val_files: list[str]
    overrides: list[str]
    stack: stacks.Stack  # the stack the launcher validates on (its --stack)

    @property
    def dump(self) -> Path:
        return self.folder / DUMP_DIR

    def launch_argv(self, dry_run: bool, no_path_check: bool) -> list[str]:
        """The RL run script's body (recipes/run_recipe.sh: platform setup, then the launcher)."""
        options = [
            "--hw",
            self.hw,
            "--stack",
            self.stack.name,
            *(["--dry-run"] if dry_run else []),
            *(["--no-path-check"] if no_path_check else []),
        ]
        return ["bash", str(catalog.KIT_ROOT / "recipes" / "run_recipe.sh"), self.rl.name, *options, *self.overrides]

    def eval_argv(self) -> list[str]:
        """``retool-eval`` on the dump: per data source (``--data``), response tokens by the model's tokenizer."""
        argv = [str(self.dump), *(f"--data={f}" for f in self.val_files), "--tokenizer", str(self.model)]
        return argv + ["--json", str(self.folder / "eval.json"), "--markdown", str(self.folder / "eval.md")]


def check_model(text: str) -> Path:
    model = Path(text).expanduser().absolute()
    if not model.is_dir():
        raise UsageError(f"--model {model}: no such folder", "a Hugging Face model folder, e.g. scripts/rl_to_hf.sh's")
    if not (model / "config.json").is_file():
        raise UsageError(
            f"--model {model}: no config.json, not a Hugging Face model folder",
            "merge a checkpoint first: scripts/rl_to_hf.sh (RL) or scripts/sft_to_rl.sh (SFT)",
        )
    return model


def val_files_of(value: str) -> list[str]:
    """``data.val_files``'s value as Hydra reads a plain list or a single path: ``[a,b]`` or ``a``."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [item.strip().strip("'\"") for item in text.split(",") if item.strip()]


def plan(args: argparse.Namespace, stack: stacks.Stack, environ: Mapping[str, str]) -> Evaluation:
    """Everything checkable before the launcher runs: the model folder, the label, the user's overrides, the
    report folder (writable; an earlier report kept unless --force)."""
    _, rl = handoff.stage_recipes(args.recipe)
    model = check_model(args.model)
    if not _LABEL.fullmatch(args.name):
        raise UsageError(f"--name {args.name!r}: use letters, digits, '.', '_' and '-' (it names a folder)")
    user_keys = check_user_overrides(args.overrides)
    taken = sorted(user_keys & set(OWN_KEYS))
    if taken:
        raise UsageError(f"{taken[0]}: set by this command", "choose the model with --model, the folder with --name")
    if args.n is not None and VAL_N_KEY in user_keys:
        raise UsageError(f"--n and {VAL_N_KEY}: give one")
    folder = inputs.ckpt_root(environ) / EVAL_DIR / args.name
    check_writable("--name", folder, folder=True)
    earlier = [folder / name for name in (*REPORT_FILES, DUMP_DIR) if (folder / name).exists()]
    if earlier and not args.force:
        raise EvalError(f"{folder} already holds an evaluation ({earlier[0].name})", "pass --force or another --name")
    user_val = [o for o in args.overrides if override_key(o) == "data.val_files"]
    if user_val:
        val_files = val_files_of(user_val[-1].split("=", 1)[1])
    else:
        val = next(i for i in inputs.resolve(rl, args.hw, stack, environ) if i.key == "data.val_files")
        val_files = [val.value]
    ours = [
        hydra_override("actor_rollout_ref.model.path", model),
        "trainer.val_only=True",
        "trainer.val_before_train=True",
        "trainer.resume_mode=disable",
        "trainer.save_freq=-1",
        hydra_override("trainer.validation_data_dir", folder / DUMP_DIR),
        hydra_override("trainer.default_local_dir", folder),
        *([] if user_val else [hydra_override("data.val_files", val_files[0])]),  # VAL_FILE is one file
        *([f"{VAL_N_KEY}={args.n}"] if args.n is not None else []),
    ]
    ours = [item for item in ours if override_key(item) not in user_keys or override_key(item) in OWN_KEYS]
    return Evaluation(rl, args.hw, model, args.name, folder, val_files, ours + list(args.overrides), stack)


def summary(evaluation: Evaluation) -> list[str]:
    """One line per data source from eval.json: what the three labels are compared on."""
    report = json.loads((evaluation.folder / "eval.json").read_text())
    lines = []
    for source, m in report["sources"].items():
        n = m["n"]
        lines.append(
            f"{evaluation.label}: {source}: mean@{n} {m[f'mean@{n}']:.3f}, strict mean@{n} "
            f"{m[f'strict_mean@{n}']:.3f}, maj@{n} {m[f'maj@{n}']:.3f}, best@{n} {m[f'best@{n}']:.3f} "
            f"({m['problems']} problems, {m['samples']} samples, "
            f"{m['tool_use']['tool_rounds_per_response']:.2f} tool rounds/response)"
        )
    return lines


def run(evaluation: Evaluation, force: bool) -> None:
    """The validation run (the launcher execs verl in a child), then the report."""
    from recipes.retool import evaluate

    if force:  # an earlier evaluation under this label: removed before the run, so no stale dump is scored
        for name in REPORT_FILES:
            (evaluation.folder / name).unlink(missing_ok=True)
        shutil.rmtree(evaluation.dump, ignore_errors=True)
    proc = subprocess.run(evaluation.launch_argv(dry_run=False, no_path_check=False), check=False)
    if proc.returncode != 0:
        raise EvalError(f"the validation run failed (exit {proc.returncode}); see its output above")
    if not any(evaluation.dump.glob("*.jsonl")):
        raise EvalError(f"the validation run wrote no dump in {evaluation.dump}")
    evaluate.main([*evaluation.eval_argv(), "--quiet"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/eval_model.sh",
        description="Score a Hugging Face model on the RL recipe's validation set (AIME) with the kit's sandbox, "
        "verifier and retool-eval: the RL recipe run with trainer.val_only=True through the kit's launcher (its "
        "checks, the sandbox check, vLLM rollout), then retool-eval on the dump. Anything that is not an option is "
        "a Hydra override for verl.",
        epilog=f"Writes $CKPT_ROOT/{EVAL_DIR}/LABEL/{{{DUMP_DIR}/,eval.md,eval.json}}. Inputs as for the run "
        "scripts (DATA_DIR / VAL_FILE / TRAIN_FILE, RETOOL_SANDBOX_URL, CKPT_ROOT; see recipes/run_recipe.sh "
        "--help). Base, SFT and RL side by side: the same command three times with three --model/--name.",
    )
    parser.add_argument("--recipe", default="qwen3_4b", help="qwen3_4b, qwen2.5_7b or qwen2.5_32b (its RL recipe runs)")
    add_profile_option(parser, "hardware profile (default: KIT_HW, else this machine's)")
    add_stack_option(parser)
    parser.add_argument("--model", required=True, help="Hugging Face model folder (base, merged SFT or merged RL)")
    parser.add_argument("--name", required=True, help="label: the report goes to $CKPT_ROOT/eval/LABEL")
    parser.add_argument(
        "--n", type=whole_number_arg(1), help=f"samples per problem ({VAL_N_KEY}; default the recipe's)"
    )
    parser.add_argument("--force", action="store_true", help="replace an earlier evaluation under this label")
    parser.add_argument("--dry-run", action="store_true", help="the launcher's dry run and the report's command")
    parser.add_argument("--no-path-check", action="store_true", help="with --dry-run: skip model/data/sandbox checks")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for verl (key=value)")
    return parser


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    stack = stacks.export(stacks.resolve(args.stack))
    handoff.stage_recipes(args.recipe)  # a wrong --recipe is named before the platform is probed (imports torch)
    if args.no_path_check and not args.dry_run:
        raise UsageError("--no-path-check plans for elsewhere: use it with --dry-run")
    args.hw = args.profile or default_hardware(planning=args.dry_run)  # a bad KIT_HW raises a UsageError
    evaluation = plan(args, stack, os.environ)
    report = evaluation.folder / "eval.md"
    if args.dry_run:
        proc = subprocess.run(evaluation.launch_argv(dry_run=True, no_path_check=args.no_path_check), check=False)
        print(f"then: retool-eval {' '.join(evaluation.eval_argv())}")
        print(f"report: {report} (dry run: nothing evaluated)")
        return proc.returncode
    run(evaluation, args.force)
    print("\n".join(summary(evaluation)))
    print(f"report: {report} and eval.json (dump: {evaluation.dump})")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
