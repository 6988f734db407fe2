"""The fault index (tests/faults/README.md) read as data: which tests prove each scenario, per stack.

Why a module: the index is the one list of fault tests. ``conftest.py`` marks every test it names ``faults`` (so
``bash scripts/test.sh -m faults`` and ``bash scripts/test.sh --stack 0.9.1 -m faults`` run exactly the index's
tests of that stack) and ``tests/faults/test_index.py`` checks that each named test exists; neither keeps a copy.
"""

from __future__ import annotations

import re
from pathlib import Path

INDEX = Path(__file__).resolve().parent / "faults" / "README.md"
SCENARIOS = "abcdefgh"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
#: The table's columns after "fault" and "injected how": one per stack, named by its header cell ("stack 0.6.1 ...").
STACK_HEADER = re.compile(r"stack (\d+\.\d+\.\d+)")

TestRef = tuple[str, str]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tests_by_stack(text: str | None = None) -> dict[str, dict[str, list[TestRef]]]:
    """{stack name: {scenario letter: [(test file, test function), ...]}} from the index's table."""
    lines = (INDEX.read_text() if text is None else text).splitlines()
    stacks: list[str | None] = []
    table: dict[str, dict[str, list[TestRef]]] = {}
    for line in lines:
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if not stacks and any(STACK_HEADER.search(c) for c in cells):
            stacks = [(m.group(1) if (m := STACK_HEADER.search(c)) else None) for c in cells]
            table = {name: {} for name in stacks if name}
            continue
        if stacks and len(cells) == len(stacks) and len(cells[0]) == 1 and cells[0] in SCENARIOS:
            for name, cell in zip(stacks, cells, strict=True):
                if name:
                    table[name][cells[0]] = TEST_REF.findall(cell)
    return table


def fault_tests() -> dict[TestRef, set[str]]:
    """{(test file, test function): the stacks whose column names it}."""
    named: dict[TestRef, set[str]] = {}
    for stack, rows in tests_by_stack().items():
        for refs in rows.values():
            for ref in refs:
                named.setdefault(ref, set()).add(stack)
    return named
