"""The runs on unpatched verl: run again only when what they prove could have changed (issue 51).

A test that asks for ``unpatched_verl`` or ``kit_verl_without`` runs a scenario on verl as PyPI ships it (or the
kit's series less one patch) and sees it fail: the proof that its patch is needed. Its patched twin, which runs the
same scenario on the stack's venv, fails if the patch goes. The unpatched half proves a fact about fixed inputs: the
pinned verl (pins.env), the stack's patch files, how the tree is built (scripts/setup_verl.sh), the tests themselves.
Measured on 2 cores: 303 s of the reference's quick phase and ~150 s of the current stack's (issue 51, docs/testing.md)
spent proving it again on every run.

So each stack's unpatched runs carry a fingerprint of those inputs (:func:`fingerprint`). A run that passes them all
under ``-m unpatched`` records it (:data:`RECORD`, committed); a plain run skips them, with the reason, only while the
fingerprint is the recorded one. Change a pin, a patch, the setup script or one of these tests and the next plain run
(CI's) runs them all again, until someone proves and records the new inputs.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from platforms import stacks
from platforms.cpu_info import cpu_info

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
RECORD = TESTS_DIR / "patches" / "unpatched_proved.json"
MARKER = "unpatched"
#: The fixtures that hand a test an unpatched verl (tests/conftest.py).
FIXTURES = frozenset({"unpatched_verl", "kit_verl_without"})
#: Inputs every stack's proofs share: the pins, the tree's build, the helpers that make the unpatched trees.
SHARED_INPUTS = ("pins.env", "scripts/setup_verl.sh", "tests/kit_testing.py", "tests/unpatched_proof.py")


def asks_for_unpatched_verl(fixturenames: list[str] | tuple[str, ...]) -> bool:
    return bool(FIXTURES.intersection(fixturenames))


def owning_stack(relative: str) -> str:
    """The stack whose tests a file is (its path from the repo root): the stack whose tests_dir holds it, else the
    default (the whole suite)."""
    for stack in stacks.STACKS.values():
        if stack.tests_dir and relative.startswith(stack.tests_dir.rstrip("/") + "/"):
            return stack.name
    return stacks.default_name()


def proof_files(stack: str, root: Path = REPO_ROOT) -> list[Path]:
    """The stack's test files that ask for an unpatched verl (read, not imported: the record is written where the
    tests are not collected, in xdist's controller)."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if path.name == "conftest.py" or relative in SHARED_INPUTS:  # the fixtures' home, and the shared inputs
            continue
        text = path.read_text(errors="replace")
        if any(name in text for name in FIXTURES) and owning_stack(relative) == stack:
            found.append(path)
    return found


def fingerprint(stack: str, root: Path = REPO_ROOT) -> str:
    """sha256 over the stack's inputs to its unpatched runs, file names and bytes, in a fixed order."""
    patch_dir = root / stacks.get(stack).patch_subdir
    files = [root / name for name in SHARED_INPUTS] + sorted(patch_dir.glob("*.patch")) + proof_files(stack, root)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def recorded(stack: str, record: Path = RECORD) -> dict | None:
    """What :data:`RECORD` holds for ``stack`` (None: never proved, or an unreadable record, which proves nothing)."""
    try:
        entry = json.loads(record.read_text()).get(stack)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def skip_reason(stack: str, record: Path = RECORD, root: Path = REPO_ROOT) -> str | None:
    """Why a plain run may leave the stack's unpatched runs out; None when it must run them (inputs changed)."""
    entry = recorded(stack, record)
    if not entry or entry.get("fingerprint") != fingerprint(stack, root):
        return None
    return (
        f"a run on unpatched verl, proved on these exact inputs ({entry.get('passed')} passed, {entry.get('date')}, "
        f"{record.relative_to(root).as_posix() if record.is_relative_to(root) else record}); a change to pins.env, "
        f"the stack's patches, setup_verl.sh or these tests runs them again; `bash scripts/test.sh -m unpatched` "
        "(`--stack 0.9.1` first for the current stack's) proves them on demand"
    )


def record_proof(stack: str, passed: int, record: Path = RECORD, root: Path = REPO_ROOT) -> dict:
    """After every unpatched run of ``stack`` passed (``passed`` of them): write its fingerprint into the record."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        data = {}
    machine = cpu_info()
    data[stack] = {
        "fingerprint": fingerprint(stack, root),
        "passed": passed,
        "date": datetime.date.today().isoformat(),
        "machine": f"{machine.get('model', '?')}, {machine.get('cores', '?')} cores",
    }
    record.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data[stack]


class Tally:
    """One stack's unpatched tests' outcomes, counted from pytest's reports where they arrive (xdist's controller too:
    it collects no tests, so a test is told by its ``MARKER`` keyword and its file's owning stack)."""

    def __init__(self, stack: str) -> None:
        self.stack = stack
        self.passed = self.failed = self.skipped = 0

    def add(self, report: Any) -> None:  # a pytest TestReport (this module imports no pytest)
        if MARKER not in report.keywords or owning_stack(report.nodeid.split("::")[0]) != self.stack:
            return  # not an unpatched test, or another stack's (skipped in this venv)
        if report.failed:
            self.failed += 1
        elif report.skipped:
            self.skipped += 1
        elif report.when == "call" and report.passed:
            self.passed += 1

    def all_passed(self) -> bool:
        """Some ran, and every one of them passed: what a record needs."""
        return bool(self.passed) and not (self.failed or self.skipped)
