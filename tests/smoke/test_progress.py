"""The smoke's progress line for a trainer: step k/N, median seconds per step, ETA (from verl's console log)."""

from __future__ import annotations

from pathlib import Path

from recipes.smoke.progress import (
    RL_STEP_TIME,
    SFT_STEP_MARK,
    SFT_STEP_TIME,
    Progress,
    StepClock,
    median_step_seconds,
    read_tail,
    step_metrics,
)

SFT_LOG = """\
some startup noise
step:1 - train/loss:11.9 - train/lr(1e-3):0.1 - train/time(s):5.0
step:2 - train/loss:10.1 - train/lr(1e-3):0.2 - train/time(s):6.0
step:3 - train/loss:9.0 - train/lr(1e-3):0.3 - train/time(s):100.0
"""

RL_LOG = """\
step:0 - val-core/smoke/acc/mean@2:0.0
step:1 - critic/score/mean:-1.1 - timing_s/step:30.0
step:2 - critic/score/mean:-1.0 - timing_s/step:10.0
"""


def test_sft_progress_uses_the_median_step_time() -> None:
    line = Progress(total_steps=10, time_key=SFT_STEP_TIME).describe(SFT_LOG, elapsed_s=125)
    # median of 5, 6, 100 is 6 (one slow step does not wreck the ETA); 7 steps left -> 42 s
    assert line == "step 3/10, 6.0 s/step, ETA 42s (2m05s elapsed)"


def test_rl_progress_ignores_validation_only_steps() -> None:
    line = Progress(total_steps=3, time_key=RL_STEP_TIME).describe(RL_LOG, elapsed_s=3700)
    assert line == "step 2/3, 20.0 s/step, ETA 20s (1h01m elapsed)"
    assert median_step_seconds(step_metrics(RL_LOG), RL_STEP_TIME) == 20.0


def test_progress_before_the_first_step() -> None:
    line = Progress(total_steps=96, time_key=SFT_STEP_TIME).describe("loading model...\n", elapsed_s=20)
    assert line == "starting, 20s elapsed"
    assert median_step_seconds({}, SFT_STEP_TIME) is None


def test_eta_is_zero_when_done() -> None:
    line = Progress(total_steps=3, time_key=SFT_STEP_TIME).describe(SFT_LOG, elapsed_s=5)
    assert "step 3/3" in line and "ETA 0s" in line


def test_read_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("a" * 100 + "step:7 - train/time(s):1.5\n")
    assert read_tail(log, limit=30).endswith("step:7 - train/time(s):1.5\n")
    assert len(read_tail(log, limit=30)) == 30
    assert read_tail(tmp_path / "missing.log") == ""


def test_first_step_clock_stops_at_the_first_training_step(tmp_path: Path) -> None:
    log = tmp_path / "rl.log"
    clock = StepClock(log, Progress(2, RL_STEP_TIME))
    clock.poll(1.0)  # no log yet
    log.write_text("starting\n" + RL_LOG.splitlines()[0] + "\n")  # validation before training is not a step
    clock.poll(2.0)
    assert clock.seconds is None
    log.write_text(RL_LOG)
    clock.poll(3.5)
    clock.poll(9.0)
    assert clock.seconds == 3.5


# verl 0.9.1's engine SFT trainer logs no step duration, and its numpy 2 prints validation values as np.float64(x)
SFT_LOG_091 = """\
step:1 - perf/cpu_memory_used_gb:8.0 - train/loss:11.9 - train/lr:0.0 - train/global_tokens:1286
step:2 - perf/cpu_memory_used_gb:8.0 - train/loss:10.1 - train/lr:0.02 - train/global_tokens:1286
"""
VAL_LOG_091 = "step:0 - val-core/s/acc/mean@2:np.float64(0.25) - val-aux/s/reward/mean@2:np.float64(-1.4)\n"


def test_numpy_scalars_are_read_as_numbers() -> None:
    assert step_metrics(VAL_LOG_091)[0] == {"val-core/s/acc/mean@2": 0.25, "val-aux/s/reward/mean@2": -1.4}


def test_sft_steps_without_a_logged_duration_are_timed_by_the_clock(tmp_path: Path) -> None:
    progress = Progress(total_steps=10, time_key=SFT_STEP_TIME, step_key=SFT_STEP_MARK)
    assert progress.describe(SFT_LOG_091, elapsed_s=30) == "step 2/10 (30s elapsed)"
    timed = progress.describe(SFT_LOG_091, elapsed_s=30, clock_per_step=2.0)
    assert timed == "step 2/10, 2.0 s/step, ETA 16s (30s elapsed)"
    log = tmp_path / "sft.log"
    clock = StepClock(log, progress)
    log.write_text("loading\n" + SFT_LOG_091.splitlines()[0][:20])  # a line half written is not read yet
    clock.poll(10.0)
    assert clock.seen == {} and clock.seconds_per_step() is None
    log.write_text("loading\n" + SFT_LOG_091.splitlines()[0] + "\n")
    clock.poll(12.0)
    with open(log, "a") as f:
        f.write(SFT_LOG_091.splitlines()[1] + "\nstep:4 - train/loss:9.0\n")
    clock.poll(15.0)
    assert clock.seen == {1: 12.0, 2: 15.0, 4: 15.0}
    assert clock.seconds == 12.0
    assert clock.seconds_per_step() == 1.5  # gaps 3.0 s for one step, 0 s for two: median of 3.0 and 0.0
