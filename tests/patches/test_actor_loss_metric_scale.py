"""Patch: the actor's logged ``actor/pg_loss`` and ``actor/kl_loss`` do not scale with the micro-batch count (PR 4711).

Unpatched 0.6.1 ``DataParallelPPOActor.update_policy`` logs each micro-batch's loss already multiplied by its share of
the mini-batch (``loss_scale_factor``: ``1 / gradient_accumulation``, or its sample fraction with dynamic batch
sizes), and the trainer then averages those values (``reduce_metrics``: np.mean). The logged loss is the mini-batch
loss divided by the number of micro-batches: with ``use_dynamic_bsz`` (every ReTool recipe) that number follows the
batch's token count, so the pg and kl curves move when only the batch composition moves.

The check runs the real ``update_policy`` on the tiny Qwen3 (CPU, fp32) with one batch of 4 samples, split into 4
micro-batches and into 1, from the same weights, and compares the logged losses, which must agree.
"""

from __future__ import annotations

import copy

BATCH, PROMPT, RESPONSE = 4, 6, 5


def _batch():  # -> DataProto with what update_policy reads; fixed numbers, full masks
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(0)
    length = PROMPT + RESPONSE
    input_ids = torch.randint(100, 5000, (BATCH, length), generator=gen)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": torch.ones(BATCH, length, dtype=torch.long),
        "position_ids": torch.arange(length).expand(BATCH, length).clone(),
        "responses": input_ids[:, PROMPT:],
        "response_mask": torch.ones(BATCH, RESPONSE, dtype=torch.long),
        "old_log_probs": torch.zeros(BATCH, RESPONSE),
        "ref_log_prob": -torch.rand(BATCH, RESPONSE, generator=gen),
        "advantages": torch.randn(BATCH, RESPONSE, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _logged_losses(model, micro_batch_size: int) -> dict[str, float]:
    import numpy as np
    import torch
    from kit_testing import ppo_config, tiny_model_dir
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    config = ppo_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir()}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch_size}",
            "actor_rollout_ref.actor.use_dynamic_bsz=False",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.actor.kl_loss_coef=0.1",
            "actor_rollout_ref.actor.kl_loss_type=kl",  # k1, unclamped: the tiny model is far from any reference
            "actor_rollout_ref.actor.use_torch_compile=False",
            "actor_rollout_ref.actor.fsdp_config.dtype=float32",
        ]
    )
    actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    module = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config, module, torch.optim.SGD(module.parameters(), lr=0.0))
    metrics = actor.update_policy(_batch())
    return {key: float(np.mean(metrics[key])) for key in ("actor/pg_loss", "actor/kl_loss")}


def check_logged_loss_ignores_micro_batch_count() -> None:
    import torch
    from kit_testing import gloo_world_of_one, tiny_model_dir
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    with gloo_world_of_one():  # update_policy asks torch.distributed for its rank
        split = _logged_losses(model, micro_batch_size=1)  # 4 micro-batches
        whole = _logged_losses(model, micro_batch_size=BATCH)  # 1 micro-batch
    print(f"logged losses, 4 micro-batches: {split}; 1 micro-batch: {whole}")
    for key in whole:
        assert abs(split[key] - whole[key]) <= 1e-5 * max(1.0, abs(whole[key])), (
            f"{key} logged {split[key]:.6g} with 4 micro-batches and {whole[key]:.6g} with 1, for the same batch and "
            f"weights (ratio {split[key] / whole[key]:.3g})"
        )


def test_patched() -> None:
    check_logged_loss_ignores_micro_batch_count()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_logged_loss_ignores_micro_batch_count", match="(ratio 0.25)")
