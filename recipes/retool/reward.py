"""ReTool reward for verl's ``custom_reward_function``: answer correctness plus tool-use shaping.

verl config::

    custom_reward_function.path=<kit>/recipes/retool/reward.py
    custom_reward_function.name=compute_score
    +custom_reward_function.reward_kwargs.shaping=no_tool_penalty   # or none | verl
    +custom_reward_function.reward_kwargs.no_tool_penalty=0.4
    +custom_reward_function.reward_kwargs.verify_timeout_s=5   # math-verify bound per call; 0 = never call it

Shapings (k = tool rounds = ``(num_turns - 2) // 2``; ToolAgentLoop reports ``num_turns = 2k + 2``):

* ``none``: the ReTool paper's reward, +1 correct / -1 wrong.
* ``verl``: verl 0.6.1's recipe, wrong answers get ``min(-0.6, -1 + 0.1 k)`` (a tool call softens a miss).
* ``no_tool_penalty`` (default): the Ascend sample's variant, ``no_tool_penalty`` subtracted when no tool was used:
  correct+tool 1.0, correct without 0.6, wrong+tool -1.0, wrong without -1.4.

The result is a dict so verl logs accuracy (``acc``) and tool use (``tool_rounds``, ``used_tool``) apart from the
shaped ``score``; every key is present on every call (verl stacks them across the batch).

verl loads this file by path under the module name ``custom_module``, so the kit's package may not be importable
yet; the kit root is put on ``sys.path`` in that case (Ray workers need it for the tool class anyway).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

try:
    from recipes.retool.answer import canonical, extract_answer
    from recipes.retool.verify import judge
except ImportError:  # loaded by file path from a process without the kit on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from recipes.retool.answer import canonical, extract_answer
    from recipes.retool.verify import judge

logger = logging.getLogger(__name__)

SHAPINGS = ("none", "verl", "no_tool_penalty")
DEFAULT_SHAPING = "no_tool_penalty"
DEFAULT_NO_TOOL_PENALTY = 0.4


class NumTurnsMissingError(RuntimeError):
    """verl did not pass the agent loop's turn count: the kit's verl patch series is not applied."""


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


def shaped_score(correct: bool, tool_rounds: int, shaping: str, no_tool_penalty: float) -> float:
    """The training reward for one response (see the module docstring for the three schemes)."""
    base = 1.0 if correct else -1.0
    if shaping == "none":
        return base
    if shaping == "verl":
        return base if correct else min(-0.6, base + 0.1 * tool_rounds)
    if shaping == "no_tool_penalty":
        return base - (no_tool_penalty if tool_rounds == 0 else 0.0)
    raise ValueError(f"unknown ReTool reward shaping {shaping!r}; choose one of {', '.join(SHAPINGS)}")


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    *,
    shaping: str = DEFAULT_SHAPING,
    no_tool_penalty: float = DEFAULT_NO_TOOL_PENALTY,
    verify_timeout_s: float = 5.0,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one response. ``**kwargs`` absorbs what verl's reward loop adds (``reward_router_address``, …).

    Never raises because of the response text: a failure inside answer checking scores as a wrong answer (and is
    logged). It does raise for configuration errors: an unknown ``shaping`` or a missing ``num_turns``.
    """
    if shaping not in SHAPINGS:
        raise ValueError(f"unknown ReTool reward shaping {shaping!r}; choose one of {', '.join(SHAPINGS)}")
    num_turns, tool_rounds = tool_rounds_from(extra_info)
    text = solution_str if isinstance(solution_str, str) else str(solution_str)
    try:
        answer = extract_answer(text)
        verdict = judge(answer, str(ground_truth), timeout_s=float(verify_timeout_s))
        correct, method = verdict.correct, verdict.method
        pred = canonical(answer) if answer is not None else ""
    except Exception:  # a bug here must cost one sample's reward, not the training step
        logger.exception("ReTool reward: answer check failed; scoring as wrong")
        correct, method, pred = False, "error", ""
    return {
        "score": shaped_score(correct, tool_rounds, shaping, float(no_tool_penalty)),
        "acc": bool(correct),
        "pred": pred,
        "has_answer": method != "no_answer",
        "tool_rounds": tool_rounds,
        "used_tool": tool_rounds > 0,
        "num_turns": num_turns,
        "verifier": method,
    }
