"""What the model reads back from a code run: output, plus an explicit note for every non-normal outcome.

verl 0.6.1 answers every timeout, sandbox failure and unreachable sandbox with the same ``no stdout here``, and
drops the partial output of a run that timed out, so the model cannot learn to tell a slow loop from a crash. Here:

* finished: stdout + stderr (Python tracebacks included) without trailing whitespace (as the ReTool-SFT
  interpreter turns are), or ``[no output]``;
* timed out: whatever was printed, then ``[timed out after N s]``;
* sandbox failure / unreachable sandbox: ``[sandbox error: …]`` / ``[sandbox unavailable: …]``.

Long output keeps its head and tail around an ``[… N characters omitted …]`` marker; status notes are added after
truncation so they are never cut.
"""

from __future__ import annotations

from recipes.retool.sandbox_client import SandboxResult

NO_OUTPUT = "[no output]"


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
            return f"[process exited with code {result.return_code}, no output]"
        return NO_OUTPUT
    if result.kind == "timeout":
        text = _output(result, max_chars)
        note = f"[timed out after {run_timeout_s:g} s]"
        return f"{text.rstrip()}\n{note}" if text.strip() else note
    if result.kind == "sandbox_error":
        return f"[sandbox error: {result.message}]"
    return f"[sandbox unavailable: {result.message}; the code was not run]"
