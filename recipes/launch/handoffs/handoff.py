"""SFT -> RL hand-off: merge the last SFT checkpoint into a Hugging Face model and say how RL should use it.

verl's SFT trainer saves FSDP shards (``global_step_N/model_world_size_W_rank_R.pt``) plus a ``huggingface/``
folder with config and tokenizer only; vLLM and the RL trainer need a plain HF model. verl's model merger
(``merge --backend fsdp``, run through :mod:`recipes.launch.handoffs.merger`) builds one (on CPU, by design). This
module finds the step (``latest_checkpointed_iteration.txt`` unless ``--step``), checks the shards are complete and the
target writable, merges into ``<ckpt>/hf_merged`` — the path the RL recipes use as their default MODEL_PATH —
through a temporary folder and a rename, so a crash never leaves a half-written model where RL would load it, and
records the source step in ``kit_merge.json`` so a second call is a no-op and a merge of another step is refused
without ``--force``.

    python -m recipes.launch.handoffs.handoff --recipe qwen3_4b --hw a3 [--step N] [--ckpt-dir DIR] [--target DIR]
                                              [--stack NAME] [--dry-run]

The stack (``--stack``, resolved once in :func:`main`) is the one whose verl merges, and whose RL reads the model:
the printed run line names it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import default_hardware, stacks
from platforms.cli import add_profile_option, add_stack_option
from platforms.cli_errors import EXIT_OK, KitError, UsageError, check_writable, entry_point, whole_number_arg
from platforms.verl_facts import CheckpointLayout
from recipes.launch.planning.plan import check_installed
from recipes.launch.run_inputs import catalog, inputs

MARKER = "kit_merge.json"
TRACKER = "latest_checkpointed_iteration.txt"
PROG = "sft_to_rl"


class HandoffError(KitError):
    """The checkpoint or the target is not fit for a merge; the message says what and how to fix it (exit 1)."""


@dataclass(frozen=True)
class Merge:
    """One checkpoint step's FSDP shards (``step_dir``) and the HF folder they merge into: what :func:`merge` and
    :func:`target_holds_this_merge` need, shared by the SFT hand-off and the RL export
    (recipes/launch/handoffs/export.py)."""

    step: int
    step_dir: Path
    target: Path

    def merge_command(self, target: Path | None = None) -> list[str]:
        return merger_command(self.step_dir, target or self.target)


@dataclass(frozen=True)
class Handoff(Merge):
    sft: catalog.Recipe
    rl: catalog.Recipe
    hw: str
    ckpt_dir: Path
    stack: stacks.Stack  # whose verl merges, and whose RL reads the model (the run line's --stack)


def merger_command(step_dir: Path, target: Path) -> list[str]:
    """verl's model merger over one FSDP checkpoint step into a plain HF model directory: the kit's one spelling
    of it (the hand-off above, and tests/cpu/test_cpu_sft.py), through :mod:`recipes.launch.handoffs.merger`, which
    keeps the checkpoint's dtype and tied embeddings (issue 44: verl's own wrote bf16 and an untied lm_head)."""
    return [
        sys.executable,
        "-m",
        "recipes.launch.handoffs.merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(step_dir),
        "--target_dir",
        str(target),
    ]


def stage_recipes(name: str) -> tuple[catalog.Recipe, catalog.Recipe]:
    """``qwen3_4b`` or either stage's name -> (SFT recipe, RL recipe)."""
    base = re.sub(r"_(sft|dapo)$", "", name.removeprefix("retool_"))
    try:
        return catalog.get(f"{base}_sft"), catalog.get(f"{base}_dapo")
    except KeyError:
        models = sorted({r.name.rsplit("_", 1)[0] for r in catalog.RECIPES.values()})
        # the user's word, not the checkpoint's state: the usage code (2), as every other unknown name in the kit
        raise UsageError(f"--recipe: unknown recipe {name!r}", f"one of {', '.join(models)}") from None


def latest_step(ckpt_dir: Path, stage: str = "SFT", layout: CheckpointLayout | None = None) -> int:
    """The step the tracker names (``layout``'s: the stack's trainer's; the same file on both stacks)."""
    tracker = ckpt_dir / (layout.tracker if layout is not None else TRACKER)
    try:
        return int(tracker.read_text().strip())
    except FileNotFoundError:
        found = f"{tracker} not found: no finished {stage} checkpoint in {ckpt_dir} (or pass --step)"
        raise HandoffError(found) from None
    except ValueError:
        raise HandoffError(f"{tracker} does not hold a step number") from None


