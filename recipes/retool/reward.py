"""ReTool reward for verl's ``custom_reward_function``: answer correctness plus tool-use shaping.

verl config::

    custom_reward_function.path=<kit>/recipes/retool/reward.py
    custom_reward_function.name=compute_score
    +custom_reward_function.reward_kwargs.shaping=no_tool_penalty   # or none | verl
    +custom_reward_function.reward_kwargs.no_tool_penalty=0.4
    +custom_reward_function.reward_kwargs.verify_timeout_s=5   # math-verify bound per call; 0 = never call it
    +custom_reward_function.reward_kwargs.verifier=kit         # or strict: train on the references' rule

Shapings (k = tool rounds = ``(num_turns - 2) // 2``; ToolAgentLoop reports ``num_turns = 2k + 2``):

* ``none``: the ReTool paper's reward, +1 correct / -1 wrong.
* ``verl``: verl 0.6.1's recipe, wrong answers get ``min(-0.6, -1 + 0.1 k)`` (a tool call softens a miss).
* ``no_tool_penalty`` (default): the Ascend sample's variant, ``no_tool_penalty`` subtracted when no tool was used:
  correct+tool 1.0, correct without 0.6, wrong+tool -1.0, wrong without -1.4.

Two accuracies, side by side on every call: ``acc`` is the verifier the score uses (``verifier=kit``: the kit's
normalising check, :mod:`recipes.retool.verify`; ``verifier=strict``: the references' rule) and ``acc_strict`` is
always the references' rule, verl's own ``math_dapo`` strict ``\\boxed{}`` match (:mod:`recipes.retool.strict`).
verl's validation logs every numeric key of this dict per data source, so a run shows
``val-core/<source>/acc/mean@k`` beside ``val-aux/<source>/acc_strict/mean@k``, the number the published results
were measured with.

The result is a dict so verl logs accuracy (``acc``, ``acc_strict``) and tool use (``tool_rounds``, ``used_tool``)
apart from the shaped ``score``; every key is present on every call (verl stacks them across the batch).
``tool_failures`` counts the response's interpreter outputs that are sandbox failures (``[sandbox error: …]``,
``[sandbox unavailable: …]``, ``[invalid call: …]``; :func:`recipes.retool.tool_output.sandbox_failures`, the one
reader of those notes): verl 0.6.1's ToolAgentLoop drops the tool's own metrics
(``verl/experimental/agent_loop/tool_agent_loop.py`` L442, ``res`` unused), so the rollout text is where a dead
sandbox shows; the kit's verl patch 0022 logs it per training step as ``reward_extra/tool_failures/mean``.
``tool_tokens``, ``tool_tokens_trained`` and ``trained_tokens`` pass on the loss-mask counts of the kit's agent loop
(:mod:`recipes.retool.agent_loop`, ``extra_info["kit_loss_mask"]``; -1 each for a response that did not come through
it), so they reach the dumps and ``reward_extra/<count>/mean``, the loss mask's witness (recipes/smoke/mask_witness.py).

verl loads this file by path under the module name ``custom_module``, so the kit's package may not be importable
yet; the kit root is put on ``sys.path`` in that case (Ray workers need it for the tool class anyway).
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from recipes.retool.answer import canonical, extract_answer
    from recipes.retool.schema import LOSS_MASK_FIELD, LOSS_MASK_KEYS, NOT_MEASURED
    from recipes.retool.strict import strict_verdict
    from recipes.retool.tool_output import sandbox_failures
    from recipes.retool.verify import judge
except ImportError:  # loaded by file path from a process without the kit on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from recipes.retool.answer import canonical, extract_answer
    from recipes.retool.schema import LOSS_MASK_FIELD, LOSS_MASK_KEYS, NOT_MEASURED
    from recipes.retool.strict import strict_verdict
    from recipes.retool.tool_output import sandbox_failures
    from recipes.retool.verify import judge

logger = logging.getLogger(__name__)

SHAPINGS = ("none", "verl", "no_tool_penalty")
DEFAULT_SHAPING = "no_tool_penalty"
DEFAULT_NO_TOOL_PENALTY = 0.4
#: ``kit``: the kit's normalising verifier decides ``acc`` and the score; ``strict``: verl's math_dapo rule does.
VERIFIERS = ("kit", "strict")
DEFAULT_VERIFIER = "kit"


class NumTurnsMissingError(RuntimeError):
    """verl did not pass the agent loop's turn count: the kit's verl patch series is not applied."""


class RewardConfigError(ValueError):
    """The reward's keyword arguments are wrong (a configuration error, never a property of one response)."""


def _non_negative_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and number >= 0


def reward_kwargs_problems(kwargs: Mapping[str, Any], *, unknown_keys: bool = False) -> list[str]:
    """Every problem with the reward's keyword arguments, one ``key=value: rule`` line each (empty: all fine).

    The one validator of the reward's configuration: :func:`compute_score` and :func:`shaped_score` raise on what
    it finds, and the launcher's pre-flight (``recipes/launch/planning/checks.py``) reports it before anything starts.
    ``unknown_keys``: also report keys the reward does not take (the launcher does; verl itself passes extra
    keywords such as ``reward_router_address``, which :func:`compute_score` must accept).
    """
    problems = []
    if unknown_keys:
        problems += [
            f"{key}: the kit's reward takes {', '.join(sorted(REWARD_KWARGS))}"
            for key in sorted(kwargs)
            if key not in REWARD_KWARGS
        ]
    for key, choices in (("shaping", SHAPINGS), ("verifier", VERIFIERS)):
        if key in kwargs and kwargs[key] not in choices:
            problems.append(f"{key}={kwargs[key]}: one of {', '.join(choices)}")
    for key in ("no_tool_penalty", "verify_timeout_s"):
        if key in kwargs and not _non_negative_number(kwargs[key]):
            problems.append(f"{key}={kwargs[key]}: a number >= 0")
    return problems


