"""Patch: the ``hf`` rollout serves the async agent loop (``rollout.mode=async``), with the worker as the server.

Unpatched 0.6.1 registers only vllm and sglang replicas ("Unknown rollout mode: hf"). The check wires an ``hf``
replica to a (fake) fused worker group the way ``AgentLoopManager`` does, and calls the async token-in/token-out
``HFRollout.generate`` that the worker's ``generate`` forwards to: tokens plus log-probs that match a teacher-forced
forward pass, ``max_new_tokens`` bounded by ``max_model_len``, concurrent requests served one at a time.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kit_testing import tiny_model_dir


class _FakeWorker:
    """Stands in for a fused AsyncActorRolloutRefWorker actor handle: records wake_up/sleep calls."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, []
        self.wake_up = SimpleNamespace(remote=lambda: self._call("wake_up"))
        self.sleep = SimpleNamespace(remote=lambda: self._call("sleep"))

    async def _call(self, what: str) -> bool:
        self.calls.append(what)
        return True


def check_hf_replica_and_async_generate() -> None:
    import torch
    from omegaconf import OmegaConf
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import TokenOutput, get_rollout_replica_class

    model_dir = tiny_model_dir()
    config = RolloutConfig(
        name="hf", mode="async", tensor_model_parallel_size=1, prompt_length=16, response_length=5, max_model_len=24
    )

    # the replica: AgentLoopManager makes world_size // (tp*dp*pp) of them and calls init_hybrid(worker_group)
    replica_cls = get_rollout_replica_class("hf")
    workers = [_FakeWorker("rank0"), _FakeWorker("rank1")]
    replica = replica_cls(
        replica_rank=1, config=config, model_config=OmegaConf.create({"path": str(model_dir)}), gpus_per_node=2
    )
    asyncio.run(replica.init_hybrid(SimpleNamespace(workers=workers)))
    assert replica.server_handle is workers[1] and replica.servers == [workers[1]]
    asyncio.run(replica.wake_up())
    asyncio.run(replica.sleep())
    assert workers[1].calls == ["wake_up", "sleep"] and workers[0].calls == []

    # what the worker's generate() forwards to
    model_config = HFModelConfig(path=str(model_dir), override_config={"attn_implementation": "sdpa"})
    rollout = get_rollout_class("hf", "async")(config=config, model_config=model_config, device_mesh=None)
    sampling = {"temperature": 0.7, "top_p": 1.0, "repetition_penalty": 1.0, "logprobs": True}
    prompt = [9707, 11, 1879, 0, 3838, 374, 220, 17]

    async def two_requests():
        return await asyncio.gather(
            rollout.generate(prompt_ids=prompt, sampling_params=dict(sampling), request_id="a"),
            rollout.generate(prompt_ids=prompt[:3], sampling_params=dict(sampling), request_id="b"),
        )

    torch.manual_seed(0)
    outputs = asyncio.run(two_requests())
    for ids, out in zip([prompt, prompt[:3]], outputs, strict=True):
        assert isinstance(out, TokenOutput), type(out)
        assert 1 <= len(out.token_ids) <= config.response_length, out
        assert len(out.log_probs) == len(out.token_ids), out
        # log-probs of the sampled tokens under the temperature-scaled distribution, as the trainer computes them
        full = torch.tensor([ids + out.token_ids])
        with torch.no_grad():
            logits = rollout.module(input_ids=full).logits[0, len(ids) - 1 : -1].float()
        expected = torch.log_softmax(logits / sampling["temperature"], dim=-1)
        expected = expected.gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=2e-2), (out.log_probs, expected)

    # max_new_tokens is bounded by max_model_len - len(prompt)
    long_prompt = (prompt * 3)[:22]
    out = asyncio.run(rollout.generate(prompt_ids=long_prompt, sampling_params={"logprobs": False}, request_id="c"))
    assert 1 <= len(out.token_ids) <= 2 and out.log_probs is None, out


def test_patched() -> None:
    check_hf_replica_and_async_generate()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_hf_replica_and_async_generate", match="Unknown rollout mode: hf")
