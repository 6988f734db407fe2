"""The pipeline check: ``bash scripts/smoke.sh --fast`` end to end with the real trainers, then its table checked.

Every stage must be ok; the SFT losses finite and falling; the SFT model must emit well-formed tool calls; at least
one tool call must have been executed by the sandbox during RL (from the SFT'd policy, not a mock), rolled out by
the platform's engine; the sandbox must be gone afterwards; eval and plots must exist (tests/kit_main_job.py).

The default run checks all of this on the main job itself (tests/smoke/test_learning_run.py: the same pipeline code,
recipes/smoke/pipeline.py, on SmolLM2 and the product task). This run adds the tiny random Qwen3 and the ReTool smoke
task (the AIME-style sources) and takes ~6 minutes, so it runs when asked for: ``bash scripts/test.sh -m fast_smoke``
(tests/conftest.py says why the default run leaves it out).
"""

from __future__ import annotations

import pytest
from kit_main_job import (
    PIPELINE_STAGES,
    check_artifacts,
    check_every_stage_ok,
    check_rl_executed_tool_calls_in_the_sandbox,
    check_sandbox_stopped,
    check_sft_learned_the_tool_call_format,
    run_smoke,
)

from recipes.smoke.commands import FAST

pytestmark = [pytest.mark.slow, pytest.mark.fast_smoke]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_smoke(tmp_path_factory.mktemp("smoke"), "--fast", timeout=1200)


def test_every_stage_ok_and_table_printed(smoke: dict) -> None:
    check_every_stage_ok(smoke, PIPELINE_STAGES, FAST.sft_steps)
    assert smoke["summary"]["fast"] is True
    print(
        f"\n[smoke --fast] wall {smoke['wall']:.0f} s; RL's first step {smoke['summary']['rl_first_step_s']:.0f} s "
        "into its stage"
    )


def test_sft_learned_the_tool_call_format(smoke: dict) -> None:
    check_sft_learned_the_tool_call_format(smoke)


def test_rl_executed_tool_calls_in_the_sandbox(smoke: dict) -> None:
    check_rl_executed_tool_calls_in_the_sandbox(smoke, FAST.rl_steps)


def test_sandbox_stopped(smoke: dict) -> None:
    check_sandbox_stopped(smoke)


def test_artifacts(smoke: dict) -> None:
    check_artifacts(smoke, {"smoke_val", "aime_2025"})
