"""The RL stage's start-up split by phase (recipes/smoke/startup.py): each phase ends at a line the launcher, Ray or
the stack's verl prints once; the phases add up to the first step's time; and every mark's line is still printed by
the code the mark names, in this interpreter's stack (tests/stack091/test_startup_marks_091.py: the current stack's).
The learning checks read the phases off real logs of both stacks (tests/kit_main_job.py check_every_stage_ok)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_testing import interpreter_stack
from startup_marks import check_marks_are_printed_by_their_code

from recipes.smoke import startup
from recipes.smoke.progress import RL_STEP_TIME, Progress, StepClock

# The lines as each stack's run printed them (the learning check's RL logs on the Xeon, 2026-12-01), with noise between.
LINES = {
    "0.6.1": [
        "run_recipe: run env TENSORBOARD_DIR=/x /work/.venv/bin/python -m verl.trainer.main_ppo --config-path x",
        "2026-12-01 01:22:24,677\tINFO worker.py:1927 -- Started a local Ray instance.",
        "\x1b[36m(WorkerDict pid=27122)\x1b[0m Actor use_fused_kernels=False",
        "\x1b[36m(TaskRunner pid=27023)\x1b[0m AgentLoopManager: ['192.0.2.2:40489', '192.0.2.2:45165']",
        "\x1b[36m(TaskRunner pid=27023)\x1b[0m step:0 - val-aux/product/reward/mean@1:0.078125 - val-core/x:0.5",
    ],
    "0.9.1": [
        "run_recipe: run env TENSORBOARD_DIR=/x /work/.venv-0.9.1/bin/python -m verl.trainer.main_ppo --config-path x",
        "2026-12-01 01:32:02,377\tINFO worker.py:1927 -- Started a local Ray instance.",
        "\x1b[36m(TaskRunnerV1 pid=29326)\x1b[0m INFO:2026-12-01 01:32:34,194:actor and ref model engine initialized",
        "\x1b[36m(TaskRunnerV1 pid=29326)\x1b[0m LLMServerManager: ['192.0.2.2:46205']",
        "\x1b[36m(TaskRunnerV1 pid=29326)\x1b[0m step:0 - val-core/product/acc/mean@1:np.float64(0.64)",
    ],
}
STEP_1 = "\x1b[36m(TaskRunner pid=1)\x1b[0m step:1 - critic/score/mean:-0.1 - timing_s/step:63.9"
NOISE = "\x1b[36m(WorkerDict pid=1)\x1b[0m WARNING sleep mode is not supported on CPU, ignore it."
#: when each line shows, seconds into the stage (the reference's run: 9.6, 16.7, 33.9, 72.7, 131.2, 195.1)
AT = [9.6, 16.7, 33.9, 72.7, 131.2, 195.1]


def _run(tmp_path: Path, lines: list[str], at: list[float]) -> StepClock:
    """Write each line to the log at its time and poll, as run_logged does; a noise line between."""
    log = tmp_path / "rl.log"
    log.write_text("$ bash recipes/run_qwen3_4b_dapo_npu.sh --hw cpu\n")
    clock = StepClock(log, Progress(4, RL_STEP_TIME))
    clock.poll(0.5)
    for line, t in zip(lines, at, strict=True):
        with open(log, "a") as f:
            f.write(f"{NOISE}\n{line}\n")
        clock.poll(t)
        clock.poll(t + 0.4)  # a later poll never moves a mark
    return clock


@pytest.mark.parametrize("stack", sorted(LINES))
def test_each_stacks_marks_split_the_first_step(tmp_path: Path, stack: str) -> None:
    clock = _run(tmp_path, [*LINES[stack], STEP_1], AT)
    spans = clock.startup_phases()
    assert list(spans) == [m.phase for m in startup.MARKS] + [startup.FIRST_STEP]
    expected = [b - a for a, b in zip([0.0, *AT], AT, strict=False)]
    assert list(spans.values()) == pytest.approx(expected)
    assert sum(spans.values()) == pytest.approx(clock.seconds) == pytest.approx(195.1)
    assert startup.describe(spans).startswith("launcher checks 9.6 s, verl driver and Ray 7.1 s, ")


def test_a_mark_that_never_shows_folds_into_the_next_phase(tmp_path: Path) -> None:
    """No validation before training (trainer.val_before_train=False): no step:0, its time is step 1's."""
    lines = [*LINES["0.6.1"][:4], STEP_1]
    spans = _run(tmp_path, lines, [9.6, 16.7, 33.9, 72.7, 140.0]).startup_phases()
    assert spans["validation before RL"] is None
    assert spans[startup.FIRST_STEP] == pytest.approx(140.0 - 72.7)
    assert sum(v for v in spans.values() if v is not None) == pytest.approx(140.0)
    assert "validation" not in startup.describe(spans)


def test_no_phases_before_the_first_step(tmp_path: Path) -> None:
    clock = _run(tmp_path, LINES["0.9.1"], AT[:5])
    assert clock.marks and clock.startup_phases() == {}


def test_a_mark_is_timed_when_it_first_shows_not_at_a_later_repeat(tmp_path: Path) -> None:
    """verl prints step lines of later steps and a restart prints the launcher's line again: the first one counts."""
    lines = [*LINES["0.6.1"], LINES["0.6.1"][0], STEP_1]
    spans = _run(tmp_path, lines, [*AT[:5], 150.0, 195.1]).startup_phases()
    assert spans["launcher checks"] == pytest.approx(9.6)


def test_the_marks_are_printed_by_this_stacks_code() -> None:
    check_marks_are_printed_by_their_code(interpreter_stack().name)


def test_a_run_that_joins_a_running_ray_cluster_is_split_the_same(tmp_path: Path) -> None:
    """A multi-node run attaches to the cluster scripts/ray_cluster.sh started: Ray says so in its other line
    (ray/_private/worker.py:1914-1916)."""
    joined = "2026-12-01 01:22:24,677\tINFO worker.py:1927 -- Connected to Ray cluster."
    lines = [LINES["0.9.1"][0], joined, *LINES["0.9.1"][2:], STEP_1]
    spans = _run(tmp_path, lines, AT).startup_phases()
    assert spans["verl driver and Ray"] == pytest.approx(7.1)
