"""Turn a model's tool-call code into the script the sandbox runs, with notebook-style display of the last value.

verl 0.6.1's recipe wraps the last *line* in ``print(...)``. That breaks whenever the last line is not an
expression: ``x = 5`` becomes ``print(x = 5)`` (TypeError), ``import math`` or a comment becomes a SyntaxError
(and the whole cell then prints nothing), an indented line inside a loop changes meaning. Here the code is parsed
and only a bare top-level *expression statement* at the end is displayed, as Jupyter does: its value is printed
(``repr``) unless it is None or the statement ends with ``;``. Anything else runs exactly as written, and code that
does not parse is sent unchanged so the sandbox reports the model's own SyntaxError.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_RESULT_NAME = "_retool_last_value_"


def code_from_call(code: str) -> str:
    """The code to run: the fenced python block(s) if the model wrapped its code in fences, else the raw text.

    Several fenced blocks in one call are run together, in order (the model meant all of them).
    """
    blocks = _FENCE.findall(code)
    if blocks:
        return "\n".join(block.strip("\n") for block in blocks).strip("\n") + "\n"
    return code


def _is_print_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) in the joined source."""
    line = lines[lineno - 1]
    return sum(len(prev) for prev in lines[: lineno - 1]) + len(line.encode()[:col].decode(errors="ignore"))


def display_last_expression(code: str) -> str:
    """``code`` with its final bare expression's value printed, notebook style; otherwise ``code`` unchanged."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes
        return code
    if not tree.body:
        return code
    last = tree.body[-1]
    if not isinstance(last, ast.Expr) or _is_print_call(last.value):
        return code
    if last.end_lineno is None or last.end_col_offset is None:
        return code
    lines = code.splitlines(keepends=True)
    start = _offset(lines, last.lineno, last.col_offset)
    end = _offset(lines, last.end_lineno, last.end_col_offset)
    rest = code[end:]
    if rest.lstrip(" \t").startswith(";"):
        return code  # `value;` suppresses the display, as in Jupyter
    expression = code[start:end]
    display = f"\nif {_RESULT_NAME} is not None:\n    print(repr({_RESULT_NAME}))\n"
    # Parenthesised on lines of its own: valid for any expression, even one spanning lines with comments inside.
    return f"{code[:start]}{_RESULT_NAME} = (\n{expression}\n){rest.rstrip()}{display}"


def prepare_code(raw: str) -> str:
    """Everything the tool does to the model's code before sending it to the sandbox."""
    return display_last_expression(code_from_call(raw))
