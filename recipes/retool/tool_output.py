"""What the model reads back from a code run: output, plus an explicit note for every non-normal outcome.

verl 0.6.1 answers every timeout, sandbox failure and unreachable sandbox with the same ``no stdout here``, and
drops the partial output of a run that timed out, so the model cannot learn to tell a slow loop from a crash. Here:

* finished: stdout + stderr (Python tracebacks included) without trailing whitespace (as the ReTool-SFT
  interpreter turns are), or ``[no output]``;
* timed out: whatever was printed, then ``[timed out after N s]``;
* sandbox failure / unreachable sandbox: ``[sandbox error: …]`` / ``[sandbox unavailable: …]``;
* a call without code: ``[invalid call: …]``.

Long output keeps its head and tail around an ``[… N characters omitted …]`` marker; status notes are added after
truncation so they are never cut.

The markers are defined here once: the tool writes them (:func:`render_result`, :func:`invalid_call`) and
``retool-eval`` reads them back (:func:`outcome`), so a reworded note cannot silently stop being counted.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # only for annotations: retool-eval imports this module without the HTTP client's deps
    from recipes.retool.sandbox_client import SandboxResult

NO_OUTPUT = "[no output]"
TIMED_OUT = "[timed out after"
EXITED = "[process exited with code"
SANDBOX_ERROR = "[sandbox error"
SANDBOX_UNAVAILABLE = "[sandbox unavailable"
INVALID_CALL = "[invalid call"
#: Notes that mean the code did not run to a result because of the sandbox or the call, not because of the code.
FAILURE_MARKERS = (SANDBOX_ERROR, SANDBOX_UNAVAILABLE, INVALID_CALL)

_CODE_ERROR = re.compile(
    rf"Traceback \(most recent call last\)|^\w*(?:Error|Exception)\b.*$|{re.escape(EXITED)}", re.MULTILINE
)

Outcome = Literal["ok", "code_error", "timeout", "sandbox_failure"]


def timeout_note(seconds: float) -> str:
    return f"{TIMED_OUT} {seconds:g} s]"


def exit_note(return_code: int) -> str:
    return f"{EXITED} {return_code}, no output]"


def sandbox_error(message: str) -> str:
    return f"{SANDBOX_ERROR}: {message}]"


def sandbox_unavailable(message: str) -> str:
    return f"{SANDBOX_UNAVAILABLE}: {message}; the code was not run]"


def invalid_call(message: str) -> str:
    return f"{INVALID_CALL}: {message}]"


def outcome(text: str) -> Outcome:
    """How the run behind one tool response ended, read back from the notes above (a timeout is not a code error)."""
    if TIMED_OUT in text:
        return "timeout"
    if text.strip().startswith(FAILURE_MARKERS):
        return "sandbox_failure"
    if _CODE_ERROR.search(text):
        return "code_error"
    return "ok"


#: One interpreter output inside a rollout's text: chat templates wrap tool messages in these tags, which are not
#: special tokens, so they survive verl's ``decode(..., skip_special_tokens=True)`` (see ``answer.py``).
TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)(?:</tool_response>|$)", re.DOTALL)


def response_outcomes(response: str) -> list[Outcome]:
    """:func:`outcome` of every ``<tool_response>`` block in a whole rollout (what the reward and retool-eval read)."""
    return [outcome(text) for text in TOOL_RESPONSE.findall(response)]


def sandbox_failures(response: str) -> int:
    """How many tool responses in a rollout are sandbox failures (a dead or refusing sandbox, an invalid call)."""
    return response_outcomes(response).count("sandbox_failure")


def truncate_middle(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars``, keeping the head and the tail (where tracebacks end)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def _output(result: SandboxResult, max_chars: int) -> str:
    return truncate_middle(result.stdout + result.stderr, max_chars)


def render_result(result: SandboxResult, run_timeout_s: float, max_chars: int) -> str:
    """The tool-response text for one sandbox result."""
    if result.kind == "finished":
        text = _output(result, max_chars).rstrip()
        if text.strip():
            return text
        if result.return_code not in (0, None):
            return exit_note(result.return_code)
        return NO_OUTPUT
    if result.kind == "timeout":
        text = _output(result, max_chars)
        note = timeout_note(run_timeout_s)
        return f"{text.rstrip()}\n{note}" if text.strip() else note
    if result.kind == "sandbox_error":
        return sandbox_error(result.message)
    return sandbox_unavailable(result.message)
