"""verl 0.9.1 patch 0014: an on-policy actor update needs no old log-prob pass; the V1 trainer skips it.

Unpatched, the V1 trainer's ``_step_once`` (verl/trainer/ppo/v1/trainer_base.py:655-657) runs the actor's
``compute_log_prob`` over the whole batch every step (``_compute_old_log_prob``, :1869-1928) and the update's
``ppo_loss`` (verl/workers/utils/losses.py:86-95) reads those ``old_log_probs``. With one PPO epoch over one mini-batch
the update's forward runs at the same weights, so the pass only repeats it; 0.9.1's engine-based loss has no on-policy
shortcut (0.6.1's legacy actor took its own log-probs, PR 3119; there is no legacy actor in 0.9.1). The reference
series' 0030 skips the pass on 0.6.1 (tests/patches/test_on_policy_old_log_prob.py).

The checks: the real ``_step_once`` of the V1 ``sync`` trainer (built with ``object.__new__``, the rollout, reward,
balance and advantage stages stubbed) runs no pass on an on-policy config and tells the update so, and still runs it on
each off-policy one; then the trainer's real ``_update_actor`` drives a real ``TrainingWorker`` (verl's FSDP2 engine on
the kit's tiny Qwen3, CPU, fp32, gloo world of one, learning rate 0) twice on the same batch: with the pass's
``old_log_probs`` and on-policy without them. Loss, pg_loss, gradient norm and every gradient must agree, and the
on-policy update's ``actor/entropy`` must equal the pass's, computed outside autograd (entropy_coeff 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kit_testing import needs_verl_09

pytestmark = needs_verl_09()

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN = 2, 2, 6, 5
RESPONSE_LENGTHS = (5, 3, 4, 2)  # the PROMPTS * N trajectories, right-padded to RESPONSE_LEN
#: One PPO epoch over one mini-batch (the whole step), nothing else reading old_log_probs: an on-policy update.
ON_POLICY = [
    f"data.train_batch_size={PROMPTS}",
    f"actor_rollout_ref.rollout.n={N}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.rollout.calculate_log_probs=False",
    "algorithm.use_kl_in_reward=False",
]
OFF_POLICY = {
    "two mini-batches": ["actor_rollout_ref.actor.ppo_mini_batch_size=1"],
    "two PPO epochs": ["actor_rollout_ref.actor.ppo_epochs=2"],
    "KL in the reward": ["algorithm.use_kl_in_reward=True"],
    # rollout log-probs (0.9.1's default) keep the skip since patch 0015: test_on_policy_rollout_mismatch_091.py
    "bypass mode": ["algorithm.rollout_correction.bypass_mode=True"],
    "megatron actor": ["actor_rollout_ref.actor.strategy=megatron"],
    "two local updates per weight sync": ["+trainer.v1.sync.parameter_sync_step=2"],
}


def _batch_meta(extra_info: dict | None = None) -> Any:
    """The step's KVBatchMeta: one key per trajectory (the data itself stays with the worker group below)."""
    from transfer_queue import KVBatchMeta

    keys = [f"uid{i // N}_{i % N}_0" for i in range(PROMPTS * N)]
    return KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train", extra_info=dict(extra_info or {}))


class _RecordingWorkerGroup:
    """``actor_rollout_wg.update_actor``: records the batch-level settings the update gets (batch.extra_info)."""

    def __init__(self) -> None:
        self.updates: list[dict] = []

    def update_actor(self, batch: Any) -> dict:
        self.updates.append(dict(batch.extra_info))
        return {"metrics": {"mfu": [0.0]}}


def _trainer(overrides: list[str], worker_group: Any = None) -> Any:
    """The registered V1 ``sync`` trainer, with what ``_step_once``/``_update_actor`` read (verl 0.9.1's config).

    ``passes`` records each call of the old log-prob pass (``_compute_old_log_prob``)."""
    from types import SimpleNamespace

    from kit_testing import ppo_config
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = object.__new__(get_trainer_cls("sync"))
    trainer.config = ppo_config([*ON_POLICY, *overrides])
    trainer.trainer_mode = "sync"
    # as PPOTrainer.__init__ reads it (trainer_base.py:162)
    trainer.parameter_sync_step = trainer.config.trainer.v1.get("sync", {}).get("parameter_sync_step", 1)
    trainer.global_steps, trainer.curr_step_profile = 1, False
    trainer.use_reference_policy = trainer.use_critic = False
    trainer.checkpoint_manager = SimpleNamespace(sleep_replicas=lambda: None)
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[])  # rewards come with the rollout
    trainer.replay_buffer = SimpleNamespace(sample=lambda **kwargs: (_batch_meta(), {}))
    trainer._balance_batch = lambda batch, metrics: batch
    trainer._compute_advantage = lambda batch, metrics: batch
    trainer.passes = []
    trainer._compute_old_log_prob = lambda batch, metrics: trainer.passes.append(len(batch)) or batch
    trainer.actor_rollout_wg = worker_group or _RecordingWorkerGroup()
    return trainer


