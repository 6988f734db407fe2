"""Answer extraction and normalisation (recipes.retool.answer)."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from recipes.retool.answer import (
    MAX_ANSWER_CHARS,
    as_integer,
    as_rational,
    canonical,
    clean_answer,
    extract_answer,
    strip_tool_responses,
)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("so the answer is \\boxed{204}.", "204"),
        ("\\boxed{\\frac{1}{2}} is it", "\\frac{1}{2}"),
        ("nested \\boxed{\\sqrt{\\frac{a}{b}}} ok", "\\sqrt{\\frac{a}{b}}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\fbox{12}", "12"),
        ("$\\boxed 5$", "5"),
        ("\\boxed   {7}", "7"),
        ("escaped \\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("<answer>\n\\boxed{70}\n</answer>", "70"),
        ("no box\n<answer>\n  42  \n</answer>", "42"),
        ("<answer> 13 (the count)", "13 (the count)"),
        ("the fbox spacing \\fboxsep=3pt and \\boxed{3}", "3"),
        ("\\boxed{8} and then a truncated \\boxed{9", "8"),
    ],
)
def test_extract_answer(response: str, expected: str) -> None:
    assert extract_answer(response) == expected


@pytest.mark.parametrize("response", ["", "no answer here", "\\boxed{unclosed", "\\boxedx{3}", "<answer></answer>"])
def test_extract_answer_none(response: str) -> None:
    assert extract_answer(response) is None


def test_box_inside_tool_output_is_not_the_models_answer() -> None:
    response = "Let me run it.\n<tool_response>\n\\boxed{9}\n</tool_response>\nSo it is \\boxed{10}."
    assert extract_answer(response) == "10"
    assert extract_answer("I print it: <tool_response>\\boxed{9}</tool_response> done") is None
    assert strip_tool_responses("a<tool_response>x</tool_response>b<tool_response>cut off") == "ab"


def test_answer_length_is_capped() -> None:
    answer = extract_answer("\\boxed{" + "1" * 3000 + "}")
    assert answer is None or len(answer) <= MAX_ANSWER_CHARS
    assert len(extract_answer("<answer>" + "x" * 5000 + "</answer>")) == MAX_ANSWER_CHARS


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("204", 204),
        (" 204 ", 204),
        ("33.0", 33),
        ("33.", 33),
        ("033", 33),
        ("-3", -3),
        ("\u22123", -3),
        ("+5", 5),
        ("1,234", 1234),
        ("1{,}234", 1234),
        ("1\\,234", 1234),
        ("1\\!234", 1234),
        ("12,345,678", 12345678),
        ("$204$", 204),
        ("\\(204\\)", 204),
        ("'116'", 116),
        ('"116"', 116),
        ("\\text{116}", 116),
        ("\\textbf{116}", 116),
        ("70^\\circ", 70),
        ("70^{\\circ}", 70),
        ("70°", 70),
        ("50\\%", 50),
        ("42 \\text{ cm}", 42),
        ("42\\text{ degrees}", 42),
        ("n = 70", 70),
        ("x=5", 5),
        ("a_{1} = 3", 3),
        ("204.", 204),
        ("$'204'$.", 204),
    ],
)
def test_as_integer(answer: str, value: int) -> None:
    assert as_integer(answer) == value
    assert canonical(answer) == str(value)


@pytest.mark.parametrize(
    "answer",
    ["33.5", "1,23", "12,34,567", "x+1", "\\frac{1}{2}", "2\\sqrt{3}", "1e3", "", "The final answer goes here."],
)
def test_as_integer_rejects(answer: str) -> None:
    assert as_integer(answer) is None


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("\\frac{1}{2}", Fraction(1, 2)),
        ("\\dfrac{140}{2}", Fraction(70)),
        ("-\\frac{3}{4}", Fraction(-3, 4)),
        ("\\frac12", Fraction(1, 2)),
        ("3/4", Fraction(3, 4)),
        ("0.25", Fraction(1, 4)),
        (".5", Fraction(1, 2)),
        ("7", Fraction(7)),
    ],
)
def test_as_rational(answer: str, value: Fraction) -> None:
    assert as_rational(answer) == value


def test_as_rational_rejects_nonsense() -> None:
    assert as_rational("\\frac{1}{0}") is None
    assert as_rational("\\sqrt{2}") is None
    assert canonical("\\dfrac{140}{2}") == "70"


def test_clean_answer_keeps_latex_valid() -> None:
    # Spaces after a command must survive, or "\pi r" would become the undefined "\pir".
    assert clean_answer("$\\pi r^2$") == "\\pi r^2"
    assert clean_answer("\\left( 1, 2 \\right)") == "( 1, 2 )"


def test_extraction_is_linear_on_adversarial_megabyte() -> None:
    inputs = [
        "x" * 1_000_000 + "\\boxed{5}",
        "\\boxed{" * 150_000,
        "<tool_response>" * 60_000,
        "{" * 1_000_000,
        "\\boxed{" + "{" * 1_000_000,
        "<answer>" * 120_000,
    ]
    start = time.perf_counter()
    results = [extract_answer(text) for text in inputs]
    assert time.perf_counter() - start < 1.0
    assert results[0] == "5"
