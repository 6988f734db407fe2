"""The weight sync's direct witness (recipes/smoke/sync_witness.py), on step lines as verl's console logger prints."""

from __future__ import annotations

from recipes.smoke import progress, sync_witness

KEY = sync_witness.GAP_KEY


def _log(gaps: dict[int, float]) -> str:
    """A trainer log with one verl step line per step (the format of verl's console logger, other metrics around)."""
    return "\n".join(
        f"(TaskRunner pid=1) step:{step} - actor/pg_loss:0.1 - {KEY}:{gap} - training/rollout_probs_diff_max:0.9 - "
        "timing_s/step:60.0"
        for step, gap in gaps.items()
    )


def _judged(gaps: dict[int, float]) -> sync_witness.SyncVerdict:
    return sync_witness.judge(sync_witness.gaps(progress.step_metrics(_log(gaps))))


def test_a_synced_rollout_keeps_the_gap_near_step_ones() -> None:
    verdict = _judged({1: 0.0010, 2: 0.0012, 3: 0.0011, 4: 0.0013})
    assert verdict.ok and verdict.gaps == {1: 0.0010, 2: 0.0012, 3: 0.0011, 4: 0.0013}, verdict
    assert verdict.line.startswith("weight sync: rollout/trainer probability gap within") and "\n" not in verdict.line


def test_a_rollout_that_kept_the_old_weights_is_named_at_the_first_step_it_shows() -> None:
    bound = max(sync_witness.GAP_FACTOR * 0.001, sync_witness.GAP_FLOOR)
    verdict = _judged({1: 0.001, 2: bound * 0.9, 3: bound * 1.5, 4: bound * 3})
    assert not verdict.ok
    assert verdict.line.startswith("weight sync: FAILED at step 3:"), verdict.line
    assert "did not receive step 2's update" in verdict.line


def test_the_floor_keeps_a_tiny_baseline_from_failing_on_noise() -> None:
    """Step 1's gap can be ~0 (both engines agree to the last digit): a gap under the floor is not a failure."""
    assert _judged({1: 1e-7, 2: sync_witness.GAP_FLOOR * 0.5}).ok


def test_without_the_metric_the_witness_says_what_to_switch_on() -> None:
    verdict = sync_witness.judge(sync_witness.gaps(progress.step_metrics("step:1 - actor/pg_loss:0.1")))
    assert not verdict.ok and "calculate_log_probs" in verdict.line
