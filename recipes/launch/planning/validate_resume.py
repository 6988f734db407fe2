"""A resume path against the phase that wrote it, and against what the trainer reads from it (issue 44).

Why: ``trainer.resume_mode=resume_path trainer.resume_from_path=<an SFT run's global_step_N>`` given to an RL recipe
passed the dry run (the folder exists and is named global_step_N); verl's RL trainer then looks for ``actor/`` in it
after the job has its nodes. Likewise a step folder that lost a shard (a copy cut short, a save killed midway) loads
only to fail inside the workers. The layouts come from the stack's verl (:class:`platforms.verl_facts.CheckpointLayout`,
``stack.verl.checkpoint(phase)``): the RL trainer saves the policy in ``global_step_N/actor/``, the SFT trainer the FSDP
shards (``fsdp_config.json``, ``model_world_size_W_rank_R.pt``) in ``global_step_N`` itself, on both stacks; what
makes a step complete differs (verl 0.9.1's SFT trainer keeps its dataloader state in ``data_0.pt``, 0.6.1's in
``data.pt``).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from platforms.verl_facts import VerlFacts


def phase_of_step(step_dir: Path, verl: VerlFacts) -> str | None:
    """``"rl"``, ``"sft"`` or None (neither layout: an empty or foreign folder) for a ``global_step_N`` folder."""
    rl, sft = verl.checkpoint("rl"), verl.checkpoint("sft")
    if rl.weights_dir(step_dir).is_dir():
        return "rl"
    if (sft.weights_dir(step_dir) / sft.fsdp_config).is_file() or any(step_dir.glob(sft.shard("model", "*", "*"))):
        return "sft"
    return None


def problems(cfg: DictConfig, phase: str, verl: VerlFacts) -> list[str]:
    """The resume folder of a run, when it is a checkpoint of the other phase, or one the trainer cannot load."""
    mode = str(cfg.trainer.get("resume_mode", "auto"))
    resume = cfg.trainer.get("resume_from_path")
    if not resume or mode == "disable" or not Path(str(resume)).is_dir():
        return []  # unset, unused, or missing: checks.py's resume rules say so
    found = phase_of_step(Path(str(resume)), verl)
    if found is None:
        return []
    if found == phase:
        lost = verl.checkpoint(phase).missing(Path(str(resume)))
        shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        if not lost:
            return []
        return [
            f"trainer.resume_from_path={resume} is incomplete (missing {shown}; a save cut short, a partial copy): "
            "choose a complete global_step_N"
        ]
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
