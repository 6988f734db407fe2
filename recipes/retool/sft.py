"""Convert ReTool-SFT rows to verl's multi-turn SFT schema: ``messages`` with tool calls and tool turns, ``tools``.

Sources:

* ``JoeYing/ReTool-SFT`` (``retool_sft_raw``): a user message in the ReTool template and ONE assistant string
  with ``<code>```python …```</code>`` / ``<interpreter>…</interpreter>`` pairs and a final ``<answer>…</answer>``;
* ``swordfaith/ReTool-SFT-multi-turn`` (``sft_multiturn``): already split into turns; tool-call ``arguments`` may be
  a dict or a JSON string, messages carry null ``name``/``tool_call_id`` keys, and ``tools`` may be a JSON string.

Output row: ``{"messages": [...], "tools": [TOOL_SCHEMA], "data_source": "retool_sft"}`` where every assistant turn
that calls the tool has ``tool_calls=[{"type": "function", "function": {"name": "code_interpreter", "arguments":
{"code": …}}}]`` (a dict: Qwen2.5's template applies ``tojson`` to it) followed by a ``tool`` turn with the
interpreter output. The user turn is re-wrapped in the kit's RL prompt (unless ``keep_prompt``), so SFT teaches the
same prompt -> behaviour mapping the RL stage then uses.
"""

from __future__ import annotations

import json
import re
from typing import Any

from recipes.retool.prompts import build_prompt, strip_retool_template
from recipes.retool.schema import TOOL_NAME, TOOL_SCHEMA
from recipes.retool.sources import SchemaError

_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ANSWER_TAGS = re.compile(r"</?answer>")


