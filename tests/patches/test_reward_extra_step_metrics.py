"""Patch 0022: the training step's metrics include the reward's numeric extras (``reward_extra/<key>/mean`` …).

Unpatched 0.6.1 attaches the extras to the batch (``ray_trainer.py`` fit) but logs them only for validation
(``val-aux/...``), so the ReTool reward's ``tool_failures`` (tool calls a dead sandbox answered) never reached the
training metrics: a sandbox killed mid-run was invisible in the step's numbers.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace


def check_step_metrics_carry_reward_extras() -> None:
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    record = getattr(RayPPOTrainer, "_record_reward_extras", None)
    assert record is not None, "RayPPOTrainer logs no reward extras in the training step's metrics"
    assert "self._record_reward_extras(" in inspect.getsource(RayPPOTrainer.fit), "fit() does not call it"
    batch = DataProto.from_dict(tensors={"x": torch.zeros(4, 1)})
    extras = {
        "tool_failures": [0, 2, 1, 0],  # lists (the reward manager's path)
        "acc": np.array([True, False, True, True]),  # numpy (the agent loop's reward path)
        "pred": np.array(["1", "", "3", "4"], dtype=object),
    }
    metrics: dict = {"actor/entropy": 1.0}
    record(SimpleNamespace(), batch, extras, metrics)
    assert metrics["reward_extra/tool_failures/mean"] == 0.75
    assert metrics["reward_extra/tool_failures/max"] == 2.0 and metrics["reward_extra/tool_failures/min"] == 0.0
    assert metrics["reward_extra/acc/mean"] == 0.75
    assert not any("pred" in key for key in metrics), metrics  # strings are not metrics
    assert metrics["actor/entropy"] == 1.0
    assert list(batch.non_tensor_batch["tool_failures"]) == [0, 2, 1, 0]  # the batch still carries them
    empty: dict = {}
    record(SimpleNamespace(), batch, {}, empty)
    assert empty == {}


def test_patched_step_metrics_carry_reward_extras() -> None:
    check_step_metrics_carry_reward_extras()


def test_unpatched_step_metrics_lack_reward_extras(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_step_metrics_carry_reward_extras",
        match="logs no reward extras in the training step's metrics",
    )
