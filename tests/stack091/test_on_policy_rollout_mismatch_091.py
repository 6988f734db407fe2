"""verl 0.9.1 patch 0015: the on-policy update logs the rollout/actor log-prob mismatch the skipped pass logged.

The rollout/actor mismatch (``training/rollout_probs_diff_mean`` ...) is the run's direct witness that the rollout
received the update: the V1 trainer computes it in the old log-prob pass (trainer_base.py ``_compute_old_log_prob``,
``calculate_debug_metrics``) when ``rollout.calculate_log_probs`` (0.9.1's default) gives the rollout's log-probs.
Patch 0014 skipped the pass on-policy only with rollout log-probs off, so the main job either ran the pass or logged
no mismatch. 0015 skips it with rollout log-probs on (not with the rollout correction's IS/RS), has ``ppo_loss``
compute the mismatch with verl's function from its on-policy forward, and keeps the on-policy mark past the
advantage stage, whose ``kv_batch_put`` returns a KVBatchMeta without the batch's extra_info.

The checks: the real ``_step_once`` skips the pass with rollout log-probs and the update is told it is on-policy even
when the advantage stage returns a fresh KVBatchMeta; the real ``_compute_advantage`` runs no rollout correction
against absent old_log_probs; the trainer's real ``_update_actor`` on a real ``TrainingWorker`` (FSDP2, the tiny
Qwen3 with scaled logits, CPU, fp32, lr 0, one micro-batch) logs a mismatch of 0 for rollout log-probs equal to the
pass's, and for rollout log-probs of perturbed weights the mismatch ``calculate_debug_metrics`` gives on the pass's
output, under the pass's names.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from kit_testing import needs_verl_09

# kit: UnpatchedVerl.run (tests/kit_testing.py) runs this file with runpy, which does not put its folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_on_policy_old_log_prob_091 as on_policy  # noqa: E402

pytestmark = needs_verl_09()

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN = on_policy.PROMPTS, on_policy.N, on_policy.PROMPT_LEN, on_policy.RESPONSE_LEN
KEYS = (
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_std",
    "training/rollout_actor_probs_pearson_corr",
)
WITH_ROLLOUT_LOG_PROBS = ["actor_rollout_ref.rollout.calculate_log_probs=True"]
CORRECTED = {
    "rollout IS weights": ["algorithm.rollout_correction.rollout_is=token"],
    "rollout rejection sampling": [
        "algorithm.rollout_correction.rollout_rs=token_k1",
        "algorithm.rollout_correction.rollout_rs_threshold=2.0",
    ],
}


def _trainer(overrides: list[str], **kwargs: Any) -> Any:
    """0014's test trainer with rollout log-probs on (its ON_POLICY has them off; a later override wins)."""
    from kit_testing import ppo_config

    trainer = on_policy._trainer(overrides, **kwargs)
    trainer.config = ppo_config([*on_policy.ON_POLICY, *WITH_ROLLOUT_LOG_PROBS, *overrides])
    return trainer


def check_rollout_log_probs_keep_the_skip() -> None:
    from transfer_queue import KVBatchMeta

    trainer = _trainer([])
    # as TransferQueue's kv_batch_put returns it (interface.py async_kv_batch_put): the controller's extra_info, none
    trainer._compute_advantage = lambda batch, metrics: KVBatchMeta(
        keys=batch.keys, tags=batch.tags, partition_id=batch.partition_id
    )
    trainer._step_once({}, {}, PROMPTS)
    assert not trainer.passes, (
        f"rollout log-probs on: the old log-prob pass ran on an on-policy update {trainer.passes}"
    )
    (update,) = trainer.actor_rollout_wg.updates
    assert update.get("on_policy_update") is True, f"the update was not told it is on-policy: {update}"
    for why, overrides in CORRECTED.items():
        trainer = _trainer(overrides)
        trainer._step_once({}, {}, PROMPTS)
        assert trainer.passes == [PROMPTS * N], f"{why}: the old log-prob pass did not run ({trainer.passes})"


