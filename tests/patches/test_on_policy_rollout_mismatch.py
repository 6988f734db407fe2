"""Patch 0031: the on-policy update logs the rollout/actor log-prob mismatch the skipped old log-prob pass logged.

The rollout/actor mismatch (``training/rollout_probs_diff_mean`` ...) is the run's direct witness that the rollout
received the update: ``RayPPOTrainer.fit`` computes it in the old log-prob pass when the rollout returned its
log-probs (ray_trainer.py, ``calculate_debug_metrics`` after ``compute_log_prob``). Patch 0030 skips that pass for an
on-policy update, and with it the metric: the main job logged none. 0031 has ``DataParallelPPOActor.update_policy``
compute it, with verl's own function, from its on-policy forward (the log-probs the pass would have computed) over
the whole mini-batch, and keeps the trainer's rule: rollout log-probs alone do not need the pass; a rollout veto does.

The checks, on the tiny Qwen3 (CPU, fp32, learning rate 0, two micro-batches): rollout log-probs equal to the actor's
own give a mismatch of 0; rollout log-probs of other weights (the model perturbed) give the mismatch
``calculate_debug_metrics`` gives on the pass's output for the same batch, and it reaches the update's reduced
metrics. On unpatched 0.6.1 the on-policy update logs no mismatch.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

BATCH, PROMPT, RESPONSE = 4, 6, 5
RESPONSE_LENGTHS = (5, 3, 4, 2)  # right-padded to RESPONSE: the mask matters
KEYS = (
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_std",
    "training/rollout_actor_probs_pearson_corr",
)


def _model() -> Any:
    """The tiny Qwen3 with its logits scaled (final norm x 50): the random model's next-token distribution is flat
    (p = 1/151936), so any probability gap is ~1e-6; scaled, its greedy tokens have p ~0.6, as a trained model's
    sampled tokens do."""
    import torch
    from kit_testing import tiny_model_dir
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(50.0)
    return model


def _rollout(model: Any) -> Any:
    """The step's sequences: prompts and the model's greedy responses (what a rollout of these weights samples)."""
    import torch

    prompts = torch.randint(100, 5000, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=RESPONSE, do_sample=False
        )


def _batch(input_ids: Any, rollout_log_probs: Any = None) -> Any:
    """A step's batch as the update reads it (old_log_probs a placeholder: the skipped pass's)."""
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(0)
    length = PROMPT + RESPONSE
    response_mask = (torch.arange(RESPONSE) < torch.tensor(RESPONSE_LENGTHS).unsqueeze(1)).long()
    tensors = {
        "input_ids": input_ids,
        "attention_mask": torch.cat([torch.ones(BATCH, PROMPT, dtype=torch.long), response_mask], dim=1),
        "position_ids": torch.arange(length).expand(BATCH, length).clone(),
        "responses": input_ids[:, PROMPT:],
        "response_mask": response_mask,
        "old_log_probs": torch.zeros(BATCH, RESPONSE),
        "advantages": torch.randn(BATCH, RESPONSE, generator=gen) * response_mask,
    }
    if rollout_log_probs is not None:
        tensors["rollout_log_probs"] = rollout_log_probs
    meta = {"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False}  # compute_log_prob reads the last two
    return DataProto.from_dict(tensors=tensors, meta_info=meta)


def _actor(model: Any) -> Any:
    """0030's test's actor (DataParallelPPOActor on a copy of ``model``: one mini-batch of BATCH, on-policy, two
    micro-batches, lr 0), the same shapes here: the mismatch is logged by the update that test proves on-policy."""
    import runpy

    sibling = runpy.run_path(str(Path(__file__).with_name("test_on_policy_old_log_prob.py")))
    assert sibling["BATCH"] == BATCH, (sibling["BATCH"], BATCH)
    return sibling["_actor"](model)


def _perturbed(model: Any) -> Any:
    """Other weights, as a rollout that missed the update has them."""
    import torch

    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.02)
    return other


def check_on_policy_update_logs_the_rollout_mismatch() -> None:
    import numpy as np
    from kit_testing import gloo_world_of_one
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.metric import reduce_metrics

    model = _model()
    ids = _rollout(model)
    with gloo_world_of_one():  # the actor asks torch.distributed for its rank
        own, _ = _actor(model).compute_log_prob(_batch(ids))  # the old log-prob pass's output
        stale, _ = _actor(_perturbed(model)).compute_log_prob(_batch(ids))
        same = _actor(model).update_policy(_batch(ids, rollout_log_probs=own))
        other = _actor(model).update_policy(_batch(ids, rollout_log_probs=stale))
    missing = [key for key in KEYS if key not in other]
    assert not missing, f"the on-policy update logged no rollout/actor mismatch {missing}: {sorted(other)}"
    pass_batch = _batch(ids, rollout_log_probs=stale)
    pass_batch.batch["old_log_probs"] = own
    want = calculate_debug_metrics(pass_batch)  # what the trainer's pass logged
    got, equal = reduce_metrics(dict(other)), reduce_metrics(dict(same))
    print(f"diff_mean: equal weights {equal[KEYS[0]]:.3e}, other weights {got[KEYS[0]]:.3e} (pass {want[KEYS[0]]:.3e})")
    assert equal[KEYS[0]] < 1e-5, f"rollout log-probs of the actor's own weights: mismatch {equal}"
    assert got[KEYS[0]] > 1e-2, f"rollout log-probs of other weights: no mismatch {got}"
    for key in KEYS:
        assert np.isclose(got[key], want[key], rtol=1e-5, atol=1e-7), (key, got[key], want[key])


def _decides(**correction: Any) -> bool:
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "actor": {"strategy": "fsdp2", "ppo_epochs": 1, "ppo_mini_batch_size": 8},
                "rollout": {"calculate_log_probs": True},  # the rollout returns its log-probs
            },
            "algorithm": {"use_kl_in_reward": False, "rollout_correction": {"rollout_is": None, **correction}},
            "data": {"train_batch_size": 8},
        }
    )
    return RayPPOTrainer._actor_update_is_on_policy(SimpleNamespace(config=config))


def check_rollout_log_probs_keep_the_skip() -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    assert _decides(), "rollout log-probs alone brought the old log-prob pass back"
    assert not _decides(rollout_token_veto_threshold=1e-4), "a rollout veto (masks by old_log_probs) skipped the pass"
    # skipped, old_log_probs is a placeholder: the decoupled rollout correction's metrics would be against it
    assert "and not old_log_prob_skipped" in inspect.getsource(RayPPOTrainer.fit), "fit corrects against a placeholder"


def test_patched() -> None:
    check_on_policy_update_logs_the_rollout_mismatch()
    check_rollout_log_probs_keep_the_skip()


def test_unpatched_fails(unpatched_verl: Any) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_on_policy_update_logs_the_rollout_mismatch", match="logged no rollout/actor mismatch"
    )


def test_without_0031_fails(kit_verl_without: Any) -> None:
    kit_verl_without("0031").expect_failure(
        __file__, "check_on_policy_update_logs_the_rollout_mismatch", match="logged no rollout/actor mismatch"
    )
