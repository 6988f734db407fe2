"""Test-only reward: the kit's ReTool reward with the sign of its training score flipped (a sign error in the reward
or the advantage). ``acc`` and the other fields are left true, so validation still measures real accuracy.

    custom_reward_function.path=<this file> custom_reward_function.name=compute_score
"""

from __future__ import annotations

from typing import Any

from recipes.retool.reward import compute_score as kit_compute_score


def compute_score(*args: Any, **kwargs: Any) -> dict[str, Any]:
    result = dict(kit_compute_score(*args, **kwargs))
    result["score"] = -float(result["score"])
    return result
