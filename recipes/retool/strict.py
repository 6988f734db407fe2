"""The references' accuracy rule, computed by verl's own code: ``math_dapo`` with a strict ``\\boxed{}`` match.

Why: the published ReTool numbers (verl's 32B recipe: AIME-2025 0.24 after SFT, 0.60 after 150 steps; the Ascend
sample: 0.29 -> 0.57) were scored by verl 0.6.1's ``recipe/retool/retool.py``, whose ``compute_score`` calls
``math_dapo.compute_score(solution_str, ground_truth, strict_box_verify=True)`` (retool.py line 109 at tag
v0.6.1): only the last 300 characters of the response, the last ``\\boxed{...}`` in its last 100, compared as raw
text with the ground truth. The kit's verifier (:mod:`recipes.retool.answer`, :mod:`recipes.retool.verify`)
normalises and so scores the same outputs higher; to set a kit run beside a published number, the reward also
reports this rule as ``acc_strict``. verl's function is called, never copied, so the rule is the reference's by
construction (``tests/retool/test_strict.py`` pins the cases where the two rules disagree).
"""

from __future__ import annotations

from typing import NamedTuple


class StrictVerdict(NamedTuple):
    correct: bool
    pred: str  # the boxed text verl extracted ("" when it found none)


def strict_verdict(solution_str: str, ground_truth: str) -> StrictVerdict:
    """verl 0.6.1's recipe rule on one response, exactly as ``recipe/retool/retool.py`` calls it."""
    from verl.utils.reward_score import math_dapo

    result = math_dapo.compute_score(solution_str, ground_truth, strict_box_verify=True)
    return StrictVerdict(bool(result["acc"]), result["pred"] or "")
