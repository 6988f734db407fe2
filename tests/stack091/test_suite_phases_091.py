"""Issue 51: CI's phase 3 runs the current stack's learning check, not its --fast pipeline check.

``bash scripts/test.sh`` runs ``tests/stack091 -m slow`` in .venv-0.9.1 (its phase 3): the learning run's tests must
be selected and not skipped there, and the --fast run (what phase 3 ran before) must be skipped with its opt-in reason.
``--setup-plan`` evaluates the skips without running a fixture (no trainer starts).
"""

from __future__ import annotations

import re
import subprocess
import sys

from kit_testing import REPO_ROOT, kit_env, needs_verl_09

pytestmark = needs_verl_09()
MAIN_JOB = "tests/stack091/test_main_job_091.py"


def test_phase_3_runs_the_learning_check_and_skips_the_fast_run() -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "slow", "--setup-plan"]
    proc = subprocess.run(
        [*command, MAIN_JOB], cwd=REPO_ROOT, env=kit_env(), capture_output=True, text=True, timeout=300
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    learning = re.findall(rf"{MAIN_JOB}::(test_\w+) \(fixtures used: [^)]*\blearned\b", out)
    assert len(learning) >= 5 and "test_the_main_job_learns_on_091" in learning, out[-3000:]
    assert re.search(r"\b1 skipped\b", out) and "bash scripts/test.sh -m fast_smoke" in out, out[-3000:]
