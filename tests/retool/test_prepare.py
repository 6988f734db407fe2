"""``retool-prepare`` (recipes.retool.prepare) on the fixtures in tests/fixtures/retool, one per source schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipes.retool import prepare
from recipes.retool.prompts import PROMPT_TEMPLATE, strip_dapo_instructions
from recipes.retool.schema import RL_COLUMNS, TOOL_SCHEMA

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retool"
DAPO_GT = ["385", "30", "-4", "10"]


def run_cli(*argv: str) -> tuple[int, str]:
    """Run the CLI in-process; returns (exit code, stderr text)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = prepare.main(list(argv))
    return code, err.getvalue()


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def jsonl_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_help() -> None:
    for argv in (["--help"], ["rl", "--help"], ["sft", "--help"], ["val", "--help"]):
        out = subprocess.run([sys.executable, "-m", "recipes.retool.prepare", *argv], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "usage: retool-prepare" in out.stdout
    assert "--input PATH|HUB_ID" in out.stdout and "--output FILE.parquet" in out.stdout


def check_dapo_output(rows: list[dict]) -> None:
    assert [r["reward_model"]["ground_truth"] for r in rows] == DAPO_GT
    for i, row in enumerate(rows):
        assert set(row) == set(RL_COLUMNS)
        assert row["agent_name"] == "tool_agent" and row["ability"] == "MATH"
        assert row["extra_info"]["index"] == i and row["extra_info"]["split"] == "train"
        (message,) = row["prompt"]
        assert message["role"] == "user"
        content = message["content"]
        assert "Answer: $Answer" not in content and "Remember to put your answer" not in content
        assert content == PROMPT_TEMPLATE.replace("{problem}", row["extra_info"]["problem"])
        assert "\\boxed{}" in content and "'The final answer goes here.'" not in content


def test_rl_from_dapo_jsonl_dedups_and_rewraps(tmp_path) -> None:
    out = tmp_path / "rl.parquet"
    code, log = run_cli("rl", "--input", str(FIXTURES / "dapo_math_17k.jsonl"), "--output", str(out))
    assert code == 0, log
    rows = read_rows(out)
    check_dapo_output(rows)
    assert rows[0]["data_source"] == "dapo_math_17k"
    assert rows[0]["extra_info"]["problem"] == "What is the sum of the squares of the first $10$ positive integers?"
    assert rows[0]["extra_info"]["source_id"] == "1b7e0c2a-0001-4d1e-9a55-0000000000a1"
    assert "rows read: 12; invalid skipped: 0; unique prompts: 4; duplicates dropped: 8" in log
    assert "prompts with conflicting answers: 1 (kept the first answer)" in log
    assert "wrote 4 rows" in log


def test_rl_options(tmp_path) -> None:
    src = str(FIXTURES / "dapo_math_17k.jsonl")
    assert run_cli("rl", "--input", src, "--output", str(tmp_path / "a.parquet"), "--drop-conflicting")[0] == 0
    assert [r["reward_model"]["ground_truth"] for r in read_rows(tmp_path / "a.parquet")] == DAPO_GT[:3]
    assert run_cli("rl", "--input", src, "--output", str(tmp_path / "b.parquet"), "--no-dedup")[0] == 0
    assert len(read_rows(tmp_path / "b.parquet")) == 12
    assert (
        run_cli("rl", "--input", src, "--output", str(tmp_path / "c.parquet"), "--limit", "5", "--data-source", "x")[0]
        == 0
    )
    rows = read_rows(tmp_path / "c.parquet")
    assert len(rows) == 4 and {r["data_source"] for r in rows} == {"x"}


def test_rl_from_parquet_file_hub_snapshot_folder_and_save_to_disk(tmp_path) -> None:
    import datasets

    rows = jsonl_rows("dapo_math_17k.jsonl")
    parquet = write_parquet(tmp_path / "dapo.parquet", rows)
    snapshot = tmp_path / "DAPO-Math-17k"
    write_parquet(snapshot / "data" / "train-00000-of-00001.parquet", rows)
    write_parquet(snapshot / "data" / "test-00000-of-00001.parquet", rows[:1])  # another split: must be ignored
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    for source in (parquet, snapshot, saved):
        out = tmp_path / f"{source.name}.out.parquet"
        code, log = run_cli("rl", "--input", str(source), "--output", str(out))
        assert code == 0, log
        check_dapo_output(read_rows(out))


def test_rl_from_hub_id_goes_through_datasets(tmp_path, monkeypatch) -> None:
    """No network here: the hub call is intercepted, proving the id (and split) reach datasets.load_dataset."""
    import datasets

    calls = []

    def fake_load_dataset(name, split=None, **kwargs):
        calls.append((name, split))
        return datasets.Dataset.from_list(jsonl_rows("dapo_math_17k.jsonl"))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")
    out = tmp_path / "hub.parquet"
    code, log = run_cli("rl", "--input", "BytedTsinghua-SIA/DAPO-Math-17k", "--output", str(out))
    assert code == 0, log
    assert calls == [("BytedTsinghua-SIA/DAPO-Math-17k", "train")]
    check_dapo_output(read_rows(out))


def test_progress_and_dedup_at_scale(tmp_path, monkeypatch) -> None:
    """Many batches: progress lines appear, and a block repeated 5,000 times collapses to its 4 prompts."""
    block = jsonl_rows("dapo_math_17k.jsonl")[:4]
    table = pa.Table.from_pylist(block)
    parquet = tmp_path / "big.parquet"
    pq.write_table(pa.concat_tables([table] * 5000), parquet, row_group_size=4096)
    monkeypatch.setattr(prepare, "PROGRESS_EVERY_S", 0.0)
    code, log = run_cli("rl", "--input", str(parquet), "--output", str(tmp_path / "out.parquet"))
    assert code == 0, log
    progress = [line for line in log.splitlines() if "rows in" in line and "/20,000" in line]
    assert len(progress) >= 3 and "read 20,000/20,000 (100%)" in progress[-1]
    assert "unique prompts: 4; duplicates dropped: 19,996" in log
    assert len(read_rows(tmp_path / "out.parquet")) == 4


@pytest.mark.parametrize(
    ("fixture", "data_source", "answers"),
    [
        ("aime_2024_maxwell.jsonl", "aime_2024", ["204", "25"]),
        ("aime_2024_dapo.jsonl", "aime_2024", ["204", "25"]),
        ("aime_2025.jsonl", "aime_2025", ["70", "117"]),
    ],
)
def test_val_sources(tmp_path, fixture: str, data_source: str, answers: list[str]) -> None:
    out = tmp_path / "val.parquet"
    code, log = run_cli("val", "--input", str(FIXTURES / fixture), "--output", str(out))
    assert code == 0, log
    rows = read_rows(out)
    assert [r["reward_model"]["ground_truth"] for r in rows] == answers
    assert {r["data_source"] for r in rows} == {data_source}
    assert {r["extra_info"]["split"] for r in rows} == {"test"}
    for row in rows:
        assert row["prompt"][0]["content"] == PROMPT_TEMPLATE.replace("{problem}", row["extra_info"]["problem"])
        assert "Answer:" not in row["extra_info"]["problem"]


def test_format_is_detected_or_forced(tmp_path) -> None:
    out = str(tmp_path / "o.parquet")
    code, log = run_cli(
        "val", "--input", str(FIXTURES / "aime_2025.jsonl"), "--output", out, "--format", "aime_maxwell"
    )
    assert code == 2 and "aime_2025.jsonl: row 1: field 'Answer'" in log
    code, log = run_cli("sft", "--input", str(FIXTURES / "dapo_math_17k.jsonl"), "--output", out)
    assert code == 2 and "dapo data cannot be used for `sft`" in log
    code, log = run_cli("rl", "--input", str(FIXTURES / "retool_sft_raw.jsonl"), "--output", out)
    assert code == 2 and "retool_sft_raw data cannot be used for `rl`" in log
    assert not (tmp_path / "o.parquet").exists()


def test_errors_name_file_row_and_field(tmp_path) -> None:
    rows = jsonl_rows("dapo_math_17k.jsonl")
    del rows[2]["reward_model"]["ground_truth"]
    bad = write_jsonl(tmp_path / "dapo_bad.jsonl", rows)
    out = tmp_path / "out.parquet"
    code, log = run_cli("rl", "--input", str(bad), "--output", str(out))
    assert code == 2
    assert f"{bad}: row 3: field 'reward_model.ground_truth'" in log

    rows = jsonl_rows("dapo_math_17k.jsonl")
    rows[5]["prompt"] = [{"role": "user", "content": ""}]
    code, log = run_cli("rl", "--input", str(write_parquet(tmp_path / "p.parquet", rows)), "--output", str(out))
    assert code == 2 and "p.parquet: row 6: field 'prompt[].content'" in log

    (tmp_path / "broken.jsonl").write_text('{"problem": "x", "answer": "1"}\n{"problem": \n')
    code, log = run_cli("val", "--input", str(tmp_path / "broken.jsonl"), "--output", str(out))
    assert code == 2 and "broken.jsonl: row 2: field '<line>': invalid JSON on line 2" in log

    sft = jsonl_rows("retool_sft_raw.jsonl")
    sft[1]["messages"][1]["content"] = sft[1]["messages"][1]["content"].replace("<interpreter>\n2\n</interpreter>", "")
    code, log = run_cli("sft", "--input", str(write_jsonl(tmp_path / "sft.jsonl", sft)), "--output", str(out))
    assert code == 2 and "sft.jsonl: row 2: field 'messages[1].content': code block at char" in log
    assert not out.exists()

    code, log = run_cli("val", "--input", str(tmp_path / "missing.jsonl"), "--output", str(out))
    assert code == 2 and "no such file or folder" in log


def test_skip_invalid(tmp_path) -> None:
    rows = jsonl_rows("aime_2025.jsonl")
    rows.insert(1, {"problem": "no answer here", "answer": None, "id": 9})
    out = tmp_path / "out.parquet"
    code, log = run_cli(
        "val", "--input", str(write_jsonl(tmp_path / "a.jsonl", rows)), "--output", str(out), "--skip-invalid"
    )
    assert code == 0 and "invalid skipped: 1" in log and "row 2: field 'answer'" in log
    assert [r["reward_model"]["ground_truth"] for r in read_rows(out)] == ["70", "117"]


def test_failed_run_leaves_old_output_and_no_temp_files(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out.parquet"
    out.write_text("previous good file")
    rows = jsonl_rows("aime_2025.jsonl")
    rows[1]["answer"] = ""
    bad = str(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert run_cli("val", "--input", bad, "--output", str(out), "--force")[0] == 2  # --force: replace it (issue 52)
    assert out.read_text() == "previous good file"

    def broken_write(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken_write)
    with pytest.raises(OSError, match="disk full"):
        run_cli("val", "--input", str(FIXTURES / "aime_2025.jsonl"), "--output", str(out), "--force")
    assert out.read_text() == "previous good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "out.parquet"]


def test_sft_from_raw_retool_sft(tmp_path) -> None:
    out = tmp_path / "sft.parquet"
    code, log = run_cli("sft", "--input", str(FIXTURES / "retool_sft_raw.jsonl"), "--output", str(out))
    assert code == 0, log
    assert "conversations: 2" in log and "tool turns: 3" in log
    rows = read_rows(out)
    first = rows[0]["messages"]
    assert [m["role"] for m in first] == ["user", "assistant", "tool", "assistant"]
    assert first[0]["content"] == PROMPT_TEMPLATE.replace(
        "{problem}", "Find the greatest integer less than $\\sqrt{10} + \\sqrt{80}$."
    )
    assert first[1]["content"] == "Let me estimate both square roots numerically."
    assert first[1]["tool_calls"] == [
        {
            "type": "function",
            "function": {
                "name": "code_interpreter",
                "arguments": {"code": "import math\nprint(math.sqrt(10) + math.sqrt(80))"},
            },
        }
    ]
    assert first[2]["content"] == "12.106335201775947"
    assert "<answer>" not in first[3]["content"] and first[3]["content"].endswith("\\boxed{12}")
    assert [m["role"] for m in rows[1]["messages"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert rows[0]["tools"] == [TOOL_SCHEMA]


def test_sft_keep_prompts(tmp_path) -> None:
    out = tmp_path / "sft.parquet"
    src = FIXTURES / "retool_sft_raw.jsonl"
    assert run_cli("sft", "--input", str(src), "--output", str(out), "--keep-prompts")[0] == 0
    assert read_rows(out)[0]["messages"][0]["content"] == jsonl_rows(src.name)[0]["messages"][0]["content"]


def test_sft_from_multiturn_with_string_or_dict_arguments(tmp_path) -> None:
    rows = jsonl_rows("retool_sft_multiturn.jsonl")
    assert isinstance(rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"], str)
    as_dicts = json.loads(json.dumps(rows))
    for row in as_dicts:
        row["tools"] = json.loads(row["tools"])
        for message in row["messages"]:
            for call in message["tool_calls"] or []:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    outputs = []
    for name, data in (("strings", rows), ("dicts", as_dicts)):
        out = tmp_path / f"{name}.parquet"
        code, log = run_cli("sft", "--input", str(write_jsonl(tmp_path / f"{name}.jsonl", data)), "--output", str(out))
        assert code == 0, log
        outputs.append(read_rows(out))
    assert outputs[0] == outputs[1]
    second = outputs[0][1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert second[3]["tool_calls"][0]["function"]["arguments"] == {"code": "[pow(2, k, 7) for k in range(1, 7)]"}
    assert "Remember to place the final answer" not in second[0]["content"]
    assert "What is the remainder when $2^{100}$ is divided by $7$?" in second[0]["content"]


def test_sft_multiturn_validation(tmp_path) -> None:
    rows = jsonl_rows("retool_sft_multiturn.jsonl")
    rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    code, log = run_cli("sft", "--input", str(write_jsonl(tmp_path / "m.jsonl", rows)), "--output", str(tmp_path / "o"))
    assert (
        code == 2 and "m.jsonl: row 1: field 'messages[1].tool_calls[0].arguments': arguments are not valid JSON" in log
    )
    rows = jsonl_rows("retool_sft_multiturn.jsonl")
    del rows[1]["messages"][2]  # a tool call with no tool turn
    code, log = run_cli("sft", "--input", str(write_jsonl(tmp_path / "n.jsonl", rows)), "--output", str(tmp_path / "o"))
    assert code == 2 and "n.jsonl: row 2: field 'messages[2]': assistant turn where a tool turn was expected" in log


def test_sft_output_renders_in_verl_multiturn_sft_dataset(tmp_path, qwen_tokenizer) -> None:
    """verl's SFT dataset trains on exactly the assistant turns, tool calls included, not on tool output."""
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    out = tmp_path / "sft.parquet"
    assert run_cli("sft", "--input", str(FIXTURES / "retool_sft_raw.jsonl"), "--output", str(out))[0] == 0
    dataset = MultiTurnSFTDataset(str(out), qwen_tokenizer, config={"max_length": 2048, "multiturn": {"enable": True}})
    item = dataset[1]
    trained = qwen_tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
    assert (
        '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(pow(2, 100, 7))"}}\n</tool_call>'
        in trained
    )
    assert trained.rstrip().endswith("\\boxed{2}<|im_end|>")
    assert "[2, 4, 1, 2, 4, 1] 1" not in trained  # interpreter output is context, not a target
    full = qwen_tokenizer.decode(item["input_ids"][item["attention_mask"].bool()])
    assert "<tool_response>\n[2, 4, 1, 2, 4, 1] 1\n</tool_response>" in full


def test_dapo_instruction_stripping() -> None:
    text = jsonl_rows("dapo_math_17k.jsonl")[0]["prompt"][0]["content"]
    assert strip_dapo_instructions(text) == (
        "What is the sum of the squares of the first $10$ positive integers?",
        True,
    )
    assert strip_dapo_instructions("Just a problem.") == ("Just a problem.", False)


def test_detect_format_and_data_source_names() -> None:
    from recipes.retool.sources import SchemaError, default_data_source, detect_format

    assert detect_format(["data_source", "prompt", "ability", "reward_model", "extra_info"]) == "dapo"
    assert detect_format(["data_source", "prompt", "reward_model", "agent_name", "extra_info"]) == "retool_rl"
    assert detect_format(["ID", "Problem", "Solution", "Answer"]) == "aime_maxwell"
    assert detect_format(["id", "problem", "answer", "solution", "url", "year"]) == "problem_answer"
    assert detect_format(["messages", "tools"]) == "sft_multiturn"
    assert detect_format(["messages"]) == "retool_sft_raw"
    with pytest.raises(SchemaError, match="unrecognised columns"):
        detect_format(["question", "label"])
    assert default_data_source("dapo", "BytedTsinghua-SIA/DAPO-Math-17k") == "dapo_math_17k"
    assert default_data_source("dapo", "BytedTsinghua-SIA/AIME-2024") == "aime_2024"
    assert default_data_source("aime_maxwell", "/data/Maxwell-Jia/AIME_2024/") == "aime_2024"
    assert default_data_source("problem_answer", "yentinglin/aime_2025") == "aime_2025"
    assert default_data_source("problem_answer", "/data/my-set.jsonl") == "my_set"
