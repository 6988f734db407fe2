"""Patch: on CPU the FSDP2 reference model gets no CPUOffloadPolicy(pin_memory=True).

Unpatched 0.6.1 always offloads the ref model with pinned memory, which needs an accelerator: building it on CPU
dies with "Cannot access accelerator device when none is available". The check builds the ref policy through the
worker's own ``init_model`` (role="ref", fsdp2) and computes reference log-probs with it.
"""

from __future__ import annotations

from kit_testing import gloo_world_of_one, ppo_config, tiny_model_dir


def check_ref_model_on_cpu() -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from verl import DataProto
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    model = tiny_model_dir()
    config = ppo_config(
        [
            f"actor_rollout_ref.model.path={model}",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "actor_rollout_ref.ref.strategy=fsdp2",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
            "trainer.device=cpu",
        ]
    )
    with gloo_world_of_one():
        worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="ref")
        worker.init_model()
        params = list(worker.ref_module_fsdp.parameters())
        assert params and all(p.device.type == "cpu" for p in params)

        torch.manual_seed(0)
        prompt_len, resp_len = 6, 4
        input_ids = torch.randint(0, 1000, (2, prompt_len + resp_len))
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, :2] = 0  # left padding
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        data = DataProto.from_dict(
            tensors={
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "position_ids": position_ids,
                "responses": input_ids[:, prompt_len:],
            }
        )
        ref_log_prob = worker.compute_ref_log_prob(data).batch["ref_log_prob"]

    # the same numbers from plain transformers (bf16, like the ref model's weights and compute)
    hf = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    with torch.no_grad():
        logits = hf(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits.float()
    expected = torch.log_softmax(logits[:, prompt_len - 1 : -1], dim=-1)
    expected = expected.gather(-1, input_ids[:, prompt_len:, None]).squeeze(-1)
    assert ref_log_prob.shape == (2, resp_len), ref_log_prob.shape
    # ref log-probs come back in bf16: at about -12 their resolution is 0.0625
    assert torch.allclose(ref_log_prob.float(), expected, atol=0.1), (ref_log_prob, expected)


def test_patched() -> None:
    check_ref_model_on_cpu()


def test_unpatched_fails(unpatched_verl) -> None:
    # torch 2.13's message, and torch 2.8's (the venv's torch since vLLM's CPU build needs it)
    no_accelerator = ("Cannot access accelerator device when none is available", "CPU device type not an accelerator")
    unpatched_verl.expect_failure(__file__, "check_ref_model_on_cpu", match=no_accelerator)
