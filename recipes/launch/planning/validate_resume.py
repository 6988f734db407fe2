"""A resume path against the phase that wrote it (issue 44).

Why: ``trainer.resume_mode=resume_path trainer.resume_from_path=<an SFT run's global_step_N>`` given to an RL recipe
passed the dry run (the folder exists and is named global_step_N); verl's RL trainer then looks for ``actor/`` in it
after the job has its nodes. The two layouts are told apart as ``scripts/rl_to_hf.sh`` does
(:mod:`recipes.launch.handoffs.export`): verl's RL trainer saves the policy in ``global_step_N/actor/``, its SFT trainer
saves the FSDP shards (``fsdp_config.json``, ``model_world_size_W_rank_R.pt``) in ``global_step_N`` itself.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

#: The role folder verl's RL trainer saves the policy in (the name recipes/launch/handoffs/export.py's ACTOR reads).
ACTOR = "actor"


def phase_of_step(step_dir: Path) -> str | None:
    """``"rl"``, ``"sft"`` or None (neither layout: an empty or foreign folder) for a ``global_step_N`` folder."""
    if (step_dir / ACTOR).is_dir():
        return "rl"
    if (step_dir / "fsdp_config.json").is_file() or any(step_dir.glob("model_world_size_*_rank_*.pt")):
        return "sft"
    return None


def problems(cfg: DictConfig, phase: str) -> list[str]:
    """The resume folder of a run, when it is a checkpoint of the other phase."""
    mode = str(cfg.trainer.get("resume_mode", "auto"))
    resume = cfg.trainer.get("resume_from_path")
    if not resume or mode == "disable" or not Path(str(resume)).is_dir():
        return []  # unset, unused, or missing: checks.py's resume rules say so
    found = phase_of_step(Path(str(resume)))
    if found is None or found == phase:
        return []
    names = {"rl": "an RL", "sft": "an SFT"}
    merge = (
        "; to start RL from it, merge it (scripts/sft_to_rl.sh) and pass the merged folder as MODEL_PATH"
        if found == "sft"
        else ""
    )
    return [
        f"trainer.resume_from_path={resume} is {names[found]} checkpoint, and this is {names[phase]} run: it "
        f"resumes only a checkpoint of its own phase{merge}"
    ]
