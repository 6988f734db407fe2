"""Style gates: ruff on all Python, shellcheck and bash -n on every shell script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

SKIP_DIRS = {".git", ".venv", "build", "__pycache__", ".ruff_cache", ".pytest_cache"}


def _files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / f for f in out if (REPO_ROOT / f).is_file()]


def shell_scripts() -> list[Path]:
    scripts = []
    for path in _files():
        if path.suffix == ".sh" or path == REPO_ROOT / ".ci" / "run":
            scripts.append(path)
        elif not path.suffix and path.read_bytes()[:64].startswith(b"#!") and b"bash" in path.read_bytes()[:64]:
            scripts.append(path)
    return sorted(scripts)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed; the test command installs it with the kit's [test] extra")
    return found


def test_there_are_shell_scripts() -> None:
    names = {p.name for p in shell_scripts()}
    assert {"setup_verl.sh", "test.sh", "run"} <= names


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_bash_syntax(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shellcheck(script: Path) -> None:
    proc = subprocess.run([_tool("shellcheck"), str(script)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", [p for p in shell_scripts() if p.suffix == ".sh" and "lib" not in p.parts])
def test_scripts_are_strict(script: Path) -> None:
    assert "set -euo pipefail" in script.read_text(), f"{script.name} must `set -euo pipefail`"


def test_ruff_check() -> None:
    proc = subprocess.run([_tool("ruff"), "check", "."], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = subprocess.run([_tool("ruff"), "format", "--check", "."], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


_HARDWARE_WORD = re.compile(r"(?<![\w.-])(a2|a3|h200|npu|cuda)(?![\w.-])")


def _case_patterns(text: str) -> list[str]:
    """The pattern lines of every ``case ... in ... esac`` block (``a2 | a3)``, ``cuda)``, ``--hw)``...)."""
    patterns, depth = [], 0
    for line in text.splitlines():
        code = line.split("#", 1)[0].strip()
        if re.match(r"^case\b.*\bin$", code):
            depth += 1
        elif code == "esac" or code.endswith(" esac") or code.startswith("esac"):
            depth = max(0, depth - 1)
        elif depth and re.match(r"^[^()]+\)", code):
            patterns.append(code.split(")", 1)[0])
    return patterns


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_shell_script_holds_a_hardware_table(script: Path) -> None:
    """Issue 13: platforms and hardware profiles are known in one place (platforms); a shell script asks
    `python -m platforms` instead of keeping a `case` over their names."""
    offenders = [p for p in _case_patterns(script.read_text()) if _HARDWARE_WORD.search(p)]
    assert not offenders, f"{script.name}: case patterns over hardware names {offenders}"


def test_the_hardware_table_check_catches_one() -> None:
    sample = "case $HW in\n  a2 | a3) x=1 ;;\n  cuda) x=2 ;;\n  --hw) y ;;\nesac\n"
    assert [p for p in _case_patterns(sample) if _HARDWARE_WORD.search(p)] == ["a2 | a3", "cuda"]
