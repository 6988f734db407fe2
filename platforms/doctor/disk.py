"""The doctor's checkpoint-disk check (``--ckpt-dir``): is the folder writable, with room for the run's checkpoints?

Why sized like the launcher's plan: issue 44 found the doctor FAILing on a fixed "need 100 GB" where the dry run of
the same run said ~234 MB a checkpoint (the smoke's tiny model). A verl FSDP checkpoint holds the fp32 parameters
and AdamW's two fp32 moments, ~12 bytes a parameter (recipes/launch/sizing/budget.py, ``CKPT_BYTES_PER_PARAM``), and the
plan counts the parameters from the model's config.json (recipes/launch/sizing/memory.py ``facts_from_config``, recipes/
launch/catalog.py ``ModelFacts.parameters``). The doctor sits below the launcher (tests/test_import_graph.py: the
platform layer imports no recipe code), so it repeats that arithmetic here on the ``--model`` folder's config.json,
and tests/doctor/test_issue44_ckpt_disk.py holds the two to the same bytes. Without ``--model`` (and without
``--min-free-gb``) it assumes :data:`ASSUMED_NEED_GB` and says so, with the two ways to tell it more.

When ``--ckpt-dir`` already holds a run's checkpoints, ``disk.checkpoints`` says where running it again resumes, read
by the checked stack's checkpoint layout (:class:`platforms.verl_facts.CheckpointLayout`: what its trainer writes,
what makes a step complete, whether it passes over an incomplete one), the same reading as the launcher's restarts and
resume hints: a tracker that names an incomplete or vanished step is a WARN before the run, not a failure after it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from platforms import model_folder
from platforms.doctor.probes import Context, Result, fail, ok, skip, warn
from platforms.verl_facts import CheckpointLayout, VerlFacts

#: Bytes a verl FSDP checkpoint takes per parameter: fp32 weights + AdamW exp_avg + exp_avg_sq (the plan's number).
CKPT_BYTES_PER_PARAM = 12
#: What the check asks for when nothing says how big the run's checkpoints are (a 4B-32B recipe's few checkpoints).
ASSUMED_NEED_GB = 100.0
#: Without a readable config.json: one checkpoint ~ 7x the model's bf16 weights (6x for the shards, 1x of margin).
CKPT_WEIGHT_FACTOR = 7.0


def parameters(config: dict) -> int | None:
    """The dense decoder's parameters as the launcher's plan counts them (ModelFacts.parameters on the shape that
    facts_from_config reads); None when config.json lacks the shape."""
    try:
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        hidden = int(config["hidden_size"])
        head_dim = int(config.get("head_dim") or hidden // heads)
        layers, inner = int(config["num_hidden_layers"]), int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * (q + 2 * kv) + q * hidden
    attention += (q + 2 * kv) if str(config.get("model_type", "")) == "qwen2" else 2 * head_dim
    layer = attention + 3 * hidden * inner + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return layers * layer + embeddings + hidden


def checkpoint_bytes(model: Path) -> tuple[int, str] | None:
    """One checkpoint of ``model`` and how it was sized: from its config.json as the plan does, else from the
    weights it should hold; None when neither is readable."""
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    count = parameters(config) if isinstance(config, dict) else None
    if count:
        how = f"{count / 1e9:.2f}B parameters x {CKPT_BYTES_PER_PARAM} bytes (fp32 weights + AdamW), as the plan"
        return count * CKPT_BYTES_PER_PARAM, how
    weights = model_folder.inspect(model).expected_bytes
    if weights:  # what the complete model holds (its index's total_size), never what a partial download has
        return int(CKPT_WEIGHT_FACTOR * weights), f"~{CKPT_WEIGHT_FACTOR:g}x the model's weights"
    return None


def shown(gb: float) -> str:
    return f"{gb:.1f} GB" if gb >= 1 else f"{gb * 1000:.0f} MB"


def need(min_free_gb: float | None, model: Path | None) -> tuple[float, str]:
    """(GB the check requires, why): ``--min-free-gb`` when given (one checkpoint of ``--model`` if that is more),
    else one checkpoint of ``--model``, else :data:`ASSUMED_NEED_GB`, said to be an assumption."""
    sized = checkpoint_bytes(model) if model is not None else None
    if sized is not None:
        gb, how = sized[0] / 1e9, f"one checkpoint of {model}: {sized[1]}"
        if min_free_gb is None or gb > min_free_gb:
            keep = "" if min_free_gb is not None else "; for all the run keeps, --min-free-gb its dry run's total"
            return gb, how + keep
    if min_free_gb is not None:
        return min_free_gb, f"--min-free-gb {min_free_gb:g}"
    return ASSUMED_NEED_GB, (
        f"assumed {ASSUMED_NEED_GB:g} GB: nothing sized the checkpoints; pass --model DIR (the run's MODEL_PATH) to "
        "size one as the plan does, or --min-free-gb N from the 'checkpoint disk' row of the run's --dry-run"
    )


def run_phase(ckpt: Path, verl: VerlFacts, phase: str) -> str:
    """The phase whose trainer wrote the checkpoints in ``ckpt``, from its newest step's folder (``actor/``: RL,
    FSDP shards in the step folder: SFT); ``phase`` (``--phase``) when the folders do not tell."""
    rl, sft = verl.checkpoint("rl"), verl.checkpoint("sft")
    steps = rl.saved_steps(ckpt)
    if steps:
        newest = rl.step_dir(ckpt, steps[-1])
        if rl.weights_dir(newest).is_dir():
            return "rl"
        if (newest / sft.fsdp_config).is_file():
            return "sft"
    return phase


def check_checkpoints(ckpt: Path, layout: CheckpointLayout, phase: str) -> Result | None:
    """Where ``trainer.resume_mode=auto`` starts in ``ckpt`` by ``layout``; None when it holds no checkpoint."""
    saved, complete = layout.saved_steps(ckpt), layout.complete_steps(ckpt)
    if not saved and not (ckpt / layout.tracker).exists():
        return None
    step, note = layout.resume_point(ckpt)
    details = {"phase": phase, "saved": saved, "complete": complete, "resume_step": step}
    counted = f"{len(complete)} of {len(saved)} saved {phase.upper()} steps complete"
    if not note and step is not None:
        return ok("disk.checkpoints", f"running the run again resumes from global_step_{step} ({counted})", **details)
    where = "step 0" if step is None else f"global_step_{step}"
    fix = (
        f"resume a complete step: trainer.resume_mode=resume_path trainer.resume_from_path={ckpt}/global_step_"
        f"{complete[-1]}, or remove the incomplete folders"
        if complete
        else "start again: trainer.resume_mode=disable (or another CKPT_DIR)"
    )
    summary = f"running the run again starts from {where}: {note or 'no complete step'} ({counted})"
    return warn("disk.checkpoints", summary, fix, **details)


def check_disk(ctx: Context) -> list[Result]:
    ckpt = ctx.opts.ckpt_dir
    if ckpt is None:
        return [skip("disk", "no --ckpt-dir given")]
    verl = ctx.stack.verl  # the checked stack's trainers wrote (or will write) this folder
    phase = run_phase(ckpt, verl, ctx.opts.phase) if ckpt.is_dir() else ctx.opts.phase
    found = check_checkpoints(ckpt, verl.checkpoint(phase), phase) if ckpt.is_dir() else None
    return [*_check_space(ctx, ckpt), *([found] if found else [])]


def _check_space(ctx: Context, ckpt: Path) -> list[Result]:
    existing = ckpt
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():  # issue 33: a file passed as "N GB free under FILE"
        return [fail("disk", f"{existing} (for {ckpt}) is a file, not a folder", "choose a folder for --ckpt-dir")]
    if not os.access(existing, os.W_OK):
        return [fail("disk", f"{existing} (for {ckpt}) is not writable", "choose a writable --ckpt-dir")]
    free_gb = shutil.disk_usage(existing).free / 1e9
    need_gb, basis = need(ctx.opts.min_free_gb, ctx.opts.model)
    details = {"path": str(existing), "free_gb": round(free_gb, 1), "need_gb": round(need_gb, 3), "basis": basis}
    if free_gb < need_gb:
        return [
            fail(
                "disk",
                f"{shown(free_gb)} free under {existing}, need {shown(need_gb)} ({basis})",
                "free space, point --ckpt-dir / trainer.default_local_dir at a larger disk, "
                "or keep fewer checkpoints (trainer.max_actor_ckpt_to_keep)",
                **details,
            )
        ]
    return [ok("disk", f"{shown(free_gb)} free under {existing} (need {shown(need_gb)}: {basis})", **details)]
