"""verl's ``ToolAgentLoop`` with a witness of its loss mask: how many tool-output tokens it hands the trainer as the
model's own.

Why: a loss mask that covers the code tool's output trains the policy on text the sandbox wrote. Accuracy alone
barely notices (the learning check judged that sabotage "did NOT learn" by 0.03: issue 51), so the kit counts it
where the mask is made. verl's ``ToolAgentLoop`` appends each tool turn to ``response_mask`` with 0
(``_handle_processing_tools_state``: verl 0.6.1 tool_agent_loop.py:415, 0.9.1 :386-397 through the Continuous
Token merge, ``align_response_metadata`` giving context tokens 0). This subclass records the span of
``response_mask`` each tool turn appended and, once the loop has finished, counts the tokens of those spans whose
mask is 1 in the final (truncated) mask: 0 as shipped. A patch of the base class's method (the sabotage
``KIT_TEST_LOSS_MASK=tool-tokens``, recipes/smoke/sabotage/hooks.py) runs inside ``super()``, so the count sees it.

Behaviour is otherwise verl's own: the states, the tokens and the mask are untouched; the counts go into
``AgentLoopOutput.extra_fields`` under :data:`~recipes.retool.schema.LOSS_MASK_FIELD`, which verl's reward loop
merges into the reward's ``extra_info`` (0.6.1 experimental/reward/reward_loop/naive.py:46-48, 0.9.1
experimental/reward_loop/reward_manager/naive.py:48-50); the kit's reward returns them, verl logs them per step as
``reward_extra/<count>/mean`` and :mod:`recipes.smoke.mask_witness` judges them.

Registered under verl's own name for the tool loop, ``tool_agent`` (every RL row names it), by ``agent_loop.yaml``
beside this file through ``actor_rollout_ref.rollout.agent.agent_loop_config_path``, which the launcher sets: verl's
AgentLoopWorker loads that list after its own registrations and replaces the entry of the same name (0.6.1
agent_loop.py:284-289, 0.9.1 :534-539). The same class serves both stacks: the methods overridden here have the
same names and arguments on both, and ``run`` passes on whatever it is given (0.9.1 adds ``priority``).

The span is ``[length before, length after)`` of the tool turn: on a chat template whose Continuous Token builder
trims prefix tokens before a tool turn (0.9.1's GLM, Gemma 4, DeepSeek builders), the trimmed-and-replaced tokens
just before the span are not counted; the kit's Qwen and SmolLM2 templates trim none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from recipes.retool.schema import LOSS_MASK_FIELD, LOSS_MASK_KEYS


def mask_counts(response_mask: Sequence[int], tool_spans: Sequence[tuple[int, int]]) -> dict[str, int]:
    """The counts of :data:`~recipes.retool.schema.LOSS_MASK_KEYS` for one response: tool-turn tokens within the
    final mask (spans past a truncation are cut), those of them with mask 1, and every mask-1 token."""
    end = len(response_mask)
    tool = [response_mask[i] for start, stop in tool_spans for i in range(min(start, end), min(stop, end))]
    values = (len(tool), sum(1 for m in tool if m), sum(1 for m in response_mask if m))
    return dict(zip(LOSS_MASK_KEYS, values, strict=True))


class KitToolAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, counting the tool-output tokens its loss mask trains on (one instance per sample:
    verl instantiates the registered class for every trajectory)."""

    async def run(self, sampling_params: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._kit_tool_spans: list[tuple[int, int]] = []
        output = await super().run(sampling_params, *args, **kwargs)
        output.extra_fields[LOSS_MASK_FIELD] = mask_counts(output.response_mask, self._kit_tool_spans)
        return output

    async def _handle_processing_tools_state(self, agent_data: Any) -> Any:
        before = len(agent_data.response_mask)
        state = await super()._handle_processing_tools_state(agent_data)
        after = len(agent_data.response_mask)
        if after > before:  # the turn was appended (a turn past the response length ends the loop unappended)
            self.__dict__.setdefault("_kit_tool_spans", []).append((before, after))
        return state
