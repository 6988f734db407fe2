"""Patch 0001: the reward loop forwards the agent loop's num_turns (and tool fields) to compute_score.

Without it, every tool-aware reward (ReTool's counts tool rounds as ``(num_turns - 2) // 2``) gets no
``extra_info["num_turns"]`` when verl 0.6.1 scores rollouts inside the async agent loop.
"""

from __future__ import annotations

import asyncio

import numpy as np
import torch
from omegaconf import OmegaConf


class _CharTokenizer:
    """Decodes ids as characters: enough for run_single, which only decodes the response."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids)


def _one_row(response: str, num_turns: int, extra_info: dict | None):
    from verl import DataProto

    ids = torch.tensor([[ord(c) for c in response]])
    prompt = torch.tensor([[ord("q")]])
    batch = {
        "prompts": prompt,
        "responses": ids,
        "attention_mask": torch.ones(1, prompt.shape[1] + ids.shape[1], dtype=torch.long),
    }
    non_tensor = {
        "data_source": np.array(["math"], dtype=object),
        "reward_model": np.array([{"ground_truth": "42"}], dtype=object),
        "extra_info": np.array([extra_info], dtype=object),
        "__num_turns__": np.array([num_turns], dtype=object),
        "tool_extra_fields": np.array([{"tool_rewards": [0.5]}], dtype=object),
    }
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor)


def check_num_turns_reaches_compute_score() -> None:
    from verl.experimental.reward.reward_loop import DAPORewardLoopManager, NaiveRewardLoopManager

    seen: list[dict] = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        seen.append({"solution": solution_str, "extra_info": dict(extra_info)})
        return {"score": float(solution_str.endswith(ground_truth)), "tool_rounds": (extra_info["num_turns"] - 2) // 2}

    config = OmegaConf.create({"reward_model": {"reward_kwargs": {}}})

    async def run(manager_cls, extra_info):
        manager = manager_cls(config=config, tokenizer=_CharTokenizer(), compute_score=compute_score)
        data = _one_row("the answer is 42", num_turns=6, extra_info=extra_info)
        result = await manager.run_single(data)
        return result, data

    for manager_cls in (NaiveRewardLoopManager, DAPORewardLoopManager):
        original = {"index": 7}
        result, data = asyncio.run(run(manager_cls, original))
        assert result["reward_score"] == 1.0, (manager_cls.__name__, result)
        assert result["reward_extra_info"]["tool_rounds"] == 2, (manager_cls.__name__, result)
        info = seen[-1]["extra_info"]
        assert info["num_turns"] == 6, (manager_cls.__name__, info)
        assert info["index"] == 7 and info["tool_rewards"] == [0.5], (manager_cls.__name__, info)
        # The dataset row's own dict is not mutated by scoring.
        assert original == {"index": 7}, (manager_cls.__name__, original)
        assert data.non_tensor_batch["extra_info"][0] == {"index": 7}

        # Rows whose extra_info is None (some datasets) still score.
        result, _ = asyncio.run(run(manager_cls, None))
        assert seen[-1]["extra_info"]["num_turns"] == 6


def test_patched() -> None:
    check_num_turns_reaches_compute_score()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_num_turns_reaches_compute_score", match="KeyError: 'num_turns'")