def validate_reward_kwargs(**kwargs: Any) -> None:
    """Raise :class:`RewardConfigError` naming every problem :func:`reward_kwargs_problems` finds."""
    problems = reward_kwargs_problems(kwargs)
    if problems:
        raise RewardConfigError("ReTool reward: " + "; ".join(problems))


def tool_rounds_from(extra_info: dict[str, Any] | None) -> tuple[int, int]:
    """``(num_turns, tool_rounds)`` from ``extra_info["num_turns"]``; raises if verl did not provide it."""
    if not extra_info or "num_turns" not in extra_info:
        raise NumTurnsMissingError(
            "ReTool reward: extra_info has no 'num_turns'. verl 0.6.1's reward loop drops the agent loop's turn "
            "count; the kit's verl patch series is not applied (patch 0001 makes the reward loop forward num_turns)."
        )
    raw = extra_info["num_turns"]
    try:
        num_turns = int(raw)
    except (TypeError, ValueError):
        raise NumTurnsMissingError(
            f"ReTool reward: extra_info['num_turns'] is {raw!r}, not a turn count. The rollout did not go through "
            "verl's agent loop (set actor_rollout_ref.rollout.mode=async and multi_turn.enable=True) or the kit's "
            "verl patch series is not applied."
        ) from None
    return num_turns, max(0, (num_turns - 2) // 2)


def loss_mask_counts(extra_info: Mapping[str, Any] | None) -> dict[str, int]:
    """The kit agent loop's loss-mask counts from ``extra_info`` (:data:`NOT_MEASURED` each when it has none):
    every key on every call, as verl stacks the reward's keys across the batch."""
    counts = (extra_info or {}).get(LOSS_MASK_FIELD)
    if not isinstance(counts, Mapping):
        return dict.fromkeys(LOSS_MASK_KEYS, NOT_MEASURED)
    return {key: int(counts.get(key, NOT_MEASURED)) for key in LOSS_MASK_KEYS}


def shaped_score(correct: bool, tool_rounds: int, shaping: str, no_tool_penalty: float) -> float:
    """The training reward for one response (see the module docstring for the three schemes)."""
    validate_reward_kwargs(shaping=shaping, no_tool_penalty=no_tool_penalty)
    base = 1.0 if correct else -1.0
    if shaping == "verl":
        return base if correct else min(-0.6, base + 0.1 * tool_rounds)
    if shaping == "no_tool_penalty":
        return base - (float(no_tool_penalty) if tool_rounds == 0 else 0.0)
    return base


def _kit_verdict(text: str, ground_truth: str, verify_timeout_s: float) -> tuple[bool, str, str]:
    """``(correct, pred, method)`` by the kit's verifier; a failure inside it scores as wrong (and is logged)."""
    try:
        answer = extract_answer(text)
        verdict = judge(answer, ground_truth, timeout_s=verify_timeout_s)
        return verdict.correct, canonical(answer) if answer is not None else "", verdict.method
    except Exception:  # a bug here must cost one sample's reward, not the training step
        logger.exception("ReTool reward: answer check failed; scoring as wrong")
        return False, "", "error"


def _strict(text: str, ground_truth: str) -> tuple[bool, str]:
    try:
        return strict_verdict(text, ground_truth)
    except ImportError:  # no verl: a broken installation, not a property of the response
        raise
    except Exception:  # same rule as above: one sample, never the step
        logger.exception("ReTool reward: verl's math_dapo check failed; scoring as wrong")
        return False, ""


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    *,
    shaping: str = DEFAULT_SHAPING,
    no_tool_penalty: float = DEFAULT_NO_TOOL_PENALTY,
    verify_timeout_s: float = 5.0,
    verifier: str = DEFAULT_VERIFIER,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one response. ``**kwargs`` absorbs what verl's reward loop adds (``reward_router_address``, …).

    Never raises because of the response text: a failure inside answer checking scores as a wrong answer (and is
    logged). It does raise for configuration errors: a bad reward keyword (:class:`RewardConfigError`) or a missing
    ``num_turns``.
    """
    validate_reward_kwargs(
        shaping=shaping, no_tool_penalty=no_tool_penalty, verify_timeout_s=verify_timeout_s, verifier=verifier
    )
    num_turns, tool_rounds = tool_rounds_from(extra_info)
    text = solution_str if isinstance(solution_str, str) else str(solution_str)
    truth = str(ground_truth)
    acc_strict, strict_pred = _strict(text, truth)
    if verifier == "strict":
        correct, pred, method = acc_strict, strict_pred, "math_dapo_strict" if strict_pred else "no_answer"
    else:
        correct, pred, method = _kit_verdict(text, truth, float(verify_timeout_s))
    return {
        "score": shaped_score(correct, tool_rounds, shaping, float(no_tool_penalty)),
        "acc": bool(correct),
        "acc_strict": bool(acc_strict),
        "pred": pred,
        "has_answer": method != "no_answer",
        "tool_rounds": tool_rounds,
        "used_tool": tool_rounds > 0,
        "num_turns": num_turns,
        "tool_failures": sandbox_failures(text),
        "verifier": method,
        **loss_mask_counts(extra_info),
    }


#: Every keyword argument :func:`compute_score` takes from ``custom_reward_function.reward_kwargs`` (its signature's
#: keyword-only parameters, so the list cannot drift from the function).
REWARD_KWARGS: tuple[str, ...] = tuple(
    name
    for name, param in inspect.signature(compute_score).parameters.items()
    if param.kind is inspect.Parameter.KEYWORD_ONLY
)
