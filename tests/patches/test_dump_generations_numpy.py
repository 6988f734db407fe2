"""Patch 0012: validation/rollout dumps survive reward extras that verl stacked into numpy scalars.

The ReTool reward returns ``acc`` (bool) and ``tool_rounds`` (int) next to the score; verl collects them into
numpy arrays, and unpatched 0.6.1's ``_dump_generations`` hands ``numpy.bool_`` to ``json.dumps``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace


def check_dump_generations_with_numpy_extras() -> None:
    import numpy as np
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = SimpleNamespace(global_steps=3)
    extras = {
        "acc": np.array([True, False]),
        "tool_rounds": np.array([2, 0]),
        "pred": np.array(["42", ""], dtype=object),
        "short": np.array([1.0]),  # wrong length: verl leaves it out
    }
    with tempfile.TemporaryDirectory() as tmp:
        RayPPOTrainer._dump_generations(
            trainer, ["q1", "q2"], ["a1", "a2"], ["42", "7"], np.array([1.0, -1.4]), extras, tmp
        )
        rows = [json.loads(line) for line in (Path(tmp) / "3.jsonl").read_text().splitlines()]
    assert rows == [
        {
            "input": "q1",
            "output": "a1",
            "gts": "42",
            "score": 1.0,
            "step": 3,
            "acc": True,
            "tool_rounds": 2,
            "pred": "42",
        },
        {
            "input": "q2",
            "output": "a2",
            "gts": "7",
            "score": -1.4,
            "step": 3,
            "acc": False,
            "tool_rounds": 0,
            "pred": "",
        },
    ], rows


def test_patched() -> None:
    check_dump_generations_with_numpy_extras()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_dump_generations_with_numpy_extras", match="is not JSON serializable"
    )
