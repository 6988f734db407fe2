"""The smoke's progress line for a trainer: step k/N, median seconds per step, ETA (from verl's console log)."""

from __future__ import annotations

from pathlib import Path

from recipes.smoke.progress import (
    RL_STEP_TIME,
    SFT_STEP_TIME,
    FirstStepClock,
    Progress,
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
    clock = FirstStepClock(log, Progress(2, RL_STEP_TIME))
    clock.poll(1.0)  # no log yet
    log.write_text("starting\n" + RL_LOG.splitlines()[0] + "\n")  # validation before training is not a step
    clock.poll(2.0)
    assert clock.seconds is None
    log.write_text(RL_LOG)
    clock.poll(3.5)
    clock.poll(9.0)
    assert clock.seconds == 3.5
