"""``--max-restarts N``: run the trainer under a supervisor that relaunches it, resuming, when it dies.

Why: a ReTool run on Atlas lasts days (the 4B recipe plans 279 steps, the 32B 150), and in that time a process dies:
an HCCL timeout, a device out of memory, a node reboot. verl exits non-zero and nothing starts it again. With
``--max-restarts N`` the launcher runs the approved command as a child instead of exec'ing it, and when the child
exits non-zero:

* cleans up what the attempt left: the child runs in its own session, and its whole process group (the driver and
  the local Ray head it started on a single node: gcs, raylet, workers) is killed; on a cluster the group holds the
  driver only, and Ray ends the job's actors when their driver goes;
* relaunches the same command with ``trainer.resume_mode=auto``, which (patch 0017) resumes from the newest complete
  checkpoint and refuses to start over silently;
* prints ``restart k/N: resuming from global_step_S (lost T steps of work)``, T counted from the ``step:N`` lines the
  attempt printed (verl's console logger) against the checkpoint it resumes from. S is read from the checkpoint folder
  by the layout of the stack's trainer (:class:`platforms.verl_facts.CheckpointLayout`, handed down from the plan):
  what makes a step complete (verl 0.9.1's SFT trainer keeps its dataloader state in ``data_0.pt``, 0.6.1's in
  ``data.pt``) and whether the trainer passes over an incomplete one; the line says when the tracker's step is not
  what the trainer can resume;
* gives up after N restarts with one line per attempt.

Metrics are not counted twice: the resumed trainer logs from step S+1, and ``retool-plot`` keeps a step logged by
two attempts once, with the later attempt's value (recipes/retool/plot.py, ``read_scalars``).

A Ctrl-C or SIGTERM sent to the launcher stops the child and is never answered with a restart.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from platforms.verl_facts import CheckpointLayout
from recipes.launch.supervision.process_group import kill_group

#: verl's console logger: ``step:12 - actor/pg_loss:... - ...`` (verl/utils/tracking.py, _ConsoleLogger). The SFT
#: trainer's progress bar (tqdm, no newline) can come right before it on the same line: ``...2.63s/it]step:1 - ...``;
#: a metric key ending in ``step`` (``training/global_step:3``, ``timing_s/step:7.4``) is not a step line.
STEP_LINE = re.compile(r"(?<![\w/])step:(\d+)(?:\s+-|\s*$)")
TRACKER = "latest_checkpointed_iteration.txt"
RESUME_KEY = "trainer.resume_mode"
#: seconds a killed attempt's processes get between SIGTERM and SIGKILL
GRACE_S = 10.0


@dataclass
class Attempt:
    number: int
    returncode: int
    last_step: int | None  # the last ``step:N`` line it printed
    resumed_from: int | None  # the checkpoint step it started from (None: from the start)
    seconds: float


def checkpoint_step(ckpt_dir: Path, layout: CheckpointLayout | None = None) -> int | None:
    """The step ``resume_mode=auto`` starts from, None for step 0: by the trainer's ``layout`` (the launcher hands
    the plan's), else the step the tracker names (what a stand-in trainer keeps: the tracker, written last)."""
    return resume_point(ckpt_dir, layout)[0]


def resume_point(ckpt_dir: Path, layout: CheckpointLayout | None = None) -> tuple[int | None, str]:
    """(:func:`checkpoint_step`, why it is not simply the tracker's complete step: "" when it is)."""
    if layout is not None:
        return layout.resume_point(ckpt_dir)
    try:
        return int((ckpt_dir / TRACKER).read_text().strip()), ""
    except (OSError, ValueError):
        return None, ""


def resume_phrase(step: int | None, note: str, none: str = "step 0 (no checkpoint yet)") -> str:
    """``global_step_S`` (or ``none``), with the layout's note when the tracker's step is not a clean resume."""
    where = none if step is None else f"global_step_{step}"
    return f"{where} [{note}]" if note else where


def with_resume_auto(command: Sequence[str]) -> list[str]:
    """The command with ``trainer.resume_mode=auto`` (replacing any other mode: Hydra refuses a key given twice)."""
    kept = [word for word in command if not word.lstrip("+").startswith(f"{RESUME_KEY}=")]
    return [*kept, f"{RESUME_KEY}=auto"]


def resume_mode(command: Sequence[str]) -> str:
    modes = [word.split("=", 1)[1] for word in command if word.lstrip("+").startswith(f"{RESUME_KEY}=")]
    return modes[-1] if modes else "auto"  # verl's default (trainer/config/ppo_trainer.yaml)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Stop:
    """Ctrl-C / SIGTERM to the supervisor: forwarded to the child's group, and no restart after it."""

    def __init__(self) -> None:
        self.requested, self.proc = False, None

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True
        if self.proc is not None:
            _signal_group(self.proc, signum)