def check_on_policy_update_skips_the_old_log_prob_pass() -> None:
    trainer = _trainer([])
    trainer._step_once({}, {}, PROMPTS)
    assert not trainer.passes, (
        "the old log-prob pass ran on an on-policy update (one PPO epoch over one mini-batch): "
        f"_compute_old_log_prob called over {trainer.passes} samples"
    )
    (update,) = trainer.actor_rollout_wg.updates
    assert update.get("on_policy_update") is True, f"the update was not told it is on-policy: {update}"
    # the update logs actor/entropy in place of the pass; entropy_coeff 0: a metric only, outside autograd
    assert update["calculate_entropy"] is True and update["entropy_requires_grad"] is False, update
    for why, overrides in OFF_POLICY.items():
        trainer = _trainer(overrides)
        trainer._step_once({}, {}, PROMPTS)
        assert trainer.passes == [PROMPTS * N], f"{why}: the old log-prob pass did not run ({trainer.passes})"
        (update,) = trainer.actor_rollout_wg.updates
        assert not update.get("on_policy_update") and update["entropy_requires_grad"] is True, (why, update)


@contextlib.contextmanager
def _cpu_engine() -> Iterator[None]:
    """verl's FSDP engine on this CPU as the kit's runs have it: the kit's platform (VERL_PLATFORM=cpu), the FSDP
    engine selected for it (VERL_ENGINE_DEVICE) and the packed attention the CPU overrides name; restored after."""
    import os

    from verl.plugin.platform import platform_manager

    import platforms.cpu_attention  # noqa: F401  (registers kit_packed_sdpa with transformers)
    from platforms import verl_platform
    from platforms.verl_selectors import verl_env

    saved_env, saved_platform = dict(os.environ), platform_manager._current_platform
    os.environ.update(verl_env(True))
    platform_manager._current_platform = verl_platform.register()()
    try:
        yield
    finally:
        platform_manager._current_platform = saved_platform
        os.environ.clear()
        os.environ.update(saved_env)


def _actor_worker(config: Any, entropy_graphs: list[bool]) -> Any:
    """A real ``TrainingWorker`` with ``ppo_loss``, configured as ``ActorRolloutRefWorker.init_model`` configures
    the actor's (engine_workers.py:600-644); ``entropy_graphs`` gets, per micro-batch the loss sees, whether the
    entropy carries an autograd graph."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from verl.workers.utils.losses import ppo_loss

    model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    actor_config.model_config = model_config
    training_config = TrainingWorkerConfig(
        model_type="language_model",
        model_config=model_config,
        engine_config=actor_config.engine,
        optimizer_config=actor_config.optim,
        checkpoint_config=actor_config.checkpoint,
    )
    engine_config = training_config.engine_config
    engine_config.use_dynamic_bsz = False
    engine_config.infer_micro_batch_size_per_gpu = config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu
    engine_config.micro_batch_size_per_gpu = config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    engine_config.use_remove_padding = model_config.get("use_remove_padding", False)
    worker = TrainingWorker(config=training_config)
    worker.reset()

    def loss(model_output: dict, data: Any, dp_group: Any = None) -> Any:
        if "entropy" in model_output:
            entropy_graphs.append(model_output["entropy"].requires_grad)
        return ppo_loss(actor_config, model_output, data, dp_group)

    worker.set_loss_fn(loss)
    return worker


def _step_data(old_log_probs: Any = None) -> Any:
    """The step's trajectories as the actor's calls take them (padded, then ``left_right_2_no_padding``)."""
    import torch
    from tensordict import TensorDict
    from verl.workers.utils.padding import left_right_2_no_padding

    gen = torch.Generator().manual_seed(0)
    size, length = PROMPTS * N, PROMPT_LEN + RESPONSE_LEN
    input_ids = torch.randint(100, 5000, (size, length), generator=gen)
    response_mask = (torch.arange(RESPONSE_LEN) < torch.tensor(RESPONSE_LENGTHS).unsqueeze(1)).long()
    tensors = {
        "input_ids": input_ids,
        "attention_mask": torch.cat([torch.ones(size, PROMPT_LEN, dtype=torch.long), response_mask], dim=1),
        "position_ids": torch.arange(length).expand(size, length).clone(),
        "prompts": input_ids[:, :PROMPT_LEN],
        "responses": input_ids[:, PROMPT_LEN:],
        "response_mask": response_mask,
        "advantages": torch.randn(size, RESPONSE_LEN, generator=gen) * response_mask,
    }
    if old_log_probs is not None:
        tensors["old_log_probs"] = old_log_probs
    return left_right_2_no_padding(TensorDict(tensors, batch_size=size))


class _EngineWorkerGroup:
    """``actor_rollout_wg.update_actor`` on a real worker, as the TransferQueue bridge calls it: the batch's fields
    (``old_log_probs`` when the pass left them) plus its extra_info as non-tensor data. ``grads`` gets each
    update's gradients at the optimizer step."""

    def __init__(self, worker: Any, old_log_probs: Any) -> None:
        self.worker, self.old_log_probs, self.grads = worker, old_log_probs, []

    def update_actor(self, batch: Any) -> Any:
        from verl.utils import tensordict_utils as tu

        data = _step_data(None if batch.extra_info.get("on_policy_update") else self.old_log_probs)
        tu.assign_non_tensor(data, **batch.extra_info)
        optimizer = self.worker.engine.optimizer
        step, grads = optimizer.step, []

        def recording_step(*args: Any, **kwargs: Any) -> Any:
            grads.extend(p.grad.full_tensor().clone() for p in self.worker.engine.module.parameters())
            return step(*args, **kwargs)

        optimizer.step = recording_step
        try:
            return self.worker.train_mini_batch(data)
        finally:
            optimizer.step = step
            self.grads.append(grads)