def _tool_call(code: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": TOOL_NAME, "arguments": {"code": code}}}


def _user_message(content: str, keep_prompt: bool) -> dict[str, Any]:
    if keep_prompt:
        return {"role": "user", "content": content}
    problem, _ = strip_retool_template(content)
    return {"role": "user", "content": build_prompt(problem)}


def split_assistant_text(text: str, source: str, index: int) -> list[dict[str, Any]]:
    """The ``assistant``/``tool`` turns encoded in one ReTool-SFT assistant string."""
    turns: list[dict[str, Any]] = []
    pos = 0
    while True:
        code_start = text.find("<code>", pos)
        if code_start < 0:
            break
        code_end = text.find("</code>", code_start)
        if code_end < 0:
            raise SchemaError(source, index, "messages[1].content", f"<code> at char {code_start} is never closed")
        block = text[code_start + len("<code>") : code_end]
        fenced = _FENCED.search(block)
        code = (fenced.group(1) if fenced else block).strip("\n")
        if not code.strip():
            raise SchemaError(source, index, "messages[1].content", f"empty code block at char {code_start}")
        out_start = text.find("<interpreter>", code_end)
        next_code = text.find("<code>", code_end)
        if out_start < 0 or (0 <= next_code < out_start):
            raise SchemaError(
                source, index, "messages[1].content", f"code block at char {code_start} has no <interpreter> output"
            )
        out_end = text.find("</interpreter>", out_start)
        if out_end < 0:
            raise SchemaError(source, index, "messages[1].content", f"<interpreter> at char {out_start} never closed")
        turns.append({"role": "assistant", "content": text[pos:code_start].strip(), "tool_calls": [_tool_call(code)]})
        turns.append({"role": "tool", "content": text[out_start + len("<interpreter>") : out_end].strip()})
        pos = out_end + len("</interpreter>")
    final = _ANSWER_TAGS.sub("", text[pos:]).strip()
    if not final:
        raise SchemaError(source, index, "messages[1].content", "no final answer text after the last tool output")
    turns.append({"role": "assistant", "content": final})
    return turns


def convert_raw(row: dict[str, Any], source: str, index: int, keep_prompt: bool = False) -> dict[str, Any]:
    """A ``JoeYing/ReTool-SFT`` row in verl's multi-turn SFT schema."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        raise SchemaError(source, index, "messages", f"expected [user, assistant], got {messages!r:.80}")
    user, assistant = messages[0], messages[-1]
    if not isinstance(user, dict) or user.get("role") != "user" or not isinstance(user.get("content"), str):
        raise SchemaError(source, index, "messages[0]", "expected a user message with text content")
    if not isinstance(assistant, dict) or assistant.get("role") != "assistant":
        raise SchemaError(source, index, f"messages[{len(messages) - 1}]", "expected an assistant message")
    if not isinstance(assistant.get("content"), str):
        raise SchemaError(source, index, f"messages[{len(messages) - 1}].content", "expected a string")
    turns = split_assistant_text(assistant["content"], source, index)
    return {
        "messages": [_user_message(user["content"], keep_prompt), *turns],
        "tools": [TOOL_SCHEMA],
        "data_source": "retool_sft",
    }


def _arguments(value: Any, source: str, index: int, field_name: str) -> dict[str, str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise SchemaError(source, index, field_name, f"arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("code"), str):
        raise SchemaError(source, index, field_name, f"expected arguments with a string 'code', got {value!r:.80}")
    return {"code": value["code"]}


def _check_tools(tools: Any, source: str, index: int) -> None:
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError as exc:
            raise SchemaError(source, index, "tools", f"not valid JSON: {exc}") from None
    if isinstance(tools, dict):
        tools = [tools]
    names = {t.get("function", {}).get("name") for t in tools or [] if isinstance(t, dict)}
    if TOOL_NAME not in names:
        raise SchemaError(source, index, "tools", f"no {TOOL_NAME!r} tool among {sorted(map(str, names))}")


def convert_multiturn(row: dict[str, Any], source: str, index: int, keep_prompt: bool = False) -> dict[str, Any]:
    """A ``swordfaith/ReTool-SFT-multi-turn`` row, normalised to the same schema as :func:`convert_raw`."""
    _check_tools(row.get("tools"), source, index)
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SchemaError(source, index, "messages", "expected a non-empty list")
    out: list[dict[str, Any]] = []
    pending_calls = 0
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("content"), str | None):
            raise SchemaError(source, index, where, "expected a message with string content")
        role, content = message.get("role"), message.get("content") or ""
        if role == "system":
            out.append({"role": "system", "content": content})
        elif role == "user":
            out.append(_user_message(content, keep_prompt))
        elif role == "assistant":
            if pending_calls:
                raise SchemaError(source, index, where, "assistant turn where a tool turn was expected")
            calls = message.get("tool_calls") or []
            if not calls:
                out.append({"role": "assistant", "content": content})
                continue
            normalised = []
            for j, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or function.get("name") != TOOL_NAME:
                    raise SchemaError(source, index, f"{where}.tool_calls[{j}]", f"expected a {TOOL_NAME} call")
                args = _arguments(function.get("arguments"), source, index, f"{where}.tool_calls[{j}].arguments")
                normalised.append(_tool_call(args["code"]))
            out.append({"role": "assistant", "content": content, "tool_calls": normalised})
            pending_calls = len(normalised)
        elif role == "tool":
            if not pending_calls:
                raise SchemaError(source, index, where, "tool turn without a preceding tool call")
            out.append({"role": "tool", "content": content})
            pending_calls -= 1
        else:
            raise SchemaError(source, index, f"{where}.role", f"unknown role {role!r}")
    if pending_calls:
        raise SchemaError(source, index, "messages", "conversation ends with an unanswered tool call")
    if out[-1]["role"] != "assistant" or not any(m["role"] == "user" for m in out):
        raise SchemaError(source, index, "messages", "expected a user turn and a final assistant turn")
    return {"messages": out, "tools": [TOOL_SCHEMA], "data_source": "retool_sft"}


def to_sft_row(row: dict[str, Any], fmt: str, source: str, index: int, keep_prompt: bool = False) -> dict[str, Any]:
    if fmt == "retool_sft_raw":
        return convert_raw(row, source, index, keep_prompt)
    if fmt == "sft_multiturn":
        return convert_multiturn(row, source, index, keep_prompt)
    raise ValueError(f"{fmt!r} is not an SFT source format")