def _pass_through(stream: IO[bytes], out: TextIO, steps: list[int]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        out.write(line)
        out.flush()
        if match := STEP_LINE.search(line):
            steps.append(int(match.group(1)))


def run_attempt(
    command: Sequence[str], env: Mapping[str, str], stop: _Stop, out: TextIO, proc: subprocess.Popen | None = None
) -> tuple[int, int | None]:
    """One trainer run, its output passed through to ``out``; returns (exit status, last step it logged). ``proc``:
    the trainer already running ``command`` (a prewarmed driver, recipes.launch.supervision.prewarm), else started.

    The output is read on a thread and the attempt ends when the trainer exits, not when its output closes: what
    the trainer started (a local Ray head) holds the same pipe and may outlive it until its group is killed."""
    steps: list[int] = []
    if proc is None:
        proc = subprocess.Popen(
            list(command), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    stop.proc = proc
    reader = threading.Thread(target=_pass_through, args=(proc.stdout, out, steps), daemon=True)
    reader.start()
    try:
        returncode = proc.wait()
    finally:
        kill_group(proc, GRACE_S)  # what the attempt left in its group: the local Ray head
        stop.proc = None
        # a process outside the group may still hold the pipe: stop waiting for it (closing the stream under the
        # blocked reader would wait for it too); the daemon reader ends when that process does
        reader.join(timeout=GRACE_S)
        if not reader.is_alive():
            proc.stdout.close()
    return returncode, steps[-1] if steps else None


def _lost(attempt: Attempt, resume_at: int | None) -> int:
    return max(0, (attempt.last_step or 0) - (resume_at or 0))


def _summary(attempts: Sequence[Attempt]) -> str:
    rows = []
    for a in attempts:
        start = "step 0" if a.resumed_from is None else f"global_step_{a.resumed_from}"
        last = "-" if a.last_step is None else a.last_step
        rows.append(f"  attempt {a.number}: rc {a.returncode}, from {start}, last step {last}, {a.seconds:.0f}s")
    return "\n".join(rows)


def supervise(
    command: Sequence[str],
    env: Mapping[str, str],
    ckpt_dir: Path,
    max_restarts: int,
    log: TextIO = sys.stderr,
    out: TextIO | None = None,
    before_restart: Callable[[], str | None] | None = None,
    layout: CheckpointLayout | None = None,
    first: subprocess.Popen | None = None,
) -> int:
    """Run ``command``; relaunch it resuming after each non-zero exit, at most ``max_restarts`` times. The trainer's
    output goes to ``out`` (default stdout), the supervisor's lines to ``log``. ``before_restart`` (multi-node RL:
    :func:`recipes.launch.cluster.ray_cluster.wait_for_nodes`) returns why a relaunch cannot work, after waiting as long
    as it chooses; the supervisor then stops with that line instead of starting a trainer that would wait forever.
    ``layout``: the checkpoint layout of the stack's trainer for this phase (``plan.stack.verl.checkpoint(phase)``),
    which says where a resume starts (:func:`resume_point`). ``first``: the first attempt's trainer, already running
    ``command`` (a prewarmed driver); every restart starts afresh."""
    stop = _Stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    attempts: list[Attempt] = []
    try:
        while True:
            start = None if resume_mode(command) == "disable" else checkpoint_step(ckpt_dir, layout)
            t0 = time.monotonic()
            running = first if not attempts else None
            returncode, last_step = run_attempt(command, env, stop, out or sys.stdout, running)
            attempts.append(Attempt(len(attempts) + 1, returncode, last_step, start, time.monotonic() - t0))
            if returncode == 0 or stop.requested:
                break
            restarts = len(attempts) - 1
            if restarts >= max_restarts:
                print(f"restart: giving up after {restarts} restart(s); last exit status {returncode}", file=log)
                break
            blocked = before_restart() if before_restart is not None else None
            if blocked:
                print(f"restart: not restarting after exit status {returncode}: {blocked}", file=log, flush=True)
                break
            resume_at, note = resume_point(ckpt_dir, layout)
            where = resume_phrase(resume_at, note)
            print(
                f"restart {restarts + 1}/{max_restarts}: trainer exited with status {returncode} after step "
                f"{last_step if last_step is not None else '-'}; resuming from {where} "
                f"(lost {_lost(attempts[-1], resume_at)} steps of work)",
                file=log,
                flush=True,
            )
            command = with_resume_auto(command)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if len(attempts) > 1:
        print("restart summary:\n" + _summary(attempts), file=log, flush=True)
    return attempts[-1].returncode
