"""The references' accuracy rule (recipes/retool/strict.py) and the reward's ``verifier`` / ``acc_strict``.

The published ReTool numbers were scored by verl's ``math_dapo`` with ``strict_box_verify=True``; the kit's own verifier
normalises. These tests pin where the two disagree, that ``acc_strict`` is verl's verdict on every call, and that
``verifier=strict`` (what ``--parity`` sets) makes the training score follow verl's rule.
"""

from __future__ import annotations

import pytest

from recipes.retool.reward import compute_score
from recipes.retool.strict import strict_verdict

# (response, ground truth, kit's verdict, verl's strict verdict)
CASES = [
    ("\\boxed{204}", "204", True, True),
    ("\\boxed{205}", "204", False, False),
    ("\\boxed{204.0}", "204", True, False),  # kit: same number; verl: raw text differs
    ("\\boxed{ 204 }", "204", True, False),
    ("\\boxed{\\dfrac{408}{2}}", "204", True, False),
    ("\\boxed{204} " + "x" * 120, "204", True, False),  # verl reads only the last 100 characters
    ("<answer>204</answer>", "204", True, False),  # no \boxed{}: verl finds no answer
    ("first \\boxed{7}, finally \\boxed{204}", "204", True, True),
    ("no answer at all", "204", False, False),
]


def score(response: str, truth: str, **kwargs) -> dict:
    return compute_score("aime_2025", response, truth, {"num_turns": 4}, **kwargs)


@pytest.mark.parametrize(("response", "truth", "kit", "strict"), CASES)
def test_acc_strict_is_verls_verdict_and_acc_the_kits(response: str, truth: str, kit: bool, strict: bool) -> None:
    from verl.utils.reward_score import math_dapo

    assert strict_verdict(response, truth).correct is strict
    assert bool(math_dapo.compute_score(response, truth, strict_box_verify=True)["acc"]) is strict
    result = score(response, truth)
    assert (result["acc"], result["acc_strict"]) == (kit, strict)
    assert result["score"] == (1.0 if kit else -1.0)


@pytest.mark.parametrize(("response", "truth", "kit", "strict"), CASES)
def test_verifier_strict_scores_by_verls_rule(response: str, truth: str, kit: bool, strict: bool) -> None:
    result = score(response, truth, verifier="strict")
    assert result["acc"] is strict and result["acc_strict"] is strict
    assert result["score"] == (1.0 if strict else -1.0)
    assert result["verifier"] == ("math_dapo_strict" if strict_verdict(response, truth).pred else "no_answer")


def test_strict_rule_is_verls_code_not_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change in verl's function shows up in the kit's verdict: the rule is called, never reimplemented."""
    from verl.utils.reward_score import math_dapo

    calls = []

    def fake(solution_str: str, ground_truth: str, strict_box_verify: bool = False, **_: object) -> dict:
        calls.append(strict_box_verify)
        return {"score": 1.0, "acc": True, "pred": "anything"}

    monkeypatch.setattr(math_dapo, "compute_score", fake)
    assert strict_verdict("\\boxed{1}", "2") == (True, "anything")
    assert calls == [True]


def test_a_failure_inside_verls_rule_costs_one_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.reward_score import math_dapo

    def broken(*_: object, **__: object) -> dict:
        raise RuntimeError("boom")

    monkeypatch.setattr(math_dapo, "compute_score", broken)
    result = score("\\boxed{204}", "204")
    assert result["acc"] is True and result["acc_strict"] is False
    assert score("\\boxed{204}", "204", verifier="strict")["score"] == -1.0
