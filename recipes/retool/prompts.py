"""The kit's tool-use prompt, and removal of the instructions other datasets wrap around their problems.

DAPO-Math-17k wraps every problem in "… The last line of your response should be of the form Answer: $Answer …"
and "Remember to put your answer on its own line after "Answer:".", which contradicts a ``\\boxed{}`` answer (and
verl's recipe appended its own ``\\boxed{'…'}`` instruction after it: two formats, and quotes the strict grader then
rejects). ReTool-SFT wraps its problems in the original ReTool template, which describes ``<code>`` tags instead of
the function calls the model makes through verl. Both are stripped back to the bare problem, which is then put in
:data:`PROMPT_TEMPLATE`, so SFT and RL prompts agree with each other and with the tool the model actually has.
"""

from __future__ import annotations

import re

PROMPT_TEMPLATE = (
    "Solve the following math problem step by step. You can run Python code with the code_interpreter tool "
    "whenever computing, enumerating or checking something is easier in code: the tool returns what the code "
    "prints (errors included), and the value of a bare expression on the last line is shown as well.\n\n"
    "{problem}\n\n"
    "Put the final answer at the end of your response in \\boxed{}, as a bare value without quotes or units, "
    "for example \\boxed{42}."
)


def build_prompt(problem: str) -> str:
    """The user message for one problem (``str.replace``, not ``format``: problems are full of braces)."""
    return PROMPT_TEMPLATE.replace("{problem}", problem.strip())


_DAPO_PREFIX = re.compile(
    r"^\s*Solve the following math problem step by step\.\s*The last line of your response should be of the form "
    r"Answer:\s*\$Answer\s*\(without quotes\)\s*where\s*\$Answer is the answer to the problem\.\s*",
    re.IGNORECASE,
)
_DAPO_SUFFIX = re.compile(r"\s*Remember to put your answer on its own line after \"?Answer:?\"?\.?\s*$", re.IGNORECASE)


def strip_dapo_instructions(text: str) -> tuple[str, bool]:
    """``(problem, stripped)``: DAPO's instruction before and its reminder after the problem removed.

    ``stripped`` is False when neither was found (the text is returned as is, and the caller counts it).
    """
    problem, n_prefix = _DAPO_PREFIX.subn("", text, count=1)
    problem, n_suffix = _DAPO_SUFFIX.subn("", problem, count=1)
    return problem.strip(), bool(n_prefix or n_suffix)


_RETOOL_QUESTION_MARKER = "*user question:*"
_RETOOL_LEAD = re.compile(
    r"^\s*Answer the following Math Problem and put the answer in the format of \\boxed\{\{?answer\}?\}\s*",
    re.IGNORECASE,
)
_RETOOL_TRAILER = re.compile(r"\s*Remember to place the final answer in the last part using the format:.*$", re.DOTALL)


def strip_retool_template(text: str) -> tuple[str, bool]:
    """``(problem, stripped)`` from a ReTool-SFT user message (original template or verl's processed form)."""
    stripped = False
    if _RETOOL_QUESTION_MARKER in text:
        text = text.split(_RETOOL_QUESTION_MARKER, 1)[1]
        stripped = True
    text, n_lead = _RETOOL_LEAD.subn("", text, count=1)
    text, n_trail = _RETOOL_TRAILER.subn("", text, count=1)
    return text.strip(), stripped or bool(n_lead or n_trail)
