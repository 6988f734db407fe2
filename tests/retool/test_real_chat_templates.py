"""The published Qwen chat templates through what verl 0.6.1 and the kit do with them, offline.

The kit's smoke runs use its own Qwen2.5-style template (recipes/smoke/offline_tokenizer.py); a real run uses the
model's. Here the offline Qwen tokenizer gets each published template (tests/fixtures/templates, sha256-checked;
sources in its README) and goes through:

1. verl's system-prompt probe, ``ToolAgentLoop.init_class``'s ``apply_chat_template([{}], add_generation_prompt=False,
   tokenize=True)`` (verl 0.6.1 ``tool_agent_loop.py``:108). 0.6.1 does not catch an error there (upstream PR 4293,
   e36433ce5, later returns [] on a ``TemplateError``): a template that raises stops every rollout worker at start,
   which is loud, and returning [] instead would be silently wrong for a template with a default system prompt. So the
   kit keeps 0.6.1's behaviour and this test requires the probe to work - and to be exactly the prefix that
   ToolAgentLoop cuts off every tool and user turn it renders alone.
2. the kit's SFT rows (``retool-prepare sft`` on tests/fixtures/retool), rendered with their tools by verl's
   ``MultiTurnSFTDataset`` as the SFT trainer does: no error, the per-turn tokens are the whole conversation's, and
   every trained assistant tool-call turn is a hermes ``<tool_call>`` that verl's RL parser reads back as the row's
   call.
3. the tool turns and interaction turns of the patched ToolAgentLoop (tests/chat_turns.py, patch 0023's check): the
   rollout is the template's rendering of the same conversation.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from chat_turns import check_interaction_turns, check_tool_turns, published_template, tokenizer_with

from recipes.retool import prepare
from recipes.retool.schema import TOOL_NAME
from recipes.smoke.offline_tokenizer import CHAT_TEMPLATE as KIT_TEMPLATE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retool"

#: name -> fixture file of every published template under test (tests/fixtures/templates/README.md).
PUBLISHED = {"Qwen2.5-7B-Instruct": "qwen2_5_7b_instruct.jinja"}

#: The kit's SFT sources and the ``retool-prepare sft`` format each is read as.
SFT_SOURCES = ("retool_sft_multiturn.jsonl", "retool_sft_raw.jsonl")


@pytest.fixture(scope="module", params=sorted(PUBLISHED))
def published(request) -> tuple[str, Any]:
    """(name, the offline Qwen tokenizer with that published template)."""
    return request.param, tokenizer_with(published_template(PUBLISHED[request.param]))


@pytest.fixture(scope="module")
def sft_parquets(tmp_path_factory) -> dict[str, Path]:
    """The kit's SFT parquet of each fixture source, written by ``retool-prepare sft`` (what SFT trains on)."""
    out = {}
    for name in SFT_SOURCES:
        path = tmp_path_factory.mktemp("sft") / f"{Path(name).stem}.parquet"
        assert prepare.main(["sft", "--input", str(FIXTURES / name), "--output", str(path)]) == 0, name
        out[name] = path
    return out


def test_system_prompt_probe_is_the_prefix_of_every_turn_rendered_alone(published) -> None:
    name, tok = published
    try:
        probe = tok.apply_chat_template([{}], add_generation_prompt=False, tokenize=True)
    except Exception as exc:  # what ToolAgentLoop.init_class would die of in every rollout worker
        pytest.fail(f"[{name}] verl 0.6.1's system-prompt probe apply_chat_template([{{}}]) raises {exc!r}")
    for alone in ([{"role": "tool", "content": "42"}], [{"role": "user", "content": "Check it again."}]):
        ids = tok.apply_chat_template(alone, add_generation_prompt=True, tokenize=True)
        rest = tok.decode(ids[len(probe) :], skip_special_tokens=False)
        assert ids[: len(probe)] == probe and rest.startswith("<|im_start|>user\n"), (
            f"[{name}] a {alone[0]['role']} turn rendered alone does not start with the probe's "
            f"{tok.decode(probe, skip_special_tokens=False)!r}: cutting it off leaves {rest!r}"
        )


