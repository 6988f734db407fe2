"""The speed bench's table (recipes/smoke/speed.py): runs of two settings or two stacks side by side (issue 51)."""

from __future__ import annotations

import pytest

from recipes.smoke import speed


def _run(label: str, stages: dict[str, float], step: float, sft: float | None = None) -> speed.RunSpeed:
    return speed.RunSpeed(label, stages=stages, rl_phase_s={"step": step}, sft_step_s=sft, total_s=sum(stages.values()))


def test_two_stacks_are_headed_by_their_labels_with_the_speed_up() -> None:
    reference = _run("0.6.1 current", {"sft": 200.0, "rl": 400.0}, 80.0)
    current = _run("0.9.1 current", {"sft": 200.0, "rl": 500.0}, 76.0)
    table = speed.render(reference, current).splitlines()
    assert table[0].split() == ["figure", "0.6.1", "current", "0.9.1", "current", "speed-up"]
    step = next(line for line in table if line.startswith("RL step (s/step)"))
    assert step.split()[-3:] == ["80.0", "76.0", "x1.05"]  # the current stack's step against the reference's
    rl = next(line for line in table if line.startswith("stage rl (s)"))
    assert rl.split()[-1] == "x0.80"


def test_a_stage_only_the_baseline_ran_keeps_its_row_in_place() -> None:
    """The tool-call check before issue 51: its seconds stay visible, between merge and sandbox, with no ratio."""
    before = _run("previous", {"sft": 1.0, "merge": 1.0, "tool-call check": 45.0, "sandbox": 1.0}, 1.0)
    after = _run("current", {"sft": 1.0, "merge": 1.0, "sandbox": 1.0}, 1.0)
    names = [line.split(" (s)")[0] for line in speed.render(before, after).splitlines()[2:] if line.startswith("stage")]
    assert names == ["stage sft", "stage merge", "stage tool-call check", "stage sandbox"]
    row = next(line for line in speed.render(before, after).splitlines() if "tool-call check" in line)
    assert row.split()[-3:] == ["45.0", "-", "-"]


def test_the_sft_step_falls_back_to_the_pipelines_figure() -> None:
    """verl 0.9.1's SFT trainer logs no step time: the pipeline's own (gaps between step lines) stands in."""
    assert speed.sft_figures("step:1 - train/loss:1.0\n", 10**8, 1000.0) == (None, None)
    step, gflops = speed.sft_figures("step:1 - train/loss:1.0\n", 10**8, 1000.0, measured=10.0)
    assert step == 10.0 and gflops == 6 * 10**8 * 1000.0 / 10.0 / 1e9


def test_the_updates_flops_follow_the_runs_own_checkpointing() -> None:
    """The update's FLOP count is 8x parameters x tokens with recomputed activations, 6x without: read from the run's
    printed config (the actor's block first, the critic's after), not assumed (the learning check turned it off)."""
    config = "(TaskRunner) {{'actor_rollout_ref': {{'model': {{'enable_gradient_checkpointing': {a},}}}},\n" + (
        "(TaskRunner)  'critic': {{'model': {{'enable_gradient_checkpointing': {c},}}}}}}\n"
    )
    assert speed.actor_recomputes(config.format(a="False", c="True")) is False
    assert speed.actor_recomputes(config.format(a="True", c="False")) is True
    with pytest.raises(ValueError, match="no resolved config"):  # read as neither setting
        speed.actor_recomputes("(TaskRunner) step:1 - timing_s/update_actor:10.0")
    step = "(TaskRunner) step:1 - timing_s/step:20.0 - timing_s/update_actor:10.0 - perf/total_num_tokens:1000\n"
    step += step.replace("step:1", "step:2")
    with_recompute = speed.rl_figures(step, 10**8, True, 32)[1]["update_actor"]
    without = speed.rl_figures(step, 10**8, False, 32)[1]["update_actor"]
    assert (with_recompute, without) == (80.0, 60.0)


def test_the_first_steps_phases_follow_its_row() -> None:
    """Issue 51's start-up target: where the seconds before the first step went, per stack, with the ratio; a run
    recorded before the phases were (no ``rl_startup`` in its summary) shows none."""
    reference = _run("0.6.1 current", {"rl": 400.0}, 60.0)
    current = _run("0.9.1 current", {"rl": 420.0}, 50.0)
    reference.rl_first_step_s, current.rl_first_step_s = 195.1, 220.7
    reference.rl_startup = {"launcher checks": 9.6, "rollout servers": 38.8, "RL step 1": 146.7}
    current.rl_startup = {"launcher checks": 10.7, "rollout servers": 63.3, "RL step 1": 146.7}
    lines = speed.render(reference, current).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("RL first step ends"))
    assert [line.split(" (s)")[0].strip() for line in lines[first + 1 : first + 4]] == [
        "of it: launcher checks",
        "of it: rollout servers",
        "of it: RL step 1",
    ]
    assert lines[first + 2].split()[-3:] == ["38.8", "63.3", "x0.61"]
    older = speed.render(_run("previous", {"rl": 1.0}, 1.0), current).splitlines()
    assert next(line for line in older if "rollout servers" in line).split()[-3:] == ["-", "63.3", "-"]
