"""The weight sync's direct witness: does the rollout sample from the weights the trainer just updated?

Why: a rollout that keeps serving the SFT model (the weights never reach vLLM: verl 0.9.0 on NPU, verl #7205) still
trains the actor on its off-policy samples, and on CPU the learning check read +0.14 accuracy under that sabotage
(issue 51): accuracy is a weak witness of a weight sync. verl has a direct one. The rollout returns each sampled
token's log-prob (``actor_rollout_ref.rollout.calculate_log_probs``) and the trainer computes the same tokens'
log-probs at its own weights; verl's ``calculate_debug_metrics`` (verl/utils/debug/metrics.py) logs the mean absolute
difference of the two probabilities as ``training/rollout_probs_diff_mean``, in the old log-prob pass, and the kit's
on-policy update, which skips that pass, logs it from its own forward (patches 0031 and 0.9.1/0015).

At step 1 both sides hold the same weights (each loaded the SFT model), so the gap is the engines' numerical
mismatch alone. From step 2 on, the rollout should hold the weights of the update before: a gap far above step 1's
means it does not. The judge names the first such step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: verl's metric (verl/utils/debug/metrics.py: the same key on 0.6.1 and 0.9.1).
GAP_KEY = "training/rollout_probs_diff_mean"
#: A step's gap above this many times step 1's ...
GAP_FACTOR = 5.0
#: ... and above this absolute value (probability units) means the rollout did not receive the update.
GAP_FLOOR = 0.005


@dataclass(frozen=True)
class SyncVerdict:
    ok: bool
    line: str
    gaps: dict[int, float]


def gaps(steps: dict[int, dict[str, float]]) -> dict[int, float]:
    """Each RL step's gap, from the step metrics of the trainer's log (recipes.smoke.progress.step_metrics)."""
    # a NaN (a micro-batch without response tokens, 0.9.1's per-micro-batch mean) is no reading, never a pass
    return {
        step: metrics[GAP_KEY]
        for step, metrics in sorted(steps.items())
        if GAP_KEY in metrics and not math.isnan(metrics[GAP_KEY])
    }


def judge(step_gaps: dict[int, float]) -> SyncVerdict:
    """Step 1's gap is the baseline; the first later step whose gap is over :data:`GAP_FACTOR` times it and over
    :data:`GAP_FLOOR` fails the check, naming the step."""
    if 1 not in step_gaps or len(step_gaps) < 2:
        return SyncVerdict(
            False,
            f"weight sync: need {GAP_KEY} at step 1 and a later step; got steps {sorted(step_gaps)} "
            "(actor_rollout_ref.rollout.calculate_log_probs on?)",
            step_gaps,
        )
    baseline = step_gaps[1]
    bound = max(GAP_FACTOR * baseline, GAP_FLOOR)
    shown = ", ".join(f"step {step} {gap:.2e}" for step, gap in step_gaps.items())
    for step, gap in step_gaps.items():
        if step > 1 and gap > bound:
            return SyncVerdict(
                False,
                f"weight sync: FAILED at step {step}: the rollout's token probabilities differ from the trainer's by "
                f"{gap:.2e} on average, over {bound:.2e} (x{GAP_FACTOR:g} step 1's {baseline:.2e}): the rollout did "
                f"not receive step {step - 1}'s update ({shown})",
                step_gaps,
            )
    return SyncVerdict(True, f"weight sync: rollout/trainer probability gap within {bound:.2e} ({shown})", step_gaps)
