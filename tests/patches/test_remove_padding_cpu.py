"""Patch: ``verl.utils.attention_utils`` falls back to the pure-torch pad/unpad helpers on CPU.

Unpatched 0.6.1 picks flash_attn on CUDA and ``verl.utils.npu_utils`` on NPU and nothing otherwise, so
``use_remove_padding=True`` on CPU fails with "cannot access local variable 'index_first_axis'". The check runs the
actor's log-prob computation (``DataParallelPPOActor.compute_log_prob``) with remove-padding on a tiny Qwen3 (sdpa)
and compares it with the padded computation.
"""

from __future__ import annotations

from pathlib import Path

from kit_testing import gloo_world_of_one, tiny_model_dir


def _actor_config(use_remove_padding: bool):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.utils.config import omega_conf_to_dataclass

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        config = compose(
            "ppo_trainer",
            overrides=[
                "actor_rollout_ref.actor.strategy=fsdp2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.actor.use_torch_compile=False",
                f"actor_rollout_ref.actor.use_remove_padding={use_remove_padding}",
            ],
        )
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor)


def check_remove_padding_on_cpu() -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from verl import DataProto
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.attention_utils import index_first_axis, pad_input, rearrange, unpad_input
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    # the helpers themselves: unpad -> pad round trip of a left-padded batch
    hidden = torch.randn(2, 5, 3)
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    packed, indices, cu_seqlens, max_seqlen, _ = unpad_input(hidden, mask)
    assert packed.shape == (6, 3) and cu_seqlens.tolist() == [0, 4, 6] and max_seqlen == 4
    assert torch.equal(pad_input(packed, indices, 2, 5), hidden * mask[..., None])
    assert torch.equal(index_first_axis(rearrange(hidden, "b s d -> (b s) d"), indices), packed)

    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir(), torch_dtype=torch.float32, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    prompt_len, resp_len = 6, 5
    input_ids = torch.randint(0, 1000, (3, prompt_len + resp_len))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0  # left-padded prompt
    attention_mask[2, -2:] = 0  # right-padded (short) response
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    data = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, prompt_len:],
        },
        meta_info={"micro_batch_size": 2, "temperature": 1.0, "use_dynamic_bsz": False},
    )
    results = {}
    with gloo_world_of_one():
        for rmpad in (False, True):
            apply_monkey_patch(model=model, use_remove_padding=rmpad, ulysses_sp_size=1)
            actor = DataParallelPPOActor(config=_actor_config(rmpad), actor_module=model)
            assert actor.use_remove_padding is rmpad
            results[rmpad] = actor.compute_log_prob(data, calculate_entropy=True)
    (lp_pad, ent_pad), (lp_rmpad, ent_rmpad) = results[False], results[True]
    valid = attention_mask[:, prompt_len:].bool()
    assert torch.allclose(lp_rmpad[valid], lp_pad[valid], atol=2e-2), (lp_rmpad, lp_pad)
    assert torch.allclose(ent_rmpad[valid], ent_pad[valid], atol=2e-2), (ent_rmpad, ent_pad)


def test_patched() -> None:
    check_remove_padding_on_cpu()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_remove_padding_on_cpu", match="cannot access local variable 'index_first_axis'"
    )
