"""The fault index (tests/faults/README.md) names tests that exist, for every scenario a-g.

The fault scenarios live in three folders (patch tests beside their patch, the slow end-to-end run in tests/cpu);
the index is where a maintainer finds them, so a renamed or deleted test must fail here, not rot there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kit_testing import REPO_ROOT

INDEX = REPO_ROOT / "tests" / "faults" / "README.md"
SCENARIOS = "abcdefg"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _rows() -> dict[str, list[tuple[str, str]]]:
    """{scenario letter: [(test file, test function), ...]} from the index's table."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for line in INDEX.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and len(cells[1]) == 1 and cells[1] in SCENARIOS:
            rows[cells[1]] = TEST_REF.findall(line)
    return rows


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_scenario_names_existing_tests() -> None:
    rows = _rows()
    assert sorted(rows) == list(SCENARIOS), f"scenarios in the index: {sorted(rows)}"
    missing = []
    for letter, refs in rows.items():
        assert refs, f"scenario {letter} names no test"
        for file, name in refs:
            path = REPO_ROOT / file
            if not path.is_file() or name not in _test_functions(path):
                missing.append(f"{letter}: {file}::{name}")
    assert not missing, f"the fault index names tests that do not exist: {missing}"
