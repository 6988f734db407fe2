"""The fault index (tests/faults/README.md) names tests that exist, for every scenario a-h, on every stack.

The fault scenarios live in several folders (patch tests beside their patch, the slow end-to-end runs in tests/cpu and
tests/stack091); the index is where a maintainer finds them, and what ``-m faults`` runs (conftest.py marks the tests
it names), so a renamed or deleted test must fail here, not rot there.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from fault_index import SCENARIOS, tests_by_stack
from kit_testing import REPO_ROOT, kit_env

from platforms import stacks


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_scenario_names_existing_tests_on_every_stack() -> None:
    table = tests_by_stack()
    assert sorted(table) == sorted(stacks.names()), f"the index's stack columns: {sorted(table)}"
    missing, empty = [], []
    for stack, rows in table.items():
        assert sorted(rows) == list(SCENARIOS), f"stack {stack}'s scenarios in the index: {sorted(rows)}"
        for letter, refs in rows.items():
            if not refs:
                empty.append(f"{stack} {letter}")
            for file, name in refs:
                path = REPO_ROOT / file
                if not path.is_file() or name not in _test_functions(path):
                    missing.append(f"{stack} {letter}: {file}::{name}")
    assert not empty, f"scenarios that name no test: {empty}"
    assert not missing, f"the fault index names tests that do not exist: {missing}"


def test_the_index_is_what_minus_m_faults_runs() -> None:
    """``-m faults`` selects every test the index names, and nothing outside the files it names: a test marked
    ``faults`` by hand (a patch's check against unpatched verl, beside the patched one the index names) must live in an
    indexed file."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "faults", "-p", "no:randomly"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=kit_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    selected = {line.split("[")[0] for line in proc.stdout.splitlines() if "::" in line}
    refs = [ref for rows in tests_by_stack().values() for found in rows.values() for ref in found]
    named = {f"{file}::{name}" for file, name in refs}
    files = {file for file, _ in refs}
    assert named <= selected, f"named in the index but not selected by -m faults: {sorted(named - selected)}"
    stray = sorted(test for test in selected if test.split("::")[0] not in files)
    assert not stray, f"marked faults outside the files tests/faults/README.md names: {stray}"
