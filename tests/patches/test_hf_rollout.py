"""Patch: a sync ``hf`` rollout backend (``rollout.name=hf rollout.mode=sync``) that works with 0.6.1's workers.

Unpatched 0.6.1 has no ("hf", "sync") registry entry ("Rollout hf with mode sync not found"), and its HFRollout
cannot be built by the FSDP worker (stale constructor, abstract methods missing). The check builds the rollout the
way the worker does (``get_rollout_class(name, mode)(config=, model_config=, device_mesh=)``), pushes new weights
through ``update_weights`` and generates a left-padded batch with ``generate_sequences``; ``rollout.dtype`` sets
the compute dtype of generate (fp32 for CPUs without fast bf16 GEMMs; bf16 by default), not a constant.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kit_testing import tiny_model_dir


def _new_weights(model_dir: Path) -> dict:
    """Weights different from the checkpoint's, with a sharpened lm_head so greedy decoding has clear winners."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), torch_dtype=torch.float32)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] *= 50
    return state


def check_hf_rollout_sync() -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from verl import DataProto
    from verl.utils.torch_functional import get_response_mask
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import get_rollout_class

    model_dir = tiny_model_dir()
    prompt_len, resp_len = 8, 6
    config = RolloutConfig(
        name="hf", mode="sync", tensor_model_parallel_size=1, prompt_length=prompt_len, response_length=resp_len
    )
    model_config = HFModelConfig(path=str(model_dir), override_config={"attn_implementation": "sdpa"})
    rollout = get_rollout_class("hf", "sync")(config=config, model_config=model_config, device_mesh=None)

    # update_weights: what rollout_mode() passes, a generator of full (name, tensor) pairs
    weights = _new_weights(model_dir)
    try:
        asyncio.run(rollout.update_weights(iter([*weights.items(), ("bogus.weight", torch.zeros(1))])))
    except RuntimeError as e:
        assert "bogus.weight" in str(e), e
    else:
        raise AssertionError("update_weights accepted an unknown tensor")
    asyncio.run(rollout.update_weights(iter(weights.items())))
    for name, tensor in rollout.module.state_dict().items():
        assert torch.equal(tensor, weights[name]), name

    # a left-padded batch, as the trainer sends it
    tokenizer = model_config.tokenizer
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    prompts = [[9707, 11, 1879], [3838, 374, 220, 17, 488, 220, 18, 30]]
    input_ids = torch.tensor([[pad] * (prompt_len - len(p)) + p for p in prompts])
    attention_mask = torch.arange(prompt_len)[None, :] >= torch.tensor([prompt_len - len(p) for p in prompts])[:, None]
    attention_mask = attention_mask.long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
        meta_info={"eos_token_id": eos, "pad_token_id": pad, "do_sample": False},
    )
    out = rollout.generate_sequences(batch).batch

    assert out["prompts"].tolist() == input_ids.tolist()
    responses = out["responses"]
    assert responses.shape == (2, resp_len), responses.shape
    assert out["input_ids"].tolist() == torch.cat([input_ids, responses], dim=-1).tolist()
    assert out["attention_mask"][:, prompt_len:].tolist() == get_response_mask(responses, eos).tolist()
    expected_pos = position_ids[:, -1:] + torch.arange(1, resp_len + 1)[None, :]
    assert out["position_ids"][:, prompt_len:].tolist() == expected_pos.tolist()

    # greedy output of the padded batch == plain transformers on each unpadded prompt with the new weights
    reference = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa")
    reference.load_state_dict(weights)
    for i, prompt in enumerate(prompts):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            ref = reference.generate(
                torch.tensor([prompt]), max_new_tokens=resp_len, do_sample=False, eos_token_id=eos, pad_token_id=pad
            )[0, len(prompt) :].tolist()
        got = responses[i, : len(ref)].tolist()
        assert got == ref, (i, got, ref)

    # the compute dtype of generate follows rollout.dtype (what vLLM reads for its engine dtype)
    assert config.dtype == "bfloat16"  # verl's default, unchanged
    for dtype, expected in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        typed = RolloutConfig(
            name="hf",
            mode="sync",
            tensor_model_parallel_size=1,
            prompt_length=prompt_len,
            response_length=resp_len,
            dtype=dtype,
        )
        other = get_rollout_class("hf", "sync")(config=typed, model_config=model_config, device_mesh=None)
        seen: set = set()
        other.module.lm_head.register_forward_hook(lambda _m, _i, out, seen=seen: seen.add(out.dtype))
        other.generate_sequences(batch)
        assert seen == {expected}, f"rollout.dtype={dtype}: generate computed the logits in {seen}"


def test_patched() -> None:
    check_hf_rollout_sync()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_hf_rollout_sync", match="Rollout hf with mode sync not found")
