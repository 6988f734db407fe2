"""The kit's agent loop (recipes/retool/agent_loop.py) on verl 0.6.1's real ToolAgentLoop, driven by a scripted
server (tests/chat_turns.py): it counts the tool-output tokens the loss mask trains on (0 as shipped, all of them under
the learning check's loss-mask sabotage), changes nothing else, and is what the recipes register as ``tool_agent``.
0.9.1's loop: tests/stack091/test_agent_loop_091.py.

What would fail: a count that misses the sabotage (it patches the base class; the kit's subclass must reach it through
``super()``), a subclass that changes the rollout, a registration verl no longer reads or a recipe without it.
"""

from __future__ import annotations

import pytest
from agent_loop_witness import check_registration, counts, sabotaged
from chat_turns import FINAL, generated_ids, run_tool_agent_loop, tokenizer_with
from kit_testing import installed_verl

from recipes.retool.agent_loop import KitToolAgentLoop, mask_counts

pytestmark = pytest.mark.skipif(
    not (installed_verl() or "").startswith("0.6."), reason="verl 0.6.1's loop (0.9.1's: tests/stack091)"
)

CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'


def test_mask_counts_over_spans_cut_at_the_truncated_mask() -> None:
    mask = [1, 1, 0, 0, 0, 1, 1, 0]
    assert mask_counts(mask, [(2, 5), (7, 9)]) == {"tool_tokens": 4, "tool_tokens_trained": 0, "trained_tokens": 4}
    assert mask_counts([1, 1, 1, 1], [(1, 3), (6, 8)]) == {
        "tool_tokens": 2,
        "tool_tokens_trained": 2,
        "trained_tokens": 4,
    }
    assert mask_counts([1, 1], []) == {"tool_tokens": 0, "tool_tokens_trained": 0, "trained_tokens": 2}


def test_the_kit_loop_counts_no_trained_tool_token_and_changes_nothing() -> None:
    tok = tokenizer_with(None)
    verl_run = run_tool_agent_loop(tok, [CALL, FINAL]).output
    kit_run = run_tool_agent_loop(tok, [CALL, FINAL], base=KitToolAgentLoop).output
    for field in ("prompt_ids", "response_ids", "response_mask", "num_turns"):
        assert getattr(kit_run, field) == getattr(verl_run, field), field
    generated = len(generated_ids(tok, CALL)) + len(generated_ids(tok, FINAL))
    tool = len(kit_run.response_ids) - generated  # the separator and the tool turn between the two assistant turns
    assert tool > 0
    assert counts(kit_run) == {"tool_tokens": tool, "tool_tokens_trained": 0, "trained_tokens": generated}


def test_the_loss_mask_sabotage_is_counted_through_super() -> None:
    tok = tokenizer_with(None)
    with sabotaged():
        out = run_tool_agent_loop(tok, [CALL, FINAL], base=KitToolAgentLoop).output
    generated = len(generated_ids(tok, CALL)) + len(generated_ids(tok, FINAL))
    tool = len(out.response_ids) - generated
    assert counts(out) == {"tool_tokens": tool, "tool_tokens_trained": tool, "trained_tokens": tool + generated}
    clean = run_tool_agent_loop(tok, [CALL, FINAL], base=KitToolAgentLoop).output  # undone after the block
    assert counts(clean)["tool_tokens_trained"] == 0


def test_without_a_tool_call_there_is_nothing_to_count() -> None:
    out = run_tool_agent_loop(tokenizer_with(None), [FINAL], base=KitToolAgentLoop).output
    assert counts(out) == {"tool_tokens": 0, "tool_tokens_trained": 0, "trained_tokens": len(out.response_ids)}


def test_the_kit_file_registers_tool_agent_over_verls() -> None:
    check_registration()
