"""Patch 0023: ToolAgentLoop restores the chat template's turn separator after the assistant's close token.

verl 0.6.1 builds a multi-turn rollout incrementally: the assistant's tokens end at ``<|im_end|>`` (generation
stops at the eos), and the next tool turn is rendered alone and cut after ``len(system_prompt)`` tokens
(``tool_agent_loop.py``, ``_handle_processing_tools_state``), so it starts at ``<|im_start|>user``. The template -
and every SFT row, verl's ``MultiTurnSFTDataset`` renders whole conversations - has ``<|im_end|>\\n<|im_start|>``:
the rollout loses the ``\\n`` at every assistant->tool boundary (and, on the interaction path, at every
assistant->user boundary), so RL trains on token sequences SFT never showed. Upstream verl PR 6921 (6874ecd52).

The check runs the real ToolAgentLoop (``init_class`` with a tool config, ``run``) with a stand-in server that
returns fixed assistant tokens (a hermes ``<tool_call>`` ending in ``<|im_end|>``, then the answer) and compares
each prompt the server gets, and the whole rollout, with ``apply_chat_template`` of the same messages
(tests/chat_turns.py): for the kit's Qwen2.5-style template (default system prompt), the published
Qwen2.5-7B-Instruct template, a template with no system prompt at all, and one whose ``apply_chat_template_kwargs``
(``enable_thinking=False``) change the rendering (the patch renders the tool turn with the kwargs ``system_prompt``
was rendered with). The separator must be context: response_mask 0.
"""

from __future__ import annotations

from chat_turns import (
    NO_SYSTEM_TEMPLATE,
    check_interaction_turns,
    check_tool_turns,
    published_template,
    tokenizer_with,
)

CASES = (
    ("kit Qwen2.5-style (default system prompt)", None, {}),
    ("Qwen2.5-7B-Instruct (published)", "qwen2_5_7b_instruct.jinja", {}),
    ("no system prompt", NO_SYSTEM_TEMPLATE, {}),
    ("no system prompt, enable_thinking=False", NO_SYSTEM_TEMPLATE, {"enable_thinking": False}),
)


def check_tool_turn_separator() -> None:
    for name, template, chat_kwargs in CASES:
        if template is not None and template.endswith(".jinja"):
            template = published_template(template)
        tok = tokenizer_with(template)
        rollout = check_tool_turns(name, tok, chat_kwargs)
        out = rollout.output
        first_close = out.response_ids.index(tok.eos_token_id)
        separator = tok.decode(out.response_ids[first_close + 1 : first_close + 2])
        assert separator == "\n" and out.response_mask[first_close + 1] == 0, (name, separator)
    check_interaction_turns("kit Qwen2.5-style, interaction", tokenizer_with(None))


def test_patched() -> None:
    check_tool_turn_separator()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_tool_turn_separator",
        # the separator missing after the tool call's close token, where the template (and SFT) has it
        match="<|im_end|>' the rollout has '<|im_start|>user\\n' where the template has '\\n<|im_start|>user'",
    )
