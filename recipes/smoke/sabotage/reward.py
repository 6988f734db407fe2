"""The kit's ReTool reward with the sign of its training score flipped (a sign error in the reward or the advantage),
for the learning check's sensitivity bench (:mod:`recipes.smoke.sabotage`). ``acc`` and the other fields are left
true, so validation still measures real accuracy.

    custom_reward_function.path=<this file> custom_reward_function.name=compute_score   (stack 0.6.1)
    reward.custom_reward_function.path=<this file> ...name=compute_score             (stack 0.9.1)

verl loads this file by path (as ``custom_module``), so it holds nothing but the reward.
"""

from __future__ import annotations

from typing import Any

from recipes.retool.reward import compute_score as kit_compute_score
from recipes.smoke.sabotage import REWARD_SIGN

_announced: list[bool] = []


def compute_score(*args: Any, **kwargs: Any) -> dict[str, Any]:
    result = dict(kit_compute_score(*args, **kwargs))
    result["score"] = -float(result["score"])
    if not _announced:  # once per process: the run's log shows the sabotage ran
        _announced.append(True)
        print(f"{REWARD_SIGN.marker}: first score {result['score']:+.2f}", flush=True)
    return result
