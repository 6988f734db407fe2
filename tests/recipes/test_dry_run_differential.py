"""Issue 52, "a differential test, not a list": on the reference stack (verl 0.6.1, .venv), every leaf of every RL
recipe's planned config mutated, the dry run's verdict against verl's own start-up checks (tests/verl_differential.py).

The gaps (verl refuses, the dry run says OK) must be none but those :data:`verl_differential.ALLOWED` names with why.
The current stack's twin is tests/stack091/test_dry_run_differential_091.py. ``KIT_DIFFERENTIAL_FULL=1`` runs every
mutation of every leaf (about four times as long) instead of one per leaf.
"""

from __future__ import annotations

import pytest
import verl_differential as differential
from kit_testing import installed_verl, interpreter_stack

pytestmark = pytest.mark.skipif(
    not (installed_verl() or "").startswith("0.6."),
    reason="the reference stack's differential (the current stack's: tests/stack091/test_dry_run_differential_091.py)",
)

HOME = "/nonexistent/kit-home"


def test_every_leaf_mutated_leaves_no_unnamed_gap() -> None:
    differential.check_no_unnamed_gap(interpreter_stack(), HOME)


@pytest.mark.parametrize(("key", "value", "named"), differential.ISSUE_CASES)
def test_a_value_outside_verls_set_is_refused_naming_the_set(key: str, value: str, named: str) -> None:
    differential.check_issue_case(interpreter_stack(), HOME, key, value, named)
