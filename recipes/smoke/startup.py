"""The RL stage's start-up, phase by phase: when each of a few once-printed lines first showed in the stage's log.

Why: issue 51 asks what the minutes before the first RL step are (the launcher, Ray, the trainer ranks, the vLLM
servers, the validation before training) before anything is cut. One number, ``rl_first_step_s``, cannot say that.
Each phase here ends at a line that the kit's launcher, Ray or the stack's verl prints once, on its way to the first
step; the :class:`~recipes.smoke.progress.StepClock` that times the steps notes when each first shows (polled every
half second while the stage runs, so each time is good to the poll and to Ray's batching of its workers' output, about
a second). Where a line does not show (a run without validation before training prints no ``step:0``), its phase
is folded into the next one, so the phases always add up to the first step's time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from platforms.stacks import CURRENT, REFERENCE, STACKS

#: Where the kit prints a line itself (a path in this checkout), rather than a stack's verl or Ray (in its install).
KIT = "kit"


@dataclass(frozen=True)
class Mark:
    """The line that ends a phase: its pattern (one alternative per stack where they differ) and the code that prints
    it, ``{stack name or KIT: (file in site-packages or in the kit, the printing code)}``, which the tests find in each
    stack's install."""

    phase: str
    pattern: re.Pattern[str]
    printed_by: dict[str, tuple[str, str]]

    def printer(self, stack: str) -> tuple[str, tuple[str, str]]:
        """``(KIT or stack, (file, code))``: where ``stack``'s run prints this mark's line."""
        where = KIT if KIT in self.printed_by else stack
        return where, self.printed_by[where]


def _on_every_stack(file: str, code: str) -> dict[str, tuple[str, str]]:
    """The same printing code in every stack's install (Ray's, and verl's console logger)."""
    return {name: (file, code) for name in STACKS}


#: Every stack prints these in this order before its first RL step (the step itself ends the last phase).
MARKS: tuple[Mark, ...] = (
    Mark(
        "launcher checks",  # compose the config, verl's checks, the sandbox probe; then the trainer starts
        re.compile(r"^run_recipe: run ", re.M),
        {KIT: ("recipes/launch/cli.py", 'print(f"run_recipe: run ')},
    ),
    Mark(
        "verl driver and Ray",  # main_ppo's imports and its config check, then ray.init
        re.compile(r"(?:Started a local Ray instance|Connected to Ray cluster)\."),
        _on_every_stack("ray/_private/worker.py", 'info_str = "Started a local Ray instance."'),
    ),
    Mark(
        "TaskRunner and trainer ranks",  # the TaskRunner's process, datasets, the FSDP ranks' processes and model
        re.compile(r"Actor use_fused_kernels=|actor and ref model engine initialized"),
        {
            REFERENCE.name: (
                "verl/workers/actor/dp_actor.py",
                'print(f"{role} use_fused_kernels={self.use_fused_kernels}")',
            ),
            CURRENT.name: (
                "verl/trainer/ppo/v1/trainer_base.py",
                'logger.info("actor and ref model engine initialized")',
            ),
        },
    ),
    Mark(
        "rollout servers",  # each vLLM server's processes, its engine, dummy weights and warm-up
        re.compile(r"(?:AgentLoopManager|LLMServerManager): \["),
        {
            REFERENCE.name: (
                "verl/experimental/agent_loop/agent_loop.py",
                'print(f"AgentLoopManager: {self.server_addresses}")',
            ),
            CURRENT.name: ("verl/workers/rollout/llm_server.py", 'print(f"LLMServerManager: {self.server_addresses}")'),
        },
    ),
    Mark(
        # the first weight sync, the agent-loop workers' processes (and 0.9.1's load balancer), then the validation
        "validation before RL",
        re.compile(r"(?:^|\s)step:0 - ", re.M),
        _on_every_stack("verl/utils/logger/aggregate_logger.py", 'output = [f"step:{step}"]'),
    ),
)
FIRST_STEP = "RL step 1"


def scan(text: str, seen: dict[str, float], elapsed_s: float) -> None:
    """Note in ``seen`` (phase -> seconds) each mark that ``text`` (new whole lines of the log) holds for the first
    time, at ``elapsed_s``."""
    for mark in MARKS:
        if mark.phase not in seen and mark.pattern.search(text):
            seen[mark.phase] = elapsed_s


def phases(seen: dict[str, float], first_step_s: float | None) -> dict[str, float | None]:
    """Each phase's seconds, in order, ending with the first step's own (None where its mark never showed: its time
    is in the next phase's). Empty before the first step, when the phases do not yet add up to anything."""
    if first_step_s is None:
        return {}
    out: dict[str, float | None] = {}
    last = 0.0
    for mark in MARKS:
        at = seen.get(mark.phase)
        if at is None or at < last or at > first_step_s:
            out[mark.phase] = None
            continue
        out[mark.phase], last = at - last, at
    out[FIRST_STEP] = first_step_s - last
    return out


def describe(spans: dict[str, float | None]) -> str:
    """``launcher checks 9.6 s, verl driver and Ray 7.1 s, ...``: the phases that showed, for the stage's line."""
    return ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in spans.items() if seconds is not None)
