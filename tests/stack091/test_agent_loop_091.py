"""The kit's agent loop (recipes/retool/agent_loop.py) on verl 0.9.1's real ToolAgentLoop (Continuous Token merges),
driven by a scripted server: it counts the tool-output tokens the loss mask trains on (0 as shipped, all of them under
the learning check's loss-mask sabotage), changes nothing else, and the recipes register it as ``tool_agent`` on this
stack's configs too. 0.6.1's loop: tests/retool/test_agent_loop.py.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from agent_loop_witness import check_registration, counts, sabotaged
from chat_turns import FINAL, ScriptedServer, _base_tool, generated_ids, tokenizer_with
from kit_testing import needs_verl_09, tiny_model_dir

from recipes.retool.agent_loop import KitToolAgentLoop

pytestmark = needs_verl_09()

CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'


class TokenServer(ScriptedServer):
    """0.9.1's server answers with a TokenOutput: the ids plus preemption count, extra fields and routed experts."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        turn = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        return SimpleNamespace(**vars(turn), num_preempted=None, extra_fields={}, routed_experts=None)


def _run(base: type, texts: list[str]) -> Any:
    """``run`` of a fresh subclass of ``base`` as verl 0.9.1's worker builds it (agent_loop.py:683-693)."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = tokenizer_with(None)
    multi_turn = {"max_user_turns": 8, "max_assistant_turns": 8, "max_parallel_calls": 1, "format": "hermes"}
    multi_turn |= {"max_tool_response_length": 256, "tool_response_truncate_side": "middle"}
    rollout = {"prompt_length": 2048, "response_length": 2048, "full_determinism": False, "multi_turn": multi_turn}
    config = OmegaConf.create({"data": {"apply_chat_template_kwargs": {}}, "actor_rollout_ref": {"rollout": rollout}})
    model_type = json.loads((tiny_model_dir() / "config.json").read_text())["model_type"]
    server = TokenServer([generated_ids(tok, text) for text in texts])

    async def go() -> Any:
        loop = type("ScriptedToolAgentLoop", (base,), {})(
            trainer_config=DictConfigWrap(config),
            server_manager=server,
            tokenizer=tok,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            hf_model_type=model_type,
            tools=ToolListWrap([_base_tool()({})]),
        )
        return await loop.run({"temperature": 1.0}, raw_prompt=[{"role": "user", "content": "What is 6 * 7?"}])

    return tok, asyncio.run(go())


def test_the_kit_loop_counts_no_trained_tool_token_and_changes_nothing() -> None:
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    _, verl_run = _run(ToolAgentLoop, [CALL, FINAL])
    tok, kit_run = _run(KitToolAgentLoop, [CALL, FINAL])
    for field in ("prompt_ids", "response_ids", "response_mask", "num_turns"):
        assert getattr(kit_run, field) == getattr(verl_run, field), field
    generated = len(generated_ids(tok, CALL)) + len(generated_ids(tok, FINAL))
    tool = len(kit_run.response_ids) - generated
    assert tool > 0 and sum(kit_run.response_mask) == generated
    assert counts(kit_run) == {"tool_tokens": tool, "tool_tokens_trained": 0, "trained_tokens": generated}


def test_the_loss_mask_sabotage_is_counted_through_super() -> None:
    with sabotaged():
        tok, out = _run(KitToolAgentLoop, [CALL, FINAL])
    generated = len(generated_ids(tok, CALL)) + len(generated_ids(tok, FINAL))
    tool = len(out.response_ids) - generated
    assert counts(out) == {"tool_tokens": tool, "tool_tokens_trained": tool, "trained_tokens": tool + generated}
    assert counts(_run(KitToolAgentLoop, [CALL, FINAL])[1])["tool_tokens_trained"] == 0  # undone after the block


def test_the_kit_file_registers_tool_agent_over_verls() -> None:
    check_registration()
