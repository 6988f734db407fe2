"""verl 0.9.1 patches 0011 and 0012: what the reward returns reaches the step's metrics, and dapo scores with num_turns.

0011: the V1 trainer (``main_ppo`` on 0.9.1) keeps each sample's reward extras in the TransferQueue field
``extra_fields["reward_extra_info"]`` (agent_loop.py:1028, agent_loop_tq.py:175) and logs them only for validation
(``val-aux/...``); the training step's metrics (``PPOTrainer._compute_metrics``) carried none of them, so the ReTool
reward's ``tool_failures`` (tool calls a dead sandbox answered) were invisible while training. The reference series'
0022 fixed the same on 0.6.1 (tests/patches/test_reward_extra_step_metrics.py).

0012: the reward loop's ``dapo`` manager (verl/experimental/reward_loop/reward_manager/dapo.py, the one the agent
loop's reward workers load for ``reward.reward_manager.name=dapo``) handed compute_score the dataset's extra_info
without ``num_turns`` (the naive manager adds it, naive.py:52-55), so ReTool's tool-round shaping raised
``KeyError: 'num_turns'``. The reference series' 0001 fixed it on 0.6.1 (tests/patches/test_reward_loop_num_turns.py).

Each ``check_*`` runs here against the patched verl and, through ``unpatched_verl.expect_failure``, against unpatched
0.9.1, where it fails with the bug's own symptom.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kit_testing import needs_verl_09

pytestmark = needs_verl_09()

# ------------------------------------------------------------------------------ 0011 reward extras in step metrics


def _tq_samples() -> list[dict[str, Any]]:
    """Four samples as the agent loop puts them into TransferQueue (agent_loop_tq.py:193-203), reward extras in
    ``extra_fields``; the fourth is a padding copy of the first (padding_utils.py:169-175), which metrics skip."""
    import torch

    extras = [
        {"score": 1.0, "acc": True, "tool_failures": 0, "pred": "42"},
        {"score": 0.0, "acc": False, "tool_failures": 2, "pred": ""},
        {"score": 1.0, "acc": True, "tool_failures": 1, "pred": "7", "turn_scores": [0.5, 1.0]},
    ]
    samples = []
    for i, extra in enumerate([*extras, extras[0]]):
        response_len = 3 + i
        scores = torch.zeros(response_len)
        scores[-1] = extra["score"]
        samples.append(
            {
                "prompts": torch.arange(2 + i),
                "responses": torch.arange(response_len),
                "response_mask": torch.ones(response_len, dtype=torch.int64),
                "rm_scores": scores,
                "token_level_rewards": scores,
                "advantages": scores,
                "returns": scores,
                "num_turns": 2 + 2 * i,
                "extra_fields": {"min_global_steps": 0, "max_global_steps": 0, "reward_extra_info": extra},
            }
        )
    return samples


def check_step_metrics_carry_reward_extras() -> None:
    """Run the V1 trainer's ``_compute_metrics`` on a step read from a stand-in TransferQueue; the step's metrics must
    carry ``reward_extra/<key>/{mean,max,min}`` of the numeric extras of the real (non-padding) samples."""
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    stored = list_of_dict_to_tensordict(_tq_samples())

    class _StandInTQ:
        """tq.kv_batch_get over the samples above (the trainer's only TransferQueue call in _compute_metrics)."""

        @staticmethod
        def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
            assert partition_id == "train" and len(keys) == 4
            return stored.select(*[field for field in select_fields if field in stored.keys()])

    tags = [{"min_global_steps": 0, "max_global_steps": 0} for _ in range(3)] + [
        {"min_global_steps": 0, "max_global_steps": 0, "is_padding": True}
    ]
    batch = KVBatchMeta(keys=[f"uid{i}_0_0" for i in range(4)], tags=tags, partition_id="train")
    trainer = object.__new__(PPOTrainerSync)  # no Ray, no workers: only what _compute_metrics reads
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {}, "model": {"mtp": None}}})
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = None
    trainer._get_n_gpus_for_throughput = lambda: 1

    real_tq = trainer_base.tq
    trainer_base.tq = _StandInTQ
    try:
        metrics: dict[str, Any] = {"actor/entropy": 1.0}
        trainer._compute_metrics(batch, metrics, {"step": 1.0, "gen": 0.5}, global_steps=1, epoch=0)
    finally:
        trainer_base.tq = real_tq

    assert metrics["training/num_turns/max"] == 6  # the step's own metrics ran (the padding row's 8 left out)
    logged = sorted(key for key in metrics if key.startswith("reward_extra/"))
    assert logged, f"no reward_extra metrics in the training step: {sorted(metrics)}"
    assert metrics["reward_extra/tool_failures/mean"] == 1.0, metrics  # (0 + 2 + 1) / 3: padding not counted
    assert metrics["reward_extra/tool_failures/max"] == 2.0 and metrics["reward_extra/tool_failures/min"] == 0.0
    assert abs(metrics["reward_extra/acc/mean"] - 2 / 3) < 1e-9 and metrics["reward_extra/score/max"] == 1.0
    assert not any("pred" in key or "turn_scores" in key for key in logged), logged  # strings and lists skipped
    assert metrics["actor/entropy"] == 1.0


