"""Fixtures for the launch-recipe tests: a clean launch environment, a fake model folder, a small parquet."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import LAUNCH_VARS, REPO_ROOT, kit_env


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HOME of its own, so the launcher's ~/... defaults are known paths."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def launch_env(home: Path) -> dict[str, str]:
    """Environment for the shell entry points: the kit importable, no launch inputs set, HOME = ``home``."""
    env = kit_env()
    for name in LAUNCH_VARS:
        env.pop(name, None)
    env["HOME"] = str(home)
    env["KIT_PYTHON"] = sys.executable
    return env


@pytest.fixture
def launch_environ(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``os.environ`` as :func:`launch_env` has it, for in-process CLI calls: no launch inputs, HOME = ``home``."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def plan_env(home: Path) -> dict[str, str]:
    """Environment mapping for in-process ``plan.build(..., environ=...)`` calls."""
    return {"HOME": str(home)}


@pytest.fixture
def make_model() -> Callable[..., Path]:
    """Factory: a folder the path checks accept as a complete Hugging Face model (config.json, model.safetensors,
    tokenizer.json).

    The checkpoint-disk and memory estimates read the model's shape from config.json (recipes/launch/sizing/budget.py
    checkpoint_budget, memory.facts_for), so the config is a whole tiny one: its ~0.1M parameters (~1.3 MB per
    checkpoint) keep the dry run off the test machine's free disk, which the recipe table's 4B model (~48 GB) would
    not. The weights file is 1 MiB of zeros: only its presence matters before launch.
    """

    def make(path: Path, heads: int = 4, kv_heads: int = 2) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        config = {
            "model_type": "qwen3",
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "hidden_size": 16 * heads,
            "head_dim": 16,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "vocab_size": 512,
            "tie_word_embeddings": True,
        }
        (path / "config.json").write_text(json.dumps(config))
        (path / "model.safetensors").write_bytes(bytes(1 << 20))
        (path / "tokenizer.json").write_text("{}")  # the model rule wants a tokenizer (issue 44)
        return path

    return make


@pytest.fixture
def make_parquet() -> Callable[[Path, int], Path]:
    """Factory: a parquet file of ``rows`` rows both phases' dataset classes read (the plan reads the first rows
    through them, issue 44): SFT's ``messages`` and the kit's RL columns side by side; otherwise only the row count
    matters before launch."""

    def make(path: Path, rows: int) -> Path:
        import pandas as pd

        message = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "\\boxed{2}"}]
        rl = {"prompt": message[:1], "reward_model": {"style": "rule", "ground_truth": "2"}, "agent_name": "tool_agent"}
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{"messages": message, **rl}] * rows).to_parquet(path)
        return path

    return make


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT
