"""Readable progress for a trainer that writes verl's console log: ``step k/N``, seconds per step and an ETA.

Why: a trainer stage runs for minutes with its output going to a log file; "120 s elapsed" says nothing about
whether it will take five more minutes or two hours (a CPU without fast bf16 GEMMs runs 10x slower). verl prints
one ``step:N - key:value - ...`` line per step with the step's own duration (``train/time(s)`` in verl 0.6.1's SFT
trainer, ``timing_s/step`` in the PPO trainer), so the median of those is a robust per-step cost and the ETA follows;
where a trainer logs no duration (verl 0.9.1's SFT), the gaps between its step lines are the cost.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from recipes.smoke import startup

#: verl's per-step duration, by trainer (the SFT one: verl 0.6.1's; 0.9.1's logs none), and the SFT step's mark.
SFT_STEP_TIME = "train/time(s)"
RL_STEP_TIME = "timing_s/step"
SFT_STEP_MARK = "train/loss"

_STEP_LINE = re.compile(r"step:(\d+) - (.*)")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def step_metrics(text: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines ``step:N - key:value - ...`` -> ``{N: {key: value}}`` (lines of a step merged)."""
    steps: dict[int, dict[str, float]] = {}
    for match in _STEP_LINE.finditer(text):
        metrics = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, _, value = item.strip().rpartition(":")
            value = _NUMPY_SCALAR.sub(r"\1", value)  # numpy 2 prints np.float64(0.5) (verl 0.9.1's val metrics)
            try:
                metrics[key] = float(value)
            except ValueError:
                pass
    return steps


def step_times(steps: dict[int, dict[str, float]], time_key: str) -> dict[int, float]:
    """``{step: seconds}`` for the steps that logged ``time_key`` (validation-only steps such as step 0 do not)."""
    return {step: metrics[time_key] for step, metrics in sorted(steps.items()) if time_key in metrics}


def median_step_seconds(steps: dict[int, dict[str, float]], time_key: str) -> float | None:
    times = list(step_times(steps, time_key).values())
    return statistics.median(times) if times else None


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class Progress:
    """How to read one trainer's log: how many steps it will run, which metric is a step's duration, and which
    marks a finished training step (the duration, unless the trainer logs none: verl 0.9.1's engine SFT trainer
    logs no step time, verl/trainer/sft_trainer.py:395-410, so its steps are told by ``train/loss`` and timed by the
    :class:`StepClock`)."""

    total_steps: int
    time_key: str
    step_key: str = ""

    @property
    def marker(self) -> str:
        return self.step_key or self.time_key

    def describe(self, log_text: str, elapsed_s: float, clock_per_step: float | None = None) -> str:
        """``step k/N, x s/step, ETA ...`` from what the log holds so far (``elapsed`` alone before step 1); the
        seconds per step are the trainer's own where it logs them, else the clock's (``clock_per_step``)."""
        steps = step_metrics(log_text)
        done_steps = [step for step, metrics in steps.items() if self.marker in metrics]
        if not done_steps:
            return f"starting, {_duration(elapsed_s)} elapsed"
        done = max(done_steps)
        times = step_times(steps, self.time_key)
        per_step = statistics.median(times.values()) if times else clock_per_step
        if per_step is None:
            return f"step {done}/{self.total_steps} ({_duration(elapsed_s)} elapsed)"
        left = max(0, self.total_steps - done)
        return (
            f"step {done}/{self.total_steps}, {per_step:.1f} s/step, ETA {_duration(left * per_step)} "
            f"({_duration(elapsed_s)} elapsed)"
        )


class StepClock:
    """When each training step first shows in a trainer's log, in seconds since its stage started.

    Why: the time to the first step is the start-up a user waits through before any progress (Ray, the FSDP workers,
    the vLLM servers, the agent-loop workers, validation before training), and the number the start-up target is
    judged by; the per-step median says nothing about it. And a trainer that logs no step duration (verl 0.9.1's
    SFT) is timed by the gaps between its steps. Polled as the stage runs (every half second), reading only what
    the log gained since the last poll, so it is accurate to the poll, not to the heartbeat. The same polls note when
    each start-up mark first showed (:mod:`recipes.smoke.startup`), which :meth:`startup_phases` splits the first
    step's time by.
    """

    def __init__(self, log: Path, progress: Progress) -> None:
        self.log, self.progress = log, progress
        self.seen: dict[int, float] = {}
        self.marks: dict[str, float] = {}
        self._offset = 0
        self._partial = ""

    @property
    def seconds(self) -> float | None:
        """When the first training step showed (None before it)."""
        return self.seen[min(self.seen)] if self.seen else None

    def poll(self, elapsed_s: float) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        self._offset += len(data)
        text = self._partial + data.decode(errors="replace")
        lines, _, self._partial = text.rpartition("\n")
        startup.scan(lines, self.marks, elapsed_s)
        for step, metrics in step_metrics(lines).items():
            if self.progress.marker in metrics:
                self.seen.setdefault(step, elapsed_s)

    def startup_phases(self) -> dict[str, float | None]:
        """The first step's time, phase by phase (:func:`recipes.smoke.startup.phases`; empty before it)."""
        return startup.phases(self.marks, self.seconds)

    def seconds_per_step(self) -> float | None:
        """The median gap between consecutive steps seen (None before two steps)."""
        seen = sorted(self.seen.items())
        gaps = [(t2 - t1) / (s2 - s1) for (s1, t1), (s2, t2) in zip(seen, seen[1:], strict=False) if s2 > s1]
        return statistics.median(gaps) if gaps else None


def read_tail(log: Path, limit: int = 4_000_000) -> str:
    """The last ``limit`` bytes of ``log`` (trainer logs of long runs grow; the recent steps are at the end)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
