"""Find the final answer in a model response and bring it to a canonical form.

Why not verl's ``math_dapo`` strict mode: it compares the raw text of the last ``\\boxed{}`` in the last 100
characters with the ground truth, so ``\\boxed{33.0}``, ``\\boxed{ 204 }``, ``\\boxed{'116'}`` (the quotes come from
verl's own ReTool prompt), ``1{,}234``, ``70^\\circ`` or a box followed by a short remark all score as wrong.

Everything here is pure string work with bounded cost: extraction is linear in the response length (a 1 MB
response takes milliseconds) and normalisation only ever sees at most :data:`MAX_ANSWER_CHARS` characters.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_ANSWER_CHARS = 512
"""Longer "answers" are cut: no competition answer is this long, and it bounds normalisation and verification."""

MAX_BOX_SCAN = 4096
"""A ``\\boxed{`` whose closing brace is further away than this is treated as unclosed (truncated response)."""

MAX_BOX_CANDIDATES = 16
"""How many ``\\boxed``/``\\fbox`` markers, from the end, are tried before giving up (bounds adversarial input)."""

_BOX_MARKERS = ("\\boxed", "\\fbox")
_TOOL_OPEN, _TOOL_CLOSE = "<tool_response>", "</tool_response>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"


def strip_tool_responses(text: str) -> str:
    """Drop ``<tool_response>…</tool_response>`` blocks: an answer must come from the model, not from code output.

    verl decodes the whole trajectory (tool turns included) with ``skip_special_tokens=True``; Qwen's
    ``<tool_response>`` tags are not special tokens, so they survive and mark the interpreter output. Linear scan
    (a lazy regex would go quadratic on many unclosed tags).
    """
    if _TOOL_OPEN not in text:
        return text
    parts: list[str] = []
    pos = 0
    while True:
        start = text.find(_TOOL_OPEN, pos)
        if start < 0:
            parts.append(text[pos:])
            break
        parts.append(text[pos:start])
        end = text.find(_TOOL_CLOSE, start + len(_TOOL_OPEN))
        if end < 0:
            break  # unclosed: the rest is interpreter output cut by the length limit
        pos = end + len(_TOOL_CLOSE)
    return "".join(parts)


def _brace_group(text: str, open_pos: int) -> str | None:
    """Content of the ``{…}`` group opening at ``open_pos``; escaped ``\\{``/``\\}`` do not count."""
    depth = 0
    i = open_pos
    stop = min(len(text), open_pos + MAX_BOX_SCAN)
    while i < stop:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
        i += 1
    return None


_BARE_ARG = re.compile(r"[^\s$<]{1,64}")


def _box_argument(text: str, marker_end: int) -> str | None:
    """Argument of a box macro whose name ends at ``marker_end``: ``{…}`` or a bare token (``\\boxed 5``)."""
    if marker_end < len(text) and text[marker_end].isalpha():
        return None  # \fboxsep, \boxedfoo: another macro
    i = marker_end
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        return _brace_group(text, i)
    if i == marker_end:
        return None  # "\boxed5" style is too ambiguous to guess at; "\boxed 5" is the Minerva convention
    match = _BARE_ARG.match(text, i)
    return match.group(0) if match else None


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed ``\\boxed{…}``/``\\fbox{…}``/``\\boxed x`` in ``text`` (nested braces ok)."""
    end = len(text)
    for _ in range(MAX_BOX_CANDIDATES):
        best = -1
        best_marker = ""
        for marker in _BOX_MARKERS:
            pos = text.rfind(marker, 0, end)
            if pos > best:
                best, best_marker = pos, marker
        if best < 0:
            return None
        arg = _box_argument(text, best + len(best_marker))
        if arg is not None:
            return arg
        end = best
    return None


def last_answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>…</answer>`` (to the end of text when the closing tag is missing)."""
    start = text.rfind(_ANSWER_OPEN)
    if start < 0:
        return None
    start += len(_ANSWER_OPEN)
    end = text.find(_ANSWER_CLOSE, start)
    body = text[start : end if end >= 0 else start + MAX_BOX_SCAN].strip()
    return body or None


def extract_answer(response: str) -> str | None:
    """The model's final answer: the last box, else the last ``<answer>`` block; ``None`` if there is none."""
    text = strip_tool_responses(response)
    answer = last_boxed(text)
    if answer is None:
        answer = last_answer_tag(text)
    if answer is None:
        return None
    return answer[:MAX_ANSWER_CHARS]


# --- normalisation ------------------------------------------------------------------------------------------------

_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_QUOTES = ("'", '"', "`")
_TEXT_MACRO = re.compile(r"\\(?:text|textrm|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_TEXT = re.compile(r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_SPACING = re.compile(r"\\[,!;: ]|~|\\quad|\\qquad")
_SIMPLE_LHS = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=)")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?$")
_INTEGER = re.compile(r"^[+-]?\d+(?:\.0*)?$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+|\d+)$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_FRAC_SHORT = re.compile(r"^([+-]?)\\frac(\d)(\d)$")
_SLASH = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")


def _unwrap_once(s: str) -> str:
    for left, right in _WRAPPERS:
        if len(s) > len(left) + len(right) and s.startswith(left) and s.endswith(right):
            return s[len(left) : len(s) - len(right)].strip()
    for quote in _QUOTES:
        if len(s) >= 2 and s[0] == quote and s[-1] == quote:
            return s[1:-1].strip()
    return s


def clean_answer(answer: str) -> str:
    """Remove presentation noise that never changes a value, keeping valid LaTeX for symbolic comparison.

    Handles: ``$…$``/``\\(…\\)``/``\\[…\\]``, wrapping quotes, ``\\text{…}`` (units dropped when a number remains),
    ``^\\circ``/``^{\\circ}``/``°``, ``\\%``, thousands separators ``{,}``, LaTeX spacing ``\\,`` ``\\!`` ``\\;``,
    ``\\left``/``\\right``, ``\\dfrac``/``\\tfrac``, ``\\displaystyle``, a leading ``x =``, a trailing period, and
    the Unicode minus sign.
    """
    s = answer[:MAX_ANSWER_CHARS].strip()
    for _ in range(4):
        trimmed = s.rstrip(".").strip()
        s = _unwrap_once(trimmed)
        if s == trimmed:
            break
    s = s.replace("\u2212", "-").replace("\\displaystyle", "").replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("{,}", ",").replace("\\%", "").replace("%", "").replace("\\$", "")
    s = _DEGREES.sub("", s)
    s = _SPACING.sub(" ", s)
    without_units = _UNIT_TEXT.sub("", s).strip()
    if without_units != s and re.search(r"\d", without_units):
        s = without_units
    s = _TEXT_MACRO.sub(r"\1", s)
    if s.count("=") == 1 and _SIMPLE_LHS.match(s):
        s = s.split("=", 1)[1]
    s = s.strip().rstrip(".").strip()
    for _ in range(2):
        s = _unwrap_once(s)
    return s


def compact(answer: str) -> str:
    """:func:`clean_answer` without any whitespace: the form used for exact and numeric comparison."""
    return "".join(clean_answer(answer).split())


def as_integer(answer: str) -> int | None:
    """The integer an answer denotes (``33.0``, ``033``, ``1,234``, ``1{,}234``, ``$204$``, ``'116'``…), else None."""
    s = compact(answer)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if not _INTEGER.match(s) or len(s) > 64:
        return None
    return int(s.split(".")[0])


def as_rational(answer: str) -> Fraction | None:
    """The exact rational an answer denotes (integers, decimals, ``a/b``, ``\\frac{a}{b}``, ``\\frac12``), else None."""
    s = compact(answer)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if len(s) > 64:
        return None
    try:
        if _DECIMAL.match(s):
            return Fraction(s)
        for pattern in (_FRAC, _FRAC_SHORT):
            match = pattern.match(s)
            if match:
                sign, num, den = match.groups()
                value = Fraction(int(num), int(den))
                return -value if sign == "-" else value
        match = _SLASH.match(s)
        if match:
            return Fraction(int(match.group(1)), int(match.group(2)))
    except (ValueError, ZeroDivisionError):
        return None
    return None


def canonical(answer: str) -> str:
    """A stable display form: the integer for integer answers, else the compact cleaned text (for maj@N voting)."""
    value = as_rational(answer)
    if value is not None and value.denominator == 1:
        return str(value.numerator)
    return compact(answer)
