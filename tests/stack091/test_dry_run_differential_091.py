"""Issue 52, "a differential test, not a list": on the current stack (verl 0.9.1, .venv-0.9.1), every leaf of every
RL recipe's planned config mutated, the dry run's verdict against verl's own start-up checks
(tests/verl_differential.py, shared with the reference stack's tests/recipes/test_dry_run_differential.py).

The gaps (verl refuses, the dry run says OK) must be none but those :data:`verl_differential.ALLOWED` names with why.
``KIT_DIFFERENTIAL_FULL=1`` runs every mutation of every leaf instead of one per leaf.
"""

from __future__ import annotations

import pytest
import verl_differential as differential
from kit_testing import interpreter_stack, needs_verl_09

pytestmark = needs_verl_09()

HOME = "/nonexistent/kit-home"


def test_every_leaf_mutated_leaves_no_unnamed_gap() -> None:
    differential.check_no_unnamed_gap(interpreter_stack(), HOME)


@pytest.mark.parametrize(("key", "value", "named"), differential.ISSUE_CASES)
def test_a_value_outside_verls_set_is_refused_naming_the_set(key: str, value: str, named: str) -> None:
    differential.check_issue_case(interpreter_stack(), HOME, key, value, named)


def test_the_cpu_platforms_env_leaves_the_question_answerable(tmp_path) -> None:
    """With VERL_PLATFORM=cpu in the launcher's env (the cpu platform's env, which the smoke sets and users source),
    verl 0.9.1's registry knew no "cpu" platform in the launcher's process, and every CPU RL dry run failed with
    "verl 0.9.1 cannot read the config: ... Unknown platform 'cpu'" (seen with the smoke's RL stage): verl_check
    registers the kit's plugin first, as verl does in every process it starts."""
    import subprocess
    import sys

    from kit_testing import REPO_ROOT, kit_env

    env = {**kit_env(), "VERL_PLATFORM": "cpu", "CKPT_DIR": str(tmp_path / "ckpt")}
    argv = [sys.executable, "-m", "recipes.launch", "run", "qwen3_4b_dapo", "--stack", "0.9.1", "--hw", "cpu"]
    proc = subprocess.run(
        [*argv, "--dry-run", "--no-path-check"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "dry run OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
