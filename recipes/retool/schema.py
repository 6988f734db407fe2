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
