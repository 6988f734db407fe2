"""Readable progress for a trainer that writes verl's console log: ``step k/N``, seconds per step and an ETA.

Why: a trainer stage runs for minutes with its output going to a log file; "120 s elapsed" says nothing about
whether it will take five more minutes or two hours (a CPU without fast bf16 GEMMs runs 10x slower). verl prints
one ``step:N - key:value - ...`` line per step with the step's own duration (``train/time(s)`` in the SFT trainer,
``timing_s/step`` in the PPO trainer), so the median of those is a robust per-step cost and the ETA follows.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

#: verl's per-step duration, by trainer.
SFT_STEP_TIME = "train/time(s)"
RL_STEP_TIME = "timing_s/step"

_STEP_LINE = re.compile(r"step:(\d+) - (.*)")


def step_metrics(text: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines ``step:N - key:value - ...`` -> ``{N: {key: value}}`` (lines of a step merged)."""
    steps: dict[int, dict[str, float]] = {}
    for match in _STEP_LINE.finditer(text):
        metrics = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, _, value = item.strip().rpartition(":")
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
    """How to read one trainer's log: how many steps it will run and which metric is a step's duration."""

    total_steps: int
    time_key: str

    def describe(self, log_text: str, elapsed_s: float) -> str:
        """``step k/N, x s/step, ETA ...`` from what the log holds so far (``elapsed`` alone before step 1)."""
        times = step_times(step_metrics(log_text), self.time_key)
        if not times:
            return f"starting, {_duration(elapsed_s)} elapsed"
        done = max(times)
        per_step = statistics.median(times.values())
        left = max(0, self.total_steps - done)
        return (
            f"step {done}/{self.total_steps}, {per_step:.1f} s/step, ETA {_duration(left * per_step)} "
            f"({_duration(elapsed_s)} elapsed)"
        )


class FirstStepClock:
    """When a trainer's log first shows a finished step, in seconds since its stage started.

    Why: the time to the first step is the start-up a user waits through before any progress (Ray, the FSDP workers,
    the vLLM servers, the agent-loop workers, validation before training), and the number the start-up target is
    judged by; the per-step median says nothing about it. Polled as the stage runs (every half second, reading the
    log only when it grew), so it is accurate to the poll, not to the heartbeat.
    """

    def __init__(self, log: Path, progress: Progress) -> None:
        self.log, self.progress = log, progress
        self.seconds: float | None = None
        self._size = -1

    def poll(self, elapsed_s: float) -> None:
        if self.seconds is not None:
            return
        try:
            size = os.path.getsize(self.log)
        except OSError:
            return
        if size != self._size:
            self._size = size
            if step_times(step_metrics(read_tail(self.log)), self.progress.time_key):
                self.seconds = elapsed_s


def read_tail(log: Path, limit: int = 4_000_000) -> str:
    """The last ``limit`` bytes of ``log`` (trainer logs of long runs grow; the recent steps are at the end)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
