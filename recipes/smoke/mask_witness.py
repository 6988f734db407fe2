"""The loss mask's direct witness: does the policy loss leave the code tool's output out?

Why: a loss mask over the tool's response tokens trains the policy on text the sandbox wrote (the learning check's
``loss-mask`` sabotage, ``KIT_TEST_LOSS_MASK=tool-tokens``). Accuracy is a weak witness of it: the learning check
judged that sabotage "did NOT learn" by only 0.03 (issue 51), so on another seed it may pass. The kit's agent loop
(recipes/retool/agent_loop.py) counts, per response, the tool-turn tokens and how many of them the loss mask trains
on; the kit's reward returns the counts and verl logs their batch means per training step as
``reward_extra/<count>/{mean,max,min}`` (patches 0022 and 0.9.1/0011, both stacks). The log, not the rollout dumps:
0.9.1's trainer dumps only ``uid`` and the score (verl/trainer/ppo/v1/trainer_base.py:1539-1581).

A step's share is ``tool_tokens_trained / trained_tokens`` over its batch (the ratio of the two means). As shipped
it is exactly 0 at every step; the witness fails at the first step where it is not, and when it cannot tell: the
counts are missing at a training step, some response did not come through the kit's agent loop (the reward's -1),
or no response of the run called the tool (nothing to witness).
"""

from __future__ import annotations

from dataclasses import dataclass

from recipes.retool.schema import LOSS_MASK_KEYS

TOOL, TOOL_TRAINED, TRAINED = (f"reward_extra/{key}" for key in LOSS_MASK_KEYS)
#: A training step's line carries it (verl's own score metric, logged on both stacks).
TRAINING_STEP_KEY = "critic/score/mean"
#: Where the witness comes from, for the lines that say what is missing.
SOURCE = (
    "the kit's agent loop: actor_rollout_ref.rollout.agent.agent_loop_config_path=<kit>/recipes/retool/agent_loop.yaml"
)


@dataclass(frozen=True)
class MaskVerdict:
    ok: bool
    line: str
    shares: dict[int, float]  # each training step's share of trained tokens that are tool output


@dataclass(frozen=True)
class Reading:
    """One training step's batch means of the counts, and the least ``trained_tokens`` (-1: a response unmeasured)."""

    tool: float
    tool_trained: float
    trained: float
    least: float

    @property
    def share(self) -> float:
        return self.tool_trained / self.trained if self.trained > 0 else 0.0


def readings(steps: dict[int, dict[str, float]]) -> dict[int, Reading | None]:
    """Each training step's :class:`Reading` (None where its line lacks the counts), from the step metrics of the
    trainer's log (recipes.smoke.progress.step_metrics)."""
    found: dict[int, Reading | None] = {}
    for step, metrics in sorted(steps.items()):
        names = [f"{key}/mean" for key in (TOOL, TOOL_TRAINED, TRAINED)] + [f"{TRAINED}/min"]
        if TRAINING_STEP_KEY in metrics or any(name in metrics for name in names):
            found[step] = Reading(*(metrics[name] for name in names)) if all(n in metrics for n in names) else None
    return found


def judge(step_readings: dict[int, Reading | None]) -> MaskVerdict:
    """Every training step's share must be 0; the first step where it is not fails the check, naming the share."""
    missing = [step for step, reading in step_readings.items() if reading is None]
    seen = {step: reading for step, reading in step_readings.items() if reading is not None}
    if not step_readings or missing:
        what = f"missing at steps {missing} of {sorted(step_readings)}" if missing else "no training step logged"
        return MaskVerdict(False, f"loss mask: need {TOOL_TRAINED}/mean at every RL step; {what} ({SOURCE}?)", {})
    shares = {step: reading.share for step, reading in seen.items()}
    unmeasured = [step for step, reading in seen.items() if reading.least < 0]
    if unmeasured:
        return MaskVerdict(
            False,
            f"loss mask: need every response's counts; at steps {unmeasured} some did not come through {SOURCE}",
            shares,
        )
    if not any(reading.tool > 0 for reading in seen.values()):
        return MaskVerdict(
            False, f"loss mask: need a rollout that called the tool; no tool output at steps {sorted(seen)}", shares
        )
    shown = ", ".join(f"step {step} {share:.3f}" for step, share in shares.items())
    for step, reading in seen.items():
        if reading.tool_trained > 0:
            return MaskVerdict(
                False,
                f"loss mask: FAILED at step {step}: {reading.share:.1%} of the trained tokens are the tool's output "
                f"({reading.tool_trained:.1f} of {reading.trained:.1f} per response; shares {shown})",
                shares,
            )
    tool = sum(reading.tool for reading in seen.values()) / len(seen)
    return MaskVerdict(
        True,
        f"loss mask: no tool-output token trained on at steps {sorted(seen)} ({tool:.1f} tool-output tokens per "
        "response, all masked)",
        shares,
    )
