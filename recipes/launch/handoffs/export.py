"""RL checkpoint -> Hugging Face model: merge ``global_step_N/actor`` of an RL run into a plain HF folder.

Why: verl's RL trainer saves the actor as FSDP shards (``global_step_N/actor/model_world_size_W_rank_R.pt`` with
``fsdp_config.json`` and a ``huggingface/`` folder of config and tokenizer only: build/verl/verl/utils/checkpoint/
fsdp_checkpoint_manager.py:254,284), which neither vLLM nor ``transformers`` load. The kit's SFT hand-off
(:mod:`recipes.launch.handoffs.handoff`, scripts/sft_to_rl.sh) already merges such shards with ``python -m
verl.model_merger merge --backend fsdp``, atomically, with a ``kit_merge.json`` marker and its ``--force`` rules; this
module reuses all of that and differs only where an RL run differs: the run's folder (``$CKPT_ROOT/<rl recipe>_<hw>``),
the shards one level down (``actor/``), and the target, one per step (``<ckpt dir>/hf_step_N``), so the model of step
130 and of step 150 can be scored side by side (scripts/eval_model.sh).

    python -m recipes.launch.handoffs.export --recipe qwen3_4b --hw a3 [--step N] [--ckpt-dir DIR] [--target DIR]
                                             [--stack NAME] [--force] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import stacks
from platforms.cli import add_profile_option, add_stack_option
from platforms.cli_errors import UsageError, check_writable, entry_point, whole_number_arg
from recipes.launch.handoffs import handoff
from recipes.launch.run_inputs import catalog

PROG = "rl_to_hf"


@dataclass(frozen=True)
class Export(handoff.Merge):
    rl: catalog.Recipe
    hw: str
    ckpt_dir: Path
    stack: stacks.Stack  # whose verl merges; the next command it prints names it


def target_name(step: int) -> str:
    return f"hf_step_{step}"


def plan(args: argparse.Namespace, stack: stacks.Stack, environ: dict[str, str] | None = None) -> Export:
    """The run's folder, the step (the tracker, which patch 0017 writes last, names a complete checkpoint; or
    ``--step``), its actor shards checked complete, and the target checked writable: all before the merge."""
    environ = dict(os.environ) if environ is None else environ
    _, rl = handoff.stage_recipes(args.recipe)
    ckpt_dir = handoff.run_ckpt_dir(args, rl, environ)
    layout, sft_layout = stack.verl.checkpoint("rl"), stack.verl.checkpoint("sft")  # what the stack's trainers wrote
    step = args.step if args.step is not None else handoff.latest_step(ckpt_dir, "RL", layout)
    step_dir = layout.step_dir(ckpt_dir, step)
    if not step_dir.is_dir():
        steps = ", ".join(map(str, layout.saved_steps(ckpt_dir))) or "none"
        raise UsageError(f"--step {step}: no {step_dir.name} in {ckpt_dir} (steps saved there: {steps})")
    if not layout.weights_dir(step_dir).is_dir() and (step_dir / sft_layout.fsdp_config).is_file():
        raise UsageError(f"{step_dir} has no {layout.role}/: an SFT checkpoint?", "merge it with scripts/sft_to_rl.sh")
    handoff.check_step_dir(step_dir, layout)
    target = Path(args.target).expanduser().absolute() if args.target else ckpt_dir / target_name(step)
    check_writable("--target", target, folder=True)
    return Export(step, layout.weights_dir(step_dir), target, rl, args.hw, ckpt_dir, stack)


def eval_instructions(export: Export) -> str:
    """What to run next: the model scored beside the base and SFT models (scripts/eval_model.sh)."""
    base = export.rl.name.removesuffix("_dapo")
    command = f"bash scripts/eval_model.sh --recipe {base} --hw {export.hw}{export.stack.cli_option}"
    model = shlex.quote(str(export.target))
    score = f"{command} --model {model} --name rl_step_{export.step}"
    return f"model of RL step {export.step}: {export.target}\n  score it: {score}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/rl_to_hf.sh",
        description="Merge an RL checkpoint's actor (global_step_N/actor, verl FSDP shards) into a Hugging Face "
        "model folder with verl.model_merger (through recipes/launch/handoffs/merger.py), for evaluation "
        "(scripts/eval_model.sh) or release.",
        epilog="Default checkpoint dir: $CKPT_DIR, else $CKPT_ROOT/<recipe>_dapo_<hw> (what the RL recipe wrote). "
        f"Default step: the newest complete one ({handoff.TRACKER}). Default target: <ckpt dir>/hf_step_N. The "
        f"target gets a {handoff.MARKER}: the same call again merges nothing; --force replaces only a folder "
        "this command or scripts/sft_to_rl.sh merged.",
    )
    parser.add_argument("--recipe", default="qwen3_4b", help="qwen3_4b, qwen2.5_7b or qwen2.5_32b (a stage's works)")
    add_profile_option(parser, "hardware profile of the RL run (default: KIT_HW, else this machine's)")
    add_stack_option(parser)
    parser.add_argument("--ckpt-dir", help="the RL run's trainer.default_local_dir")
    parser.add_argument("--step", type=whole_number_arg(1), help="merge global_step_STEP instead of the newest")
    parser.add_argument("--target", help="output folder (default <ckpt dir>/hf_step_N)")
    parser.add_argument("--force", action="store_true", help="replace a target that holds another merge")
    parser.add_argument("--dry-run", action="store_true", help="check and print the merge command; merge nothing")
    return parser


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stack = handoff.begin(args)
    export = handoff.plan_naming_the_profile(plan, args, stack, "RL")
    print(f"RL checkpoint: {export.step_dir} (step {export.step})")
    return handoff.finish(export, args, eval_instructions(export))


if __name__ == "__main__":
    sys.exit(main())