def check_advantage_runs_no_correction_on_policy() -> None:
    """The real ``_compute_advantage`` with rollout log-probs and no old_log_probs (the pass skipped)."""
    from unittest import mock

    import torch
    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import trainer_base

    size = PROMPTS * N
    fields = TensorDict(
        {
            "uid": torch.arange(size) // N,
            "response_mask": torch.ones(size, RESPONSE_LEN),
            "rm_scores": torch.randn(size, RESPONSE_LEN),
            "rollout_log_probs": -torch.rand(size, RESPONSE_LEN),
        },
        batch_size=size,
    )
    corrections: list[int] = []

    def advantage(data: Any, **kwargs: Any) -> Any:
        data.batch["advantages"] = data.batch["returns"] = data.batch["token_level_rewards"]
        return data

    fake_tq = mock.Mock(kv_batch_get=lambda **kwargs: fields.clone(), kv_batch_put=lambda **kwargs: kwargs["keys"])
    with (
        mock.patch.object(trainer_base, "tq", fake_tq),
        mock.patch.object(trainer_base, "compute_advantage_for_multi_trajectories", advantage),
        mock.patch.object(trainer_base, "response_to_nested", lambda tensor, mask: tensor),
        mock.patch.object(
            trainer_base,
            "compute_rollout_correction_and_add_to_batch",
            lambda data, config: corrections.append(len(data)) or (data, {}),
        ),
    ):
        trainer = _trainer([])
        compute_advantage = type(trainer)._compute_advantage  # the real one (the test trainer stubs it)
        compute_advantage(trainer, on_policy._batch_meta({"on_policy_update": True}), {})
        assert not corrections, "on-policy, the rollout correction ran against old_log_probs no pass computed"
        compute_advantage(trainer, on_policy._batch_meta(), {})
        assert corrections == [size], f"off-policy the rollout correction did not run: {corrections}"


def _scaled_model_dir(dest: Path) -> Path:
    """The tiny Qwen3 with its logits scaled (final norm x 50): the random model's next-token distribution is flat
    (p = 1/151936), so any probability gap is ~1e-6; scaled, its greedy tokens have p ~0.6, as a trained model's
    sampled tokens do."""
    import shutil

    import torch
    from kit_testing import tiny_model_dir
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(50.0)
    model.save_pretrained(dest)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tiny_model_dir() / name, dest / name)
    return dest


def _rollout(model_dir: Path) -> tuple[Any, Any]:
    """The step's sequences (prompts and the model's greedy responses, what a rollout of these weights samples) and
    the log-probs of those responses under perturbed weights (a rollout that missed the update)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompts = torch.randint(100, 5000, (PROMPTS * N, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
    stale = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        ids = model.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=RESPONSE_LEN, do_sample=False
        )
        for param in stale.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.02)
        logits = stale(ids).logits[:, PROMPT_LEN - 1 : -1].log_softmax(-1)
    return ids, logits.gather(-1, ids[:, PROMPT_LEN:, None]).squeeze(-1)


def _step_data(input_ids: Any, rollout_log_probs: Any = None) -> Any:
    """0014's step data (padded, then ``left_right_2_no_padding``) with these sequences and rollout log-probs."""
    from unittest import mock

    import torch
    from verl.workers.utils import padding

    convert = padding.left_right_2_no_padding

    def with_rollout(data: Any) -> Any:
        length = PROMPT_LEN + RESPONSE_LEN
        data["input_ids"], data["prompts"] = input_ids, input_ids[:, :PROMPT_LEN]
        data["responses"] = input_ids[:, PROMPT_LEN:]
        data["position_ids"] = torch.arange(length).expand(len(input_ids), length).clone()
        if rollout_log_probs is not None:
            data["rollout_log_probs"] = rollout_log_probs
        return convert(data)

    with mock.patch.object(padding, "left_right_2_no_padding", with_rollout):
        return on_policy._step_data()


class _EngineWorkerGroup:
    """``actor_rollout_wg.update_actor`` on a real worker, on-policy (no old_log_probs), with rollout log-probs."""

    def __init__(self, worker: Any, input_ids: Any, rollout_log_probs: Any) -> None:
        self.worker, self.input_ids, self.rollout_log_probs = worker, input_ids, rollout_log_probs

    def update_actor(self, batch: Any) -> Any:
        from verl.utils import tensordict_utils as tu

        data = _step_data(self.input_ids, self.rollout_log_probs)
        tu.assign_non_tensor(data, **batch.extra_info)
        return self.worker.train_mini_batch(data)


