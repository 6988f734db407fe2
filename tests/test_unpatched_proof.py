"""Issue 51: the runs on unpatched verl are skipped only while their inputs are the ones last proved
(tests/unpatched_proof.py, tests/conftest.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import unpatched_proof
from conftest import _names_marker
from kit_testing import REPO_ROOT, interpreter_stack, kit_env

from platforms import stacks

REFERENCE = stacks.default_name()
PROOF_FILE = "tests/patches/test_timing_allgather.py"  # a cheap one: its unpatched run takes ~8 s


def _root(tmp_path: Path) -> Path:
    """A copy of what the reference's fingerprint reads: the shared inputs, its patches, two of its proof tests, one
    test that asks for no unpatched verl, and one of the current stack's proof tests."""
    root = tmp_path / "kit"
    patch_dir = stacks.get(REFERENCE).patch_subdir
    names = [*unpatched_proof.SHARED_INPUTS, PROOF_FILE, "tests/patches/test_hf_rollout.py", "tests/test_pins.py"]
    names += [p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / patch_dir).glob("*.patch")]
    names.append(next(p for p in unpatched_proof.proof_files("0.9.1")).relative_to(REPO_ROOT).as_posix())
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def _append(path: Path, text: str = "\n# changed\n") -> None:
    path.write_text(path.read_text() + text)


def test_the_fingerprint_follows_each_input_and_nothing_else(tmp_path: Path) -> None:
    root = _root(tmp_path)
    base = unpatched_proof.fingerprint(REFERENCE, root)
    assert base == unpatched_proof.fingerprint(REFERENCE, root), "not deterministic"
    assert [p.relative_to(root).as_posix() for p in unpatched_proof.proof_files(REFERENCE, root)] == sorted(
        ["tests/patches/test_hf_rollout.py", PROOF_FILE]
    )
    first_patch = sorted((root / stacks.get(REFERENCE).patch_subdir).glob("*.patch"))[0]
    unrelated = [root / "tests" / "test_pins.py", *unpatched_proof.proof_files("0.9.1", root)]
    for path in unrelated:  # a test that asks for no unpatched verl, the other stack's proof test
        _append(path)
        assert unpatched_proof.fingerprint(REFERENCE, root) == base, path
    for name in ("pins.env", "scripts/setup_verl.sh", "tests/kit_testing.py", PROOF_FILE):
        _append(root / name)
        changed = unpatched_proof.fingerprint(REFERENCE, root)
        assert changed != base, name
        base = changed
    first_patch.write_text(first_patch.read_text().replace("a", "b", 1))
    assert unpatched_proof.fingerprint(REFERENCE, root) != base
    base = unpatched_proof.fingerprint(REFERENCE, root)
    first_patch.unlink()  # a patch dropped from the series
    assert unpatched_proof.fingerprint(REFERENCE, root) != base


def test_a_skip_needs_the_recorded_fingerprint(tmp_path: Path) -> None:
    root = _root(tmp_path)
    record = root / "proved.json"
    assert unpatched_proof.skip_reason(REFERENCE, record, root) is None, "never proved: they run"
    record.write_text("{not json")
    assert unpatched_proof.skip_reason(REFERENCE, record, root) is None, "an unreadable record proves nothing"
    record.unlink()
    entry = unpatched_proof.record_proof(REFERENCE, 7, record, root)
    assert entry["passed"] == 7 and json.loads(record.read_text())[REFERENCE] == entry
    reason = unpatched_proof.skip_reason(REFERENCE, record, root)
    assert reason and "7 passed" in reason and "bash scripts/test.sh -m unpatched" in reason
    assert unpatched_proof.skip_reason("0.9.1", record, root) is None, "proved for one stack only"
    _append(root / PROOF_FILE)
    assert unpatched_proof.skip_reason(REFERENCE, record, root) is None, "a changed input runs them again"


@pytest.mark.parametrize(
    ("expr", "named"),
    [("unpatched", True), ("not slow and unpatched", True), ("unpatched_e2e", False), ("not unpatched", False),
     ("not slow and not serial", False)],
)  # fmt: skip
def test_only_the_marker_itself_asks_for_the_runs(expr: str, named: bool) -> None:
    assert _names_marker(expr, "unpatched") is named


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", PROOF_FILE, *args],
        cwd=REPO_ROOT, env=kit_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_plain_run_skips_them_exactly_while_the_record_holds() -> None:
    """On the repository as it is: the committed record either matches (the plain run skips the unpatched test with
    the reason, ``-m unpatched`` still runs it) or not (the plain run runs it)."""
    if interpreter_stack().name != REFERENCE:
        pytest.skip(f"{PROOF_FILE} is the reference stack's")
    reason = unpatched_proof.skip_reason(REFERENCE)
    plain = _pytest()
    assert plain.returncode == 0, plain.stdout[-3000:]
    if reason is None:
        assert "2 passed" in plain.stdout, plain.stdout[-2000:]
    else:
        assert "1 passed, 1 skipped" in plain.stdout and "proved on these exact inputs" in plain.stdout, plain.stdout
        asked = _pytest("-m", "unpatched")
        assert asked.returncode == 0 and "1 passed, 1 deselected" in asked.stdout, asked.stdout[-2000:]