def _old_log_prob_pass(worker: Any, config: Any) -> tuple[Any, float]:
    """What ``_compute_old_log_prob`` computes (trainer_base.py:1886-1922): old_log_probs (padded) and the
    actor/entropy it logs."""
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    data = _step_data()
    tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False, temperature=1.0)
    output = worker.infer_batch(data)
    entropy = no_padding_2_padding(tu.get(output, "entropy"), data)
    actor = config.actor_rollout_ref.actor
    entropy_metric = agg_loss(
        loss_mat=entropy,
        loss_mask=data["response_mask"],
        loss_agg_mode=actor.loss_agg_mode,
        loss_scale_factor=actor.loss_scale_factor,
    )
    return no_padding_2_padding(tu.get(output, "log_probs"), data), entropy_metric.item()


def check_on_policy_update_gives_the_loss_of_the_pass() -> None:
    import torch
    from kit_testing import gloo_world_of_one, interpreter_stack, ppo_config, tiny_model_dir

    from platforms import CPU

    config = ppo_config(
        [
            *CPU.verl_overrides("rl", interpreter_stack()),
            *ON_POLICY,
            f"actor_rollout_ref.model.path={tiny_model_dir()}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0",  # both updates start from the same weights
        ]
    )
    entropy_graphs: list[bool] = []
    with _cpu_engine(), gloo_world_of_one():
        worker = _actor_worker(config, entropy_graphs)
        old_log_probs, pass_entropy = _old_log_prob_pass(worker, config)
        group = _EngineWorkerGroup(worker, old_log_probs)
        trainer = _trainer([], worker_group=group)
        trainer.config = config
        with_pass, on_policy = {}, {}
        trainer._update_actor(_batch_meta({"temperature": 1.0}), with_pass)
        entropy_graphs.clear()
        trainer._update_actor(_batch_meta({"temperature": 1.0, "on_policy_update": True}), on_policy)
    print(f"with the pass: {with_pass}\non-policy, no pass: {on_policy}\npass's actor/entropy {pass_entropy}")
    for key in ("actor/loss", "actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/pg_clipfrac"):
        assert abs(on_policy[key] - with_pass[key]) <= 1e-6 * max(1.0, abs(with_pass[key])), (key, on_policy, with_pass)
    assert with_pass["actor/grad_norm"] > 0, "no gradient: the comparison shows nothing"
    ref_grads, grads = group.grads
    assert len(grads) == len(ref_grads) > 0
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(grads, ref_grads, strict=True))
    assert abs(on_policy["actor/entropy"] - pass_entropy) <= 1e-5 * max(1.0, abs(pass_entropy)), on_policy
    assert entropy_graphs and not any(entropy_graphs), f"the metric's entropy kept an autograd graph: {entropy_graphs}"


def test_on_policy_update_skips_the_old_log_prob_pass() -> None:
    check_on_policy_update_skips_the_old_log_prob_pass()


def test_on_policy_update_gives_the_loss_of_the_pass() -> None:
    check_on_policy_update_gives_the_loss_of_the_pass()


def test_unpatched_runs_the_pass_on_policy(unpatched_verl: Any) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_on_policy_update_skips_the_old_log_prob_pass", match="the old log-prob pass ran"
    )
