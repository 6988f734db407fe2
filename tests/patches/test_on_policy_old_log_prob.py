"""Patch 0030: an on-policy update needs no old log-prob pass; the trainer skips it and the actor reports the entropy.

Unpatched 0.6.1 ``RayPPOTrainer.fit`` runs the actor's ``compute_log_prob`` over the whole batch every step, although
an on-policy ``DataParallelPPOActor.update_policy`` (one PPO epoch, one mini-batch) replaces those log-probs with its
own forward's (PR 3119): a full forward thrown away, 12-15 s of a 60-70 s step in the kit's CPU learning check.

The check: the decision (on-policy only for the FSDP actor with one epoch over one mini-batch and nothing else in the
trainer reading ``old_log_probs``), ``fit`` asking it, and the real ``update_policy`` on the tiny Qwen3 (CPU, fp32,
learning rate 0): on-policy it logs ``actor/entropy`` equal to ``compute_log_prob``'s entropy of the same batch, and
a placeholder ``old_log_probs`` gives the loss the real ones give; what the skip leaves in the batch is what the update
reads (the key, and the rollout temperature the pass used to add: without it the update raised ``KeyError:
'temperature'`` in the learning check).
"""

from __future__ import annotations

import copy

BATCH, PROMPT, RESPONSE = 4, 6, 5


def _config(**changes: object):  # -> the trainer's view of a config
    from omegaconf import OmegaConf

    actor = {"strategy": "fsdp2", "ppo_epochs": 1, "ppo_mini_batch_size": 8, **changes.pop("actor", {})}
    algorithm = {"use_kl_in_reward": False, "rollout_correction": {"rollout_is": None, "rollout_rs": None}}
    algorithm.update(changes.pop("algorithm", {}))
    return OmegaConf.create(
        {"actor_rollout_ref": {"actor": actor}, "algorithm": algorithm, "data": {"train_batch_size": 8}}
    )


def _decides(config) -> bool:
    from types import SimpleNamespace

    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    decide = getattr(RayPPOTrainer, "_actor_update_is_on_policy", None)
    assert decide is not None, "RayPPOTrainer has no _actor_update_is_on_policy: it always runs the old log-prob pass"
    return decide(SimpleNamespace(config=config))


def _batch(old_log_probs=None):  # -> DataProto with what update_policy and compute_log_prob read
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
        "old_log_probs": torch.zeros(BATCH, RESPONSE) if old_log_probs is None else old_log_probs,
        "advantages": torch.randn(BATCH, RESPONSE, generator=gen),
    }
    meta = {"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False}  # compute_log_prob reads the last two
    return DataProto.from_dict(tensors=tensors, meta_info=meta)


def _actor(model):  # -> DataParallelPPOActor on a copy of model, one mini-batch of BATCH (on-policy), lr 0
    import torch
    from kit_testing import ppo_config, tiny_model_dir
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    config = ppo_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir()}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.use_dynamic_bsz=False",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.entropy_coeff=0",
            "actor_rollout_ref.actor.use_torch_compile=False",
            "actor_rollout_ref.actor.fsdp_config.dtype=float32",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        ]
    )
    actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    module = copy.deepcopy(model)
    return DataParallelPPOActor(actor_config, module, torch.optim.SGD(module.parameters(), lr=0.0))


def _record_entropy_graphs(actor, graphs: list[bool]):  # -> a context manager
    """Wrap the actor's two entropy functions (remove-padding: its ``compute_entropy_from_logits``; padded:
    ``verl_F.entropy_from_logits``): ``graphs`` gets, per call, whether the result carries an autograd graph."""
    from unittest import mock

    import verl.utils.torch_functional as verl_F

    def recording(entropy_from_logits):
        def recorded(logits):
            entropy = entropy_from_logits(logits)
            graphs.append(entropy.requires_grad)
            return entropy

        return recorded

    actor.compute_entropy_from_logits = recording(actor.compute_entropy_from_logits)
    return mock.patch.object(verl_F, "entropy_from_logits", recording(verl_F.entropy_from_logits))


def check_on_policy_updates_skip_the_old_log_prob_pass() -> None:
    import inspect
    from types import SimpleNamespace

    import numpy as np
    import torch
    from kit_testing import gloo_world_of_one, tiny_model_dir
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    assert _decides(_config())
    for off_policy in (
        _config(actor={"ppo_epochs": 2}),
        _config(actor={"ppo_mini_batch_size": 4}),
        _config(actor={"strategy": "megatron"}),
        _config(algorithm={"use_kl_in_reward": True}),
        _config(algorithm={"rollout_correction": {"rollout_is": "token", "rollout_rs": None}}),
        _config(actor={"use_rollout_log_probs": True}),
    ):
        assert not _decides(off_policy), off_policy
    assert "self._actor_update_is_on_policy()" in inspect.getsource(RayPPOTrainer.fit), "fit() does not ask it"
    # what the skipped pass would have left: the key (a placeholder) and the temperature the update reads
    skipped = _batch()
    skipped.batch.pop("old_log_probs")
    skipped.meta_info.pop("temperature")
    trainer = SimpleNamespace(config=OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 0.7}}}))
    RayPPOTrainer._skip_old_log_prob_pass(trainer, skipped)
    assert skipped.batch["old_log_probs"].shape == (BATCH, RESPONSE) and skipped.meta_info["temperature"] == 0.7

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    with gloo_world_of_one():  # the actor asks torch.distributed for its rank
        log_probs, entropys = _actor(model).compute_log_prob(_batch(), calculate_entropy=True)
        actor = _actor(model)
        entropy_graphs: list[bool] = []
        with _record_entropy_graphs(actor, entropy_graphs):
            placeholder = actor.update_policy(_batch())
        real = _actor(model).update_policy(_batch(old_log_probs=log_probs))
    # entropy_coeff 0: the entropy is a metric only, so the update keeps no graph over the logits for it
    assert entropy_graphs and not any(entropy_graphs), f"entropy computed with autograd on: {entropy_graphs}"
    assert "actor/entropy" in placeholder, f"the on-policy update logged no entropy: {sorted(placeholder)}"
    want = agg_loss(loss_mat=entropys, loss_mask=torch.ones(BATCH, RESPONSE), loss_agg_mode="token-mean").item()
    got = float(np.mean(placeholder["actor/entropy"]))
    print(f"entropy: update {got:.6f}, compute_log_prob {want:.6f}; pg_loss {placeholder['actor/pg_loss']}")
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (got, want)
    assert np.allclose(placeholder["actor/pg_loss"], real["actor/pg_loss"], rtol=1e-6, atol=1e-7)


def test_patched() -> None:
    check_on_policy_updates_skip_the_old_log_prob_pass()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_on_policy_updates_skip_the_old_log_prob_pass", match="has no _actor_update_is_on_policy"
    )
