"""Forty dry runs print byte for byte what they printed when recorded (issue 41: the plan computes every number once).

What would fail: any change to a row of the table, a warning, an error or the command a launch runs (an override
dropped, reordered or quoted differently), for any recipe on any profile or for the shapes in
``dry_run_cases.cases()`` (a parquet of known rows, two nodes, parity, a joined Ray cluster, restarts, a refused
layout). The files were recorded at 41c02a2, before the plan held its facts; an intended change of the output is
recorded again with ``dry_run_cases.py --write`` and its diff read before it is committed. In-process: forty
subprocesses would take minutes.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from dry_run_cases import GOLDEN_DIR, cases, record, run_case


def test_every_recipe_and_profile_has_a_recorded_dry_run() -> None:
    names = {case.name for case in cases()}
    assert len(names) == len(cases()) == 40
    assert {path.stem for path in GOLDEN_DIR.glob("*.txt")} == names


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_the_dry_run_prints_what_was_recorded(case, tmp_path: Path) -> None:
    rc, text = run_case(case, tmp_path)
    got, want = record(rc, text), (GOLDEN_DIR / f"{case.name}.txt").read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "recorded", "now"))
    assert got == want, f"the dry run of {case.name} changed:\n{diff}"