def check_step_dir(step_dir: Path, layout: CheckpointLayout) -> None:
    """The shards the merger reads, by the stack's ``layout`` (in ``actor/`` for RL, the step folder for SFT):
    fsdp_config.json's world size worth of model files, and huggingface/config.json."""
    weights = layout.weights_dir(step_dir)
    if not weights.is_dir():
        raise HandoffError(f"{weights} does not exist")
    config = weights / layout.fsdp_config
    try:
        int(json.loads(config.read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HandoffError(f"{config}: cannot read the FSDP world size ({exc})") from None
    prefix = f"{layout.role}/" if layout.role else ""
    missing = [name.removeprefix(prefix) for name in layout.missing(step_dir, kinds=("model",))]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise HandoffError(f"{weights} is incomplete (missing {shown}): was the checkpoint copied whole?")


def run_ckpt_dir(args: argparse.Namespace, recipe: catalog.Recipe, environ: dict[str, str]) -> Path:
    """The stage's checkpoint folder as its run script resolved it: ``--ckpt-dir``, else CKPT_DIR, else
    ``CKPT_ROOT/<experiment name of the recipe on --hw>`` (shared by the SFT hand-off and the RL export)."""
    if args.ckpt_dir:
        return Path(args.ckpt_dir).expanduser().absolute()
    if environ.get("CKPT_DIR", "").strip():
        return Path(environ["CKPT_DIR"]).expanduser().absolute()
    return inputs.ckpt_root(environ) / recipe.experiment_name(args.hw)


def plan(args: argparse.Namespace, stack: stacks.Stack, environ: dict[str, str] | None = None) -> Handoff:
    environ = dict(os.environ) if environ is None else environ
    sft, rl = stage_recipes(args.recipe)
    ckpt_dir = run_ckpt_dir(args, sft, environ)
    layout = stack.verl.checkpoint("sft")  # what the stack's SFT trainer wrote
    step = args.step if args.step is not None else latest_step(ckpt_dir, layout=layout)
    step_dir = layout.step_dir(ckpt_dir, step)
    check_step_dir(step_dir, layout)
    target = Path(args.target).expanduser().absolute() if args.target else ckpt_dir / catalog.MERGED_DIR_NAME
    # issue 44: an unwritable --target passed the dry run and failed the merge 30-45 s later in verl's traceback;
    # the merge writes a sibling temporary folder and renames it, so the target's parent must take new entries
    check_writable("--target", target)
    return Handoff(step, step_dir, target, sft, rl, args.hw, ckpt_dir, stack)


def existing_merge(target: Path) -> dict | None:
    try:
        return json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None


def target_holds_this_merge(handoff: Merge, force: bool) -> bool:
    """True when the target already holds this very merge (nothing to do); a HandoffError when it holds anything
    else and ``force`` is not given. The dry run asks the same (issue 21, finding 4: it used to pass where the
    merge then refused)."""
    previous = existing_merge(handoff.target)
    if previous and previous.get("step_dir") == str(handoff.step_dir) and not force:
        return True
    occupied = handoff.target.exists() and (not handoff.target.is_dir() or any(handoff.target.iterdir()))
    if occupied and not previous:
        # issue 33, finding 2: --force used to replace any folder, the user's own weights among them
        raise HandoffError(
            f"{handoff.target} holds files no earlier merge wrote (no {MARKER}); --force replaces only a merge this "
            "script made: choose another --target DIR, or move that folder away yourself"
        )
    if previous and not force:
        raise HandoffError(
            f"{handoff.target} already holds a merge of {previous.get('step_dir')}; pass --force to replace it, or "
            "--target DIR"
        )
    return False


def merge(handoff: Merge, force: bool) -> str:
    """Merge into ``handoff.target``; returns what happened ("merged" or "already merged")."""
    if target_holds_this_merge(handoff, force):
        return "already merged"
    tmp = handoff.target.with_name(f".{handoff.target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.monotonic()
    proc = subprocess.run(handoff.merge_command(tmp), check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise HandoffError(f"verl.model_merger failed (exit {proc.returncode}); see its output above")
    marker = {"step_dir": str(handoff.step_dir), "step": handoff.step, "merged_s": round(time.monotonic() - start, 1)}
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    give_ordinary_modes(tmp)
    if handoff.target.exists():
        shutil.rmtree(handoff.target)  # an earlier merge (its marker checked above) or an empty folder
    os.replace(tmp, handoff.target)
    return "merged"


def give_ordinary_modes(folder: Path) -> None:
    """What the merge wrote gets the modes any new file here gets (0644 / 0755 under umask 022): issue 44 found
    ``model.safetensors`` at 0600 beside a 0644 config.json, unreadable to the other users of a shared model dir."""
    umask = os.umask(0o022)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def rl_instructions(handoff: Handoff) -> str:
    model = shlex.quote(str(handoff.target))
    default = inputs.default_model_path(handoff.rl, handoff.hw, os.environ)
    stack = handoff.stack
    lines = [
        f"model for RL: {handoff.target}",
        f"  run:      MODEL_PATH={model} bash {handoff.rl.script}{stack.cli_option} --hw {handoff.hw}",
        f"  override: {inputs.model_key(handoff.rl, stack)}={model}",
    ]
    if Path(default) == handoff.target:
        lines.append(f"  ({handoff.rl.script} --hw {handoff.hw} uses this path by default)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/sft_to_rl.sh",
        description="Merge the last SFT checkpoint (verl FSDP shards) into a Hugging Face model for the RL stage, "
        "with verl.model_merger (dtype and tied embeddings kept: recipes/launch/handoffs/merger.py), and print the "
        "MODEL_PATH / override the RL recipe expects.",
        epilog="Default checkpoint dir: $CKPT_DIR, else $CKPT_ROOT/<recipe>_sft_<hw> (what the SFT recipe wrote). "
        f"Default target: <ckpt dir>/{catalog.MERGED_DIR_NAME}, the RL recipe's default MODEL_PATH.",
    )
    parser.add_argument(
        "--recipe", default="qwen3_4b", help="qwen3_4b, qwen2.5_7b or qwen2.5_32b (either stage's name works)"
    )
    add_profile_option(parser, "hardware profile of the SFT run (default: KIT_HW, else this machine's)")
    add_stack_option(parser)
    parser.add_argument("--ckpt-dir", help="the SFT run's trainer.default_local_dir")
    parser.add_argument(
        "--step", type=whole_number_arg(1), help="merge global_step_STEP instead of the latest (verl counts from 1)"
    )
    parser.add_argument("--target", help=f"output folder (default <ckpt dir>/{catalog.MERGED_DIR_NAME})")
    parser.add_argument("--force", action="store_true", help="replace a target that holds another merge")
    parser.add_argument("--dry-run", action="store_true", help="check and print the merge command; merge nothing")
    return parser


def plan_naming_the_profile(
    make_plan: Callable[[argparse.Namespace, stacks.Stack], Merge],
    args: argparse.Namespace,
    stack: stacks.Stack,
    stage: str,
) -> Merge:
    """``make_plan(args, stack)``; when it finds no checkpoint and nothing chose the profile (no --hw, KIT_HW,
    --ckpt-dir or CKPT_DIR), the error adds that the folder came from this machine's profile (issue 33: on a host
    without devices or torch that is cpu, which names the wrong run)."""
    try:
        return make_plan(args, stack)
    except HandoffError as exc:
        chosen = args.profile or os.environ.get("KIT_HW", "").strip() or args.ckpt_dir
        if chosen or os.environ.get("CKPT_DIR", "").strip():
            raise
        raise HandoffError(f"{exc}; --hw {args.hw} is this machine's profile: pass the {stage} run's --hw") from None


def finish(job: Merge, args: argparse.Namespace, next_steps: str) -> int:
    """The end both merge commands share: the dry run's report, or the merge; then what to run next."""
    if args.dry_run:
        if target_holds_this_merge(job, args.force):
            print(f"{job.target} already holds this merge: the real run merges nothing")
        print("merge command: " + shlex.join(job.merge_command()))
        print(next_steps)
        print("dry run: nothing merged")
        return EXIT_OK
    print(f"{merge(job, args.force)}: {job.target}")
    print(next_steps)
    return EXIT_OK


def begin(args: argparse.Namespace) -> stacks.Stack:
    """The common opening of both hand-offs' entry points (this one and export's): the stack resolved once and
    exported (the merger child serves it), this interpreter's verl checked against it (the merge runs it), a wrong
    --recipe named before the platform is probed (that imports torch), the profile chosen (a bad KIT_HW is a
    UsageError)."""
    stack = stacks.export(stacks.resolve(args.stack))
    check_installed(stack)
    stage_recipes(args.recipe)
    args.hw = args.profile or default_hardware()
    return stack


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stack = begin(args)
    handoff = plan_naming_the_profile(plan, args, stack, "SFT")
    print(f"SFT checkpoint: {handoff.step_dir} (step {handoff.step})")
    return finish(handoff, args, rl_instructions(handoff))


if __name__ == "__main__":
    sys.exit(main())