def _old_log_prob_pass(worker: Any, input_ids: Any) -> Any:
    """The pass's old_log_probs (padded) for these sequences (trainer_base.py _compute_old_log_prob)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    data = _step_data(input_ids)
    tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False, temperature=1.0)
    return no_padding_2_padding(tu.get(worker.infer_batch(data), "log_probs"), data)


def _update(worker: Any, config: Any, input_ids: Any, rollout_log_probs: Any) -> dict:
    """The trainer's real ``_update_actor``, on-policy: the step's actor metrics."""
    trainer = _trainer([], worker_group=_EngineWorkerGroup(worker, input_ids, rollout_log_probs))
    trainer.config, metrics = config, {}
    trainer._update_actor(on_policy._batch_meta({"temperature": 1.0, "on_policy_update": True}), metrics)
    return metrics


def check_on_policy_update_logs_the_rollout_mismatch(model_root: str = "") -> None:
    import tempfile

    if not model_root:  # a run on another verl (kit_verl_without) names no folder: the check's own goes with it
        with tempfile.TemporaryDirectory(prefix="kit-scaled-qwen3-") as root:
            return check_on_policy_update_logs_the_rollout_mismatch(root)
    import numpy as np
    import torch
    from kit_testing import gloo_world_of_one, interpreter_stack, ppo_config
    from verl import DataProto
    from verl.utils.debug.metrics import calculate_debug_metrics

    from platforms import CPU

    model_dir = _scaled_model_dir(Path(model_root))
    input_ids, stale = _rollout(model_dir)
    config = ppo_config(
        [
            *CPU.verl_overrides("rl", interpreter_stack()),
            *on_policy.ON_POLICY,
            *WITH_ROLLOUT_LOG_PROBS,
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={PROMPTS * N}",  # one micro-batch: the pass's set
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0",  # every update starts from the same weights
        ]
    )
    with on_policy._cpu_engine(), gloo_world_of_one():
        worker = on_policy._actor_worker(config, [])
        own = _old_log_prob_pass(worker, input_ids)
        same = _update(worker, config, input_ids, own)
        other = _update(worker, config, input_ids, stale)
    missing = [key for key in KEYS if key not in other]
    assert not missing, f"the on-policy update logged no rollout/actor mismatch {missing}: {sorted(other)}"
    data = _step_data(input_ids)
    tensors = {"old_log_probs": own, "rollout_log_probs": stale, "response_mask": data["response_mask"]}
    want = calculate_debug_metrics(DataProto.from_dict(tensors={**tensors, "responses": input_ids[:, PROMPT_LEN:]}))
    print(
        f"diff_mean: equal weights {same[KEYS[0]]:.3e}, other weights {other[KEYS[0]]:.3e} (pass {want[KEYS[0]]:.3e})"
    )
    assert same[KEYS[0]] < 1e-5, f"rollout log-probs of the actor's own weights: mismatch {same}"
    assert other[KEYS[0]] > 1e-2, f"rollout log-probs of other weights: no mismatch {other}"
    for key in KEYS:
        assert np.isclose(other[key], want[key], rtol=1e-4, atol=1e-6), (key, other[key], want[key])
    assert torch.isfinite(torch.tensor([other[key] for key in KEYS])).all()


def test_rollout_log_probs_keep_the_skip() -> None:
    check_rollout_log_probs_keep_the_skip()


def test_advantage_runs_no_correction_on_policy() -> None:
    check_advantage_runs_no_correction_on_policy()


def test_on_policy_update_logs_the_rollout_mismatch(tmp_path: Path) -> None:
    check_on_policy_update_logs_the_rollout_mismatch(str(tmp_path))


def test_unpatched_runs_the_pass_with_rollout_log_probs(unpatched_verl: Any) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_rollout_log_probs_keep_the_skip", match="the old log-prob pass ran on an on-policy update"
    )


def test_without_0015_logs_no_mismatch(kit_verl_without: Any) -> None:
    kit_verl_without("0015").expect_failure(
        __file__, "check_on_policy_update_logs_the_rollout_mismatch", match="logged no rollout/actor mismatch"
    )
