"""Convert one source row to the kit's RL row schema (module-level functions: picklable for ``datasets.map``).

RL row (what ``retool-prepare rl|val`` writes and :class:`recipes.retool.dataset.ReToolRLDataset` reads)::

    data_source   str      grouping key of validation metrics (aime_2024, aime_2025, dapo_math_17k, ...)
    prompt        [{"role": "user", "content": <kit prompt around the bare problem>}]
    ability       "MATH"
    reward_model  {"style": "rule", "ground_truth": str}
    agent_name    "tool_agent"  (verl runs ToolAgentLoop for the row)
    extra_info    {"index": int, "split": str, "problem": str, "source_id": str}
"""

from __future__ import annotations

from typing import Any

from recipes.retool.prompts import build_prompt, strip_dapo_instructions
from recipes.retool.schema import ABILITY, AGENT_NAME
from recipes.retool.sources import SchemaError


def _text(row: dict[str, Any], key: str, source: str, index: int) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SchemaError(source, index, key, f"expected a non-empty string, got {value!r:.80}")
    return value


def answer_text(value: Any, source: str, index: int, field_name: str) -> str:
    """A ground truth as a string: ints as digits, integral floats without ``.0``, strings stripped."""
    if isinstance(value, bool) or value is None:
        raise SchemaError(source, index, field_name, f"expected an answer, got {value!r}")
    if isinstance(value, float):
        if value != value:  # NaN
            raise SchemaError(source, index, field_name, "answer is NaN")
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    if not text:
        raise SchemaError(source, index, field_name, "empty answer")
    return text


def _user_content(row: dict[str, Any], source: str, index: int) -> str:
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise SchemaError(source, index, "prompt", f"expected a non-empty list of messages, got {prompt!r:.80}")
    for message in prompt:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str) and content.strip():
                return content
            raise SchemaError(source, index, "prompt[].content", f"user message has no text: {content!r:.80}")
    raise SchemaError(source, index, "prompt", "no message with role 'user'")


def _ground_truth(row: dict[str, Any], source: str, index: int) -> str:
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise SchemaError(source, index, "reward_model.ground_truth", f"missing in {reward_model!r:.80}")
    return answer_text(reward_model["ground_truth"], source, index, "reward_model.ground_truth")


def problem_and_answer(row: dict[str, Any], fmt: str, source: str, index: int) -> tuple[str, str, str, bool]:
    """``(problem, ground_truth, source_id, instructions_stripped)`` of one row in source format ``fmt``."""
    if fmt == "dapo":
        problem, stripped = strip_dapo_instructions(_user_content(row, source, index))
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        return problem, _ground_truth(row, source, index), str(extra.get("index", "")), stripped
    if fmt == "aime_maxwell":
        answer = answer_text(row.get("Answer"), source, index, "Answer")
        return _text(row, "Problem", source, index).strip(), answer, str(row.get("ID", "")), True
    if fmt == "problem_answer":
        answer = answer_text(row.get("answer"), source, index, "answer")
        return _text(row, "problem", source, index).strip(), answer, str(row.get("id", "")), True
    raise ValueError(f"{fmt!r} is not a raw RL source format")


def to_rl_row(row: dict[str, Any], fmt: str, data_source: str, split: str, index: int, source: str) -> dict[str, Any]:
    """One RL row in the kit's schema from a row in source format ``fmt`` (``retool_rl`` rows are checked only)."""
    if fmt == "retool_rl":
        _user_content(row, source, index)
        _ground_truth(row, source, index)
        return row
    problem, answer, source_id, _ = problem_and_answer(row, fmt, source, index)
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": build_prompt(problem)}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "agent_name": AGENT_NAME,
        "extra_info": {"index": index, "split": split, "problem": problem, "source_id": source_id},
    }


def dedup_key(row: dict[str, Any]) -> str:
    """Rows whose user prompt is the same text (whitespace-normalised) are one problem."""
    content = row["prompt"][0]["content"]
    return " ".join(content.split())