def _trained_spans(mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of 1s in a loss mask: one per assistant turn."""
    spans, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _calls(message: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def _check_sft_row(name: str, tok: Any, parser: Any, row: dict[str, Any], item: dict[str, Any]) -> None:
    """One dataset item against its row: the whole render, then each trained assistant turn's tool calls."""
    where = f"[{name}] SFT row {row['messages'][0]['content'][:40]!r}"
    full = tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True)
    ids = item["input_ids"][item["attention_mask"].bool()].tolist()
    assert ids == full, f"{where}: verl's per-turn SFT tokens are not the whole conversation's render"
    mask = item["loss_mask"][: len(ids)].tolist()
    assistants = [m for m in row["messages"] if m["role"] == "assistant"]
    spans = _trained_spans(mask)
    assert len(spans) == len(assistants), f"{where}: {len(spans)} trained spans for {len(assistants)} turns"
    for message, (start, end) in zip(assistants, spans, strict=True):
        text = tok.decode(ids[start:end], skip_special_tokens=False)
        _, parsed = asyncio.run(parser.extract_tool_calls(ids[start:end]))
        got = [(c.name, json.loads(c.arguments)) for c in parsed]
        assert got == _calls(message), f"{where}: the trained turn {text!r} parses as {got}, not {_calls(message)}"
        if message.get("tool_calls"):
            assert '<tool_call>\n{"name": "' + TOOL_NAME + '", "arguments": {"code": ' in text, (
                f"{where}: the tool call is not in hermes form with object arguments: {text!r}"
            )


@pytest.mark.parametrize("source", SFT_SOURCES)
def test_kit_sft_rows_render_with_tool_calls_in_hermes_form(published, sft_parquets, source) -> None:
    import pyarrow.parquet as pq
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    name, tok = published
    rows = pq.read_table(sft_parquets[source]).to_pylist()
    config = {"max_length": 4096, "truncation": "error", "multiturn": {"enable": True, "tools_key": "tools"}}
    try:
        dataset = MultiTurnSFTDataset(str(sft_parquets[source]), tok, config=config)
        items = [dataset[i] for i in range(len(dataset))]
    except Exception as exc:
        pytest.fail(f"[{name}] verl's MultiTurnSFTDataset cannot render the kit's SFT rows of {source}: {exc!r}")
    parser = ToolParser.get_tool_parser("hermes", tok)
    assert any(m.get("tool_calls") for row in rows for m in row["messages"]), f"{source}: no tool calls to check"
    for row, item in zip(rows, items, strict=True):
        _check_sft_row(name, tok, parser, row, item)


def test_tool_and_interaction_turns_match_the_template(published) -> None:
    name, tok = published
    check_tool_turns(name, tok)
    check_interaction_turns(f"{name}, interaction", tok)


def test_kit_template_renders_kit_rows_like_the_published_one(sft_parquets) -> None:
    """The smoke runs' template stands in for Qwen2.5's: on the kit's own rows it must render the same text."""
    import pyarrow.parquet as pq

    name = "Qwen2.5-7B-Instruct"
    kit, real = tokenizer_with(KIT_TEMPLATE), tokenizer_with(published_template(PUBLISHED[name]))
    assert kit.apply_chat_template([{}], tokenize=False) == real.apply_chat_template([{}], tokenize=False)
    for source, path in sft_parquets.items():
        for row in pq.read_table(path).to_pylist():
            for upto in range(1, len(row["messages"]) + 1):
                conversation, tools = row["messages"][:upto], row["tools"]
                mine = kit.apply_chat_template(conversation, tools=tools, tokenize=False)
                assert mine == real.apply_chat_template(conversation, tools=tools, tokenize=False), (
                    f"the kit's template and {name}'s render {source}'s row differently after {upto} messages"
                )
