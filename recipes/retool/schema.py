"""Names and schemas shared by the tool, the data preparation and the dataset class (no verl import here).

The tool schema is the one verl's ReTool recipe and the ReTool-SFT data use (function ``code_interpreter`` with
one string argument ``code``), so SFT data, RL prompts and the running tool agree on the name the model calls.
"""

from __future__ import annotations

from typing import Any

TOOL_NAME = "code_interpreter"

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "A tool for executing code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to execute."}},
            "required": ["code"],
        },
    },
}

AGENT_NAME = "tool_agent"
"""verl's ToolAgentLoop registry name; every RL row names it so the rollout runs the multi-turn tool loop."""

ABILITY = "MATH"

RL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "agent_name", "extra_info")
"""Columns of the RL parquet that ``retool-prepare rl|val`` writes and :class:`ReToolRLDataset` reads."""

LOSS_MASK_FIELD = "kit_loss_mask"
"""The key the kit's agent loop (:mod:`recipes.retool.agent_loop`) puts its loss-mask counts under in verl's
``AgentLoopOutput.extra_fields``; verl's reward loop hands those fields to the reward's ``extra_info``."""

LOSS_MASK_KEYS = ("tool_tokens", "tool_tokens_trained", "trained_tokens")
"""The counts, per response: tokens the tool turns appended, how many of them the loss mask trains on (must be 0),
and every token it trains on. The reward returns them under these names (verl logs ``reward_extra/<name>/mean``)."""

NOT_MEASURED = -1
"""The reward's value of each count for a response that did not come through the kit's agent loop."""