def check_reward_extra_metrics_helper() -> None:
    """The helper alone: samples without a key count as missing, not as 0; no extras, no metrics."""
    import numpy as np
    from verl.trainer.ppo.metric_utils import compute_reward_extra_metrics

    metrics = compute_reward_extra_metrics([{"a": np.int64(3), "b": "x"}, None, {"a": 1.0}, {"c": np.bool_(True)}])
    assert metrics == {
        "reward_extra/a/mean": 2.0,
        "reward_extra/a/max": 3.0,
        "reward_extra/a/min": 1.0,
        "reward_extra/c/mean": 1.0,
        "reward_extra/c/max": 1.0,
        "reward_extra/c/min": 1.0,
    }, metrics
    assert compute_reward_extra_metrics([{}, None]) == {}


def test_0011_step_metrics_carry_reward_extras() -> None:
    check_step_metrics_carry_reward_extras()
    check_reward_extra_metrics_helper()


def test_0011_unpatched_step_metrics_lack_reward_extras(unpatched_verl: Any) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_step_metrics_carry_reward_extras", match="no reward_extra metrics in the training step"
    )


# ------------------------------------------------------------------------------------- 0012 dapo forwards num_turns


class _CharTokenizer:
    """Decodes ids as characters: enough for run_single, which only decodes the response."""

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids)


def _group(response: str, num_turns: list[int], extra_info: dict | None) -> Any:
    """One prompt's n samples as the reward worker gets them: the rows share one extra_info dict (np.repeat)."""
    import numpy as np
    import torch
    from verl import DataProto

    n = len(num_turns)
    ids = torch.tensor([[ord(c) for c in response]] * n)
    prompts = torch.full((n, 1), ord("q"))
    batch = {
        "prompts": prompts,
        "responses": ids,
        "attention_mask": torch.ones(n, prompts.shape[1] + ids.shape[1], dtype=torch.long),
    }
    non_tensor = {
        "data_source": np.array(["math"] * n, dtype=object),
        "reward_model": np.array([{"ground_truth": "42"}] * n, dtype=object),
        "extra_info": np.array([extra_info] * n, dtype=object),
        "__num_turns__": np.array(num_turns),
        "tool_extra_fields": np.array([{"tool_rewards": [0.5]}] * n, dtype=object),
        "reward_scores": np.array([{"tool": 0.5}] * n, dtype=object),
    }
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor)


def check_dapo_forwards_num_turns() -> None:
    """The dapo manager's compute_score sees each sample's own num_turns, the tool fields and the rollout reward
    scores, as the naive one's does; the rows' shared extra_info is left as the dataset gave it."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    seen: list[dict] = []

    def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict, **kwargs: Any) -> dict:
        seen.append(dict(extra_info))
        tool_rounds = (extra_info["num_turns"] - 2) // 2  # ReTool's shaping (recipes/retool reward)
        return {"score": float(solution_str.endswith(ground_truth)), "tool_rounds": tool_rounds}

    config = OmegaConf.create({"reward": {"reward_kwargs": {}}})

    async def run(extra_info: dict | None, num_turns: list[int]) -> list[dict]:
        manager = get_reward_manager_cls("dapo")(config=config, tokenizer=_CharTokenizer(), compute_score=compute_score)
        data = _group("the answer is 42", num_turns, extra_info)
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    shared = {"index": 7}
    results = asyncio.run(run(shared, [2, 4, 6, 8]))
    assert [r["reward_extra_info"]["tool_rounds"] for r in results] == [0, 1, 2, 3], results
    assert all(r["reward_score"] == 1.0 for r in results), results
    assert sorted(info["num_turns"] for info in seen) == [2, 4, 6, 8], seen
    assert all(info["tool_rewards"] == [0.5] and info["rollout_reward_scores"] == {"tool": 0.5} for info in seen)
    assert all(info["index"] == 7 for info in seen), seen
    assert shared == {"index": 7}, f"the rows' shared extra_info was written to: {shared}"

    asyncio.run(run(None, [6]))  # rows whose extra_info is None (some datasets) still score
    assert seen[-1]["num_turns"] == 6


def test_0012_dapo_forwards_num_turns() -> None:
    check_dapo_forwards_num_turns()


def test_0012_unpatched_dapo_drops_num_turns(unpatched_verl: Any) -> None:
    unpatched_verl.expect_failure(__file__, "check_dapo_forwards_num_turns", match="KeyError: 'num_turns'")
