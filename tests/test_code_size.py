"""Size gate (issue 22, finding 6): no module over 450 lines and no function over 60 lines outside tests.

Why: the kit's code style (a module is one concern a reader can hold; a function is one step with a name) was kept
by review alone, and it drifted (recipes/smoke/tiny_model.py reached 483 lines, scripts/bench_reward.py's ``main``
86). Measured on the syntax tree, not by eye: a module's length is its line count; a function's is ``end_lineno -
lineno + 1`` of its ``def`` (decorators excluded), and a nested function or method is measured on its own as well
as inside its parent.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60

#: The packages the gate covers (tests/ is not held to it).
GATED_DIRS = ("platforms", "npu_kernels", "recipes", "sandbox", "scripts")


def gated_files() -> list[Path]:
    """The tracked (and untracked, not ignored) .py files under :data:`GATED_DIRS`."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *GATED_DIRS],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(REPO_ROOT / f for f in out if f.endswith(".py") and (REPO_ROOT / f).is_file())


def function_lengths(source: str) -> dict[str, int]:
    """``qualified name -> lines`` for every function and method in ``source``, nested ones included."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    lengths[name] = child.end_lineno - child.lineno + 1  # lineno is the `def`, past decorators
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def offenders(path: Path, source: str) -> dict[str, int]:
    """``item -> lines`` over the limits: ``path`` for the module, ``path::qualname`` for a function."""
    rel = path.relative_to(REPO_ROOT).as_posix() if path.is_absolute() else path.as_posix()
    found: dict[str, int] = {}
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found[rel] = lines
    for name, length in function_lengths(source).items():
        if length > MAX_FUNCTION_LINES:
            found[f"{rel}::{name}"] = length
    return found


def all_offenders() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in gated_files():
        found |= offenders(path, path.read_text())
    return found


def test_no_module_or_function_over_the_limits() -> None:
    found = all_offenders()
    limits = f"modules <= {MAX_MODULE_LINES} lines, functions <= {MAX_FUNCTION_LINES} lines"
    assert not found, f"over the limits ({limits}); split by concern: {found}"


def test_the_gate_sees_what_it_guards() -> None:
    """The measure itself: decorators are not counted, nested functions and methods count on their own."""
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    source = (
        "@decorator\n@another\n"
        f"def at_limit():\n{body}"
        f"def outer():\n    def inner():\n{body.replace('    ', '        ')}    return inner\n"
        f"class C:\n    def method(self):\n{body.replace('    ', '        ')}        return 1\n"
    )
    lengths = function_lengths(source)
    assert lengths["at_limit"] == MAX_FUNCTION_LINES
    assert lengths["outer.inner"] == MAX_FUNCTION_LINES
    assert lengths["outer"] == MAX_FUNCTION_LINES + 2
    assert lengths["C.method"] == MAX_FUNCTION_LINES + 1
    found = offenders(Path("pkg/mod.py"), source)
    assert found == {"pkg/mod.py::outer": MAX_FUNCTION_LINES + 2, "pkg/mod.py::C.method": MAX_FUNCTION_LINES + 1}
    long_module = "x = 1\n" * (MAX_MODULE_LINES + 1)
    assert offenders(Path("pkg/long.py"), long_module) == {"pkg/long.py": MAX_MODULE_LINES + 1}
    assert offenders(Path("pkg/ok.py"), "x = 1\n" * MAX_MODULE_LINES) == {}


@pytest.mark.parametrize("top", GATED_DIRS)
def test_the_gate_reads_every_package(top: str) -> None:
    assert any(p.relative_to(REPO_ROOT).parts[0] == top for p in gated_files()), top
