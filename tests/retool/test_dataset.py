"""The ``data.custom_cls`` dataset (recipes.retool.dataset.ReToolRLDataset)."""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from recipes.retool import prepare
from recipes.retool.schema import TOOL_SCHEMA

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retool"


def dataset_cls():
    from verl.utils.import_utils import load_extern_type

    return load_extern_type("pkg://recipes.retool.dataset", "ReToolRLDataset")  # how verl resolves data.custom_cls


def data_config(tmp_path: Path, **overrides):
    base = {
        "max_prompt_length": 1024,
        "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1,
        "return_raw_chat": True,
        "truncation": "error",
        "cache_dir": str(tmp_path / "cache"),
    }
    return OmegaConf.create({**base, **overrides})


def rollout_prompt_length(tokenizer, row_prompt) -> int:
    return len(
        tokenizer.apply_chat_template(row_prompt, tools=[TOOL_SCHEMA], add_generation_prompt=True, tokenize=True)
    )


def prepared(tmp_path: Path, fixture: str, command: str = "rl") -> Path:
    out = tmp_path / f"{Path(fixture).stem}.parquet"
    assert prepare.main([command, "--input", str(FIXTURES / fixture), "--output", str(out)]) == 0
    return out


def test_prepared_parquet_rows(tmp_path, qwen_tokenizer) -> None:
    train = prepared(tmp_path, "dapo_math_17k.jsonl")
    val = prepared(tmp_path, "aime_2025.jsonl", "val")
    dataset = dataset_cls()([str(train), str(val)], qwen_tokenizer, data_config(tmp_path))
    assert len(dataset) == 6
    item = dataset[0]
    assert item["agent_name"] == "tool_agent" and item["reward_model"]["ground_truth"] == "385"
    assert item["raw_prompt"][0]["role"] == "user" and "sum of the squares" in item["raw_prompt"][0]["content"]
    assert item["input_ids"].shape[0] == 1024 and item["index"] == 0
    assert dataset[5]["data_source"] == "aime_2025"


class _DatasetHoldingAContextVar:
    """Mixin: an attribute that cannot be pickled (what broke verl's recipe under num_proc>1)."""

    def _read_files_and_tokenize(self):
        self.unpicklable = contextvars.ContextVar("retool_test")
        super()._read_files_and_tokenize()


def test_raw_sources_converted_deduplicated_and_filtered_with_num_proc_2(tmp_path, qwen_tokenizer) -> None:
    """Map/filter functions never capture the dataset object, so num_proc>1 works even if it cannot be pickled.

    verl's own overlong filter closes over ``self``; with num_proc>1 that pickles the whole dataset object, which
    is the failure verl's recipe hit ("cannot pickle '_contextvars.ContextVar'").
    """
    from verl.utils.dataset.rl_dataset import RLHFDataset

    snapshot = tmp_path / "Maxwell-Jia" / "AIME_2024"
    rows = [json.loads(line) for line in (FIXTURES / "aime_2024_maxwell.jsonl").read_text().splitlines()]
    snapshot.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), snapshot / "aime_2024_problems.parquet")
    files = [str(FIXTURES / "dapo_math_17k.jsonl"), str(snapshot)]
    config = data_config(tmp_path, filter_overlong_prompts_workers=2)

    class Ours(_DatasetHoldingAContextVar, dataset_cls()):
        pass

    class Verls(_DatasetHoldingAContextVar, RLHFDataset):
        pass

    dataset = Ours(files, qwen_tokenizer, config)
    truths = [dataset.dataframe[i]["reward_model"]["ground_truth"] for i in range(len(dataset))]
    assert truths == ["385", "30", "-4", "10", "204", "25"]
    sources = {dataset.dataframe[i]["data_source"] for i in range(len(dataset))}
    assert sources == {"dapo_math_17k", "aime_2024"}
    assert "Answer: $Answer" not in dataset[0]["raw_prompt"][0]["content"]

    with pytest.raises(TypeError, match="ContextVar"):
        Verls([str(prepared(tmp_path, "dapo_math_17k.jsonl"))], qwen_tokenizer, config)


def test_filter_overlong_prompts_counts_the_tool_schema(tmp_path, qwen_tokenizer) -> None:
    train = prepared(tmp_path, "dapo_math_17k.jsonl")
    rows = pq.read_table(train).to_pylist()
    lengths = sorted(rollout_prompt_length(qwen_tokenizer, r["prompt"]) for r in rows)
    without_tools = [len(qwen_tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True)) for r in rows]
    limit = lengths[1]
    expected = sum(length <= limit for length in lengths)
    assert 0 < expected < len(rows)
    assert max(without_tools) <= limit  # verl's tool-less count would keep every row
    kept = dataset_cls()([str(train)], qwen_tokenizer, data_config(tmp_path, max_prompt_length=limit))
    assert len(kept) == expected
    assert all(rollout_prompt_length(qwen_tokenizer, kept.dataframe[i]["prompt"]) <= limit for i in range(expected))
    unfiltered = data_config(tmp_path, max_prompt_length=limit, filter_overlong_prompts=False, truncation="left")
    assert len(dataset_cls()([str(train)], qwen_tokenizer, unfiltered)) == 4


def test_max_samples(tmp_path, qwen_tokenizer) -> None:
    train = prepared(tmp_path, "dapo_math_17k.jsonl")
    dataset = dataset_cls()([str(train)], qwen_tokenizer, data_config(tmp_path), max_samples=3)
    assert len(dataset) == 3


def test_rejects_sft_data(tmp_path, qwen_tokenizer) -> None:
    with pytest.raises(ValueError, match="retool_sft_raw data is not RL data"):
        dataset_cls()([str(FIXTURES / "retool_sft_raw.jsonl")], qwen_tokenizer, data_config(tmp_path))
