"""Code preparation for the sandbox (recipes.retool.notebook): fences and notebook-style display of the last value.

Each case is executed with the local interpreter, so the test checks behaviour, not the rewritten text.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from recipes.retool.notebook import code_from_call, display_last_expression, prepare_code


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", prepare_code(code)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        ("a = 3\na * 7", "21\n"),
        ("import math\nmath.comb(10, 3)", "120\n"),
        ("'abc'", "'abc'\n"),  # repr, as a notebook shows it
        ("x = [1,\n     2]  # comment\nx  # trailing comment", "[1, 2]\n"),
        ("x = (1 +\n  # inner comment\n  2)\nx * 2", "6\n"),
        ("a = 1; a + 1", "2\n"),
        ("print('p')\n1 + 1", "p\n2\n"),
        ("def f():\n    print('side effect')\nf()", "side effect\n"),  # None is not displayed
        ("from __future__ import annotations\n2 ** 10", "1024\n"),
        ("s = 'é'; len(s)", "1\n"),
        ("```python\nimport math\nmath.floor(math.pi)\n```", "3\n"),
    ],
)
def test_last_expression_is_displayed(code: str, stdout: str) -> None:
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == stdout


@pytest.mark.parametrize(
    "code",
    [
        "x = 5",  # verl's recipe: print(x = 5) -> TypeError
        "import math",  # verl's recipe: print(import math) -> SyntaxError
        "print(1)\n# done",  # verl's recipe: SyntaxError, and the earlier print is lost
        "for i in range(3):\n    i * 2",  # indented: verl's recipe changes its meaning
        "if True:\n    5",
        "x = 1\n   \n",
        "1 + 1;",  # a trailing semicolon suppresses display, as in Jupyter
        "print('hi')",
    ],
)
def test_other_code_runs_exactly_as_written(code: str) -> None:
    assert display_last_expression(code) == code
    result = run(code)
    assert result.returncode == 0, result.stderr
    expected = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert result.stdout == expected


def test_syntax_errors_are_left_for_the_sandbox_to_report() -> None:
    assert display_last_expression("1 +") == "1 +"
    assert display_last_expression("x = '\x00'") == "x = '\x00'"
    assert "SyntaxError" in run("def f(:\n  pass").stderr


def test_fenced_blocks() -> None:
    assert code_from_call("```python\nprint(1)\n```") == "print(1)\n"
    assert code_from_call("```py\nprint(1)\n```") == "print(1)\n"
    assert code_from_call("```\nprint(1)\n```") == "print(1)\n"
    assert code_from_call("text\n```python\na = 1\n```\nmore\n```python\nprint(a)\n```") == "a = 1\nprint(a)\n"
    assert code_from_call("print('no fence')") == "print('no fence')"
    assert run("Here:\n```python\na = 2\n```\nand\n```python\na + 40\n```").stdout == "42\n"
