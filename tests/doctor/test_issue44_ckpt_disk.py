"""Issue 44, finding 7: ``retool-doctor --ckpt-dir DIR`` FAILed on a fixed "need 100 GB" while the dry run of the
same run said ~234 MB a checkpoint (the smoke's tiny model). The doctor sizes one checkpoint of ``--model`` as the
launcher's plan does (platforms/doctor/disk.py repeats the arithmetic: the platform layer imports no recipe code),
and without ``--model`` says the 100 GB is an assumption and how to tell it more."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, tiny_model_dir

from platforms import CPU
from platforms.doctor import disk
from platforms.doctor.cli import run_checks
from platforms.doctor.probes import OK, Options, Probes
from recipes.launch.run_inputs import catalog
from recipes.launch.sizing import budget, memory


def _disk(tmp_path: Path, model: Path | None, min_free_gb: float | None = None) -> dict:
    probes = Probes(env={}, dev_root=tmp_path, detect_platform=lambda: CPU)
    opts = Options(profile="cpu", only=frozenset({"disk"}), ckpt_dir=tmp_path / "ckpt", model=model)
    opts.min_free_gb = min_free_gb
    [result] = [r for r in run_checks(opts, probes).results if r.check == "disk"]
    return {"status": result.status, "summary": result.summary, **result.details}


def _plan_bytes(model: Path) -> int:
    """One checkpoint as the launcher's plan sizes it (planning/facts.py: facts_from_config, then budget)."""
    config = json.loads((model / "config.json").read_text())
    shape = memory.facts_from_config(config, str(model), catalog.get("qwen3_4b_dapo").model)
    return budget.checkpoint_budget("rl", 2, 2, 1, shape, "test").per_checkpoint


def test_the_doctor_needs_what_the_plan_says_a_checkpoint_takes(tmp_path: Path) -> None:
    model = tiny_model_dir()
    found = _disk(tmp_path, model)
    assert found["status"] == OK, found
    assert found["need_gb"] == pytest.approx(_plan_bytes(model) / 1e9, abs=1e-3)
    assert found["need_gb"] < 1, "the tiny model's checkpoint is MBs, not the 100 GB assumed for a real recipe"
    assert "as the plan" in found["summary"] and "MB" in found["summary"], found["summary"]


def test_without_a_model_the_doctor_says_what_it_assumed(tmp_path: Path) -> None:
    found = _disk(tmp_path, None)
    assert found["need_gb"] == disk.ASSUMED_NEED_GB
    assert "assumed 100 GB" in found["summary"] and "--model DIR" in found["summary"], found["summary"]
    given = _disk(tmp_path, None, min_free_gb=0.5)
    assert given["need_gb"] == 0.5 and "--min-free-gb 0.5" in given["summary"]


@pytest.mark.parametrize("name", sorted(catalog.RECIPES))
def test_doctor_and_plan_count_the_same_parameters(name: str) -> None:
    """Each recipe's model (its table's shape, as a config.json would hold it), and the kit's tiny model."""
    facts = catalog.get(name).model
    config = {
        "num_attention_heads": facts.num_attention_heads,
        "num_key_value_heads": facts.num_key_value_heads,
        "hidden_size": facts.hidden_size,
        "num_hidden_layers": facts.num_layers,
        "intermediate_size": facts.intermediate_size,
        "head_dim": facts.head_dim,
        "vocab_size": facts.vocab_size,
        "tie_word_embeddings": facts.tie_word_embeddings,
        "model_type": "qwen2" if facts.qkv_bias else "qwen3",
    }
    assert memory.facts_from_config(config, name, facts) == dataclasses.replace(facts, hf_name=name)
    assert disk.parameters(config) == facts.parameters
    assert disk.CKPT_BYTES_PER_PARAM == budget.CKPT_BYTES_PER_PARAM
    for folder in (tiny_model_dir(), REPO_ROOT / "build" / "models" / "smollm2-135m-instruct"):
        if (folder / "config.json").is_file():
            sized = disk.checkpoint_bytes(folder)
            assert sized is not None and sized[0] == _plan_bytes(folder), folder
