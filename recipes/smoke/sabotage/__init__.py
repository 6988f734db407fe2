"""Switches that break what the learning check guards, to prove the check can fail (issue 31's sensitivity bench,
``bash scripts/bench_learn.sh``, and the opt-in weight-sync check of ``tests/cpu/test_cpu_rl.py``).

Why here and not under ``tests/``: the bench is a user-facing command and needs them at run time, in every verl
process it starts, the Ray workers and vLLM servers included. Under ``recipes/`` they ship with the kit (the package,
the images), are importable wherever the kit is (every trainer has the kit first on PYTHONPATH:
``recipes.smoke.supervisor.kit_env``, ``recipes.launch.cluster.ray_node``) with no extra PYTHONPATH entry pointing into
the test tree, and are held to the kit's gates (ruff, size, import graph).

Off unless asked for: this module only names them (no import-time effect; the bench and the tests import it). What
acts is :mod:`.hooks`, imported by verl itself in every process when ``VERL_USE_EXTERNAL_MODULES`` names it, and
then only for the switches whose variables are set; and :mod:`.reward`, used only when a run's reward ``path`` (at
the stack's reward key) points at it. Each prints :data:`MARKER` when it first takes effect in a process, so a
run's log shows that its sabotage really ran (and a shipped run's log, that none did).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from platforms.stacks import Stack

#: The module verl imports in every process it starts (``verl/__init__.py``'s ``VERL_USE_EXTERNAL_MODULES`` hook).
HOOKS_MODULE = "recipes.smoke.sabotage.hooks"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
#: ``first-only``: the vLLM rollout applies only the first weight update (the actor's initial weights).
SYNC_SWITCH, SYNC_FIRST_ONLY = "KIT_TEST_WEIGHT_SYNC", "first-only"
#: ``tool-tokens``: ToolAgentLoop marks the tool's response tokens as the model's own in the loss mask.
MASK_SWITCH, MASK_TOOL_TOKENS = "KIT_TEST_LOSS_MASK", "tool-tokens"
SWITCHES = (SYNC_SWITCH, MASK_SWITCH)
#: The kit's reward with the sign of its training score flipped (the reward's ``path``).
REWARD_FILE = Path(__file__).resolve().with_name("reward.py")
#: What every sabotage prints (once per process) when it first takes effect.
MARKER = "[kit_sabotage]"


@dataclass(frozen=True)
class Sabotage:
    """One way to break the learning check: the environment and RL overrides that switch it on, and the line its
    log then holds (:data:`MARKER` + ``evidence``)."""

    name: str
    broken: str  # what the run breaks, in words (the bench's table)
    env: Mapping[str, str] = field(default_factory=dict)  # besides the hooks module in VERL_USE_EXTERNAL_MODULES
    # (setting, value) of the custom reward function, placed at the stack's reward key (VerlFacts.reward_override)
    reward_settings: tuple[tuple[str, str], ...] = ()
    evidence: str = ""
    # the RL step at which the weight sync's witness (recipes/smoke/sync_witness.py) must name the break; None: no
    # break of the weight sync
    sync_breaks_at: int | None = None
    # the same for the loss mask's witness (recipes/smoke/mask_witness.py)
    mask_breaks_at: int | None = None

    def rl_overrides(self, stack: Stack) -> list[str]:
        """The RL overrides that switch it on, spelt for ``stack``'s verl (the reward's key differs)."""
        return [stack.verl.reward_override(k, v) for k, v in self.reward_settings]

    @property
    def marker(self) -> str:
        return f"{MARKER} {self.evidence}"

    def environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """``environ`` (default: this process's) with the switch on: the hooks module added to verl's list of
        external modules (what is there stays, e.g. the fused kernels) and the sabotage's own variables."""
        env = dict(os.environ if environ is None else environ)
        if self.env:
            modules = [m for m in env.get(EXTERNAL_MODULES_ENV, "").split(",") if m.strip()]
            env[EXTERNAL_MODULES_ENV] = ",".join(dict.fromkeys([*modules, HOOKS_MODULE]))
            env.update(self.env)
        return env


WEIGHT_SYNC = Sabotage(
    "weight-sync",
    "weight sync skipped after the first (vLLM keeps sampling the SFT model)",
    env={SYNC_SWITCH: SYNC_FIRST_ONLY},
    evidence="weight sync",
    sync_breaks_at=2,  # step 1's update is the first one skipped: step 2 samples from the SFT weights
)
REWARD_SIGN = Sabotage(
    "reward-sign",
    "reward sign flipped (the training score is negated; acc is left true)",
    reward_settings=(("path", str(REWARD_FILE)), ("name", "compute_score")),
    evidence="reward sign flipped",
)
LOSS_MASK = Sabotage(
    "loss-mask",
    "loss mask covers the tool's response tokens (trains on text the sandbox wrote)",
    env={MASK_SWITCH: MASK_TOOL_TOKENS},
    evidence="loss mask covers tool tokens",
    # every tool turn from the first, and step 1's batch holds some: 0.56 of its 32 samples called the tool in the
    # seed-0 bench (reward_extra/used_tool/mean), so a step 1 without one is a ~1e-11 chance
    mask_breaks_at=1,
)
SABOTAGES = (WEIGHT_SYNC, REWARD_SIGN, LOSS_MASK)


def switched_on(environ: Mapping[str, str]) -> list[str]:
    """The sabotage settings ``environ`` already holds (a run that must stay clean cannot start from them)."""
    found = [f"{name}={environ[name]}" for name in SWITCHES if environ.get(name)]
    if HOOKS_MODULE in environ.get(EXTERNAL_MODULES_ENV, "").split(","):
        found.append(f"{EXTERNAL_MODULES_ENV}={environ[EXTERNAL_MODULES_ENV]}")
    return found
