"""The loss mask's direct witness (recipes/smoke/mask_witness.py), on step lines as verl's console logger prints them
(the kit's reward returns the agent loop's counts; verl logs ``reward_extra/<count>/{mean,max,min}`` per step)."""

from __future__ import annotations

from recipes.smoke import mask_witness, progress

Counts = tuple[float, float, float, float]  # means of tool_tokens, tool_tokens_trained, trained_tokens; min of trained


def _line(step: int, counts: Counts | None) -> str:
    """One training step's line: verl's score and other metrics around the reward's extras."""
    parts = [f"step:{step}", "critic/score/mean:0.25", "reward_extra/acc/mean:0.5"]
    if counts is not None:
        tool, trained_tool, trained, least = counts
        parts += [f"reward_extra/tool_tokens/mean:{tool}", f"reward_extra/tool_tokens/max:{tool * 2}"]
        parts += [f"reward_extra/tool_tokens_trained/mean:{trained_tool}"]
        parts += [f"reward_extra/trained_tokens/mean:{trained}", f"reward_extra/trained_tokens/min:{least}"]
    return "(TaskRunner pid=1) " + " - ".join([*parts, "timing_s/step:60.0"])


def _judged(steps: dict[int, Counts | None], validation: bool = True) -> mask_witness.MaskVerdict:
    lines = ["(TaskRunner pid=1) step:0 - val-core/product/acc/mean@1:0.5"] if validation else []
    text = "\n".join(lines + [_line(step, counts) for step, counts in steps.items()])
    return mask_witness.judge(mask_witness.readings(progress.step_metrics(text)))


def test_a_mask_that_leaves_the_tool_output_out_passes() -> None:
    verdict = _judged({1: (20.0, 0.0, 50.0, 30.0), 2: (22.5, 0.0, 48.0, 31.0), 3: (0.0, 0.0, 40.0, 30.0)})
    assert verdict.ok and verdict.shares == {1: 0.0, 2: 0.0, 3: 0.0}, verdict
    assert verdict.line.startswith("loss mask: no tool-output token trained on at steps [1, 2, 3]")
    assert "\n" not in verdict.line


def test_a_share_above_zero_fails_naming_the_first_step_and_its_share() -> None:
    verdict = _judged({1: (20.0, 0.0, 50.0, 30.0), 2: (20.0, 0.5, 50.0, 30.0), 3: (20.0, 20.0, 70.0, 30.0)})
    assert not verdict.ok
    assert verdict.line.startswith("loss mask: FAILED at step 2: 1.0% of the trained tokens"), verdict.line
    assert verdict.shares[2] == 0.01 and verdict.shares[3] == 20.0 / 70.0


def test_absent_counts_say_what_is_needed() -> None:
    none = _judged({1: None, 2: None})
    assert not none.ok and none.line.startswith("loss mask: need reward_extra/tool_tokens_trained/mean at every RL")
    assert "missing at steps [1, 2]" in none.line and "agent_loop_config_path" in none.line
    one = _judged({1: (20.0, 0.0, 50.0, 30.0), 2: None})
    assert not one.ok and "missing at steps [2] of [1, 2]" in one.line
    assert not _judged({}, validation=False).ok  # no training step at all


def test_a_response_outside_the_kit_loop_or_a_run_without_tool_calls_proves_nothing() -> None:
    unmeasured = _judged({1: (20.0, 0.0, 50.0, 30.0), 2: (19.0, -0.1, 49.0, -1.0)})
    assert not unmeasured.ok and "need every response's counts; at steps [2]" in unmeasured.line
    silent = _judged({1: (0.0, 0.0, 50.0, 30.0), 2: (0.0, 0.0, 40.0, 30.0)})
    assert not silent.ok and silent.line.startswith("loss mask: need a rollout that called the tool")
