"""Fast checks of the smoke run's pieces: its shipped inputs, its parsers, its table and its command line."""

from __future__ import annotations

import json
from pathlib import Path

from recipes.smoke import make_data
from recipes.smoke.progress import step_metrics
from recipes.smoke.report import Stage, render_table
from recipes.smoke.sandbox_service import sandbox_counters

METRICS = """# HELP retool_sandbox_requests_total /run_code requests answered, by top-level status.
# TYPE retool_sandbox_requests_total counter
retool_sandbox_requests_total{status="Success"} 7
retool_sandbox_requests_total{status="Failed"} 2
retool_sandbox_requests_total{status="SandboxError"} 1
retool_sandbox_refused_total{code="503"} 3
retool_sandbox_request_duration_seconds_count 10
retool_sandbox_timeouts_total 1
retool_sandbox_rejected_total 3
"""


def test_shipped_inputs_are_what_make_data_writes() -> None:
    """recipes/smoke/data/*.jsonl are reproducible: regenerate with python -m recipes.smoke.make_data."""
    for name, rows in make_data.build().items():
        shipped = (make_data.DATA_DIR / name).read_text()
        assert shipped == make_data.render(rows), f"{name} drifted from make_data.build(); rerun make_data"
    assert (make_data.DATA_DIR / "aime_2025.jsonl").is_file()


def test_inputs_go_through_retool_prepare(tmp_path: Path) -> None:
    """Each shipped input is in a real source schema that retool-prepare detects and converts."""
    from recipes.retool.prepare import main as prepare

    jobs = [
        ("sft", "retool_sft.jsonl", 96),
        ("rl", "dapo_math.jsonl", 32),
        ("val", "smoke_val.jsonl", 6),
        ("val", "aime_2025.jsonl", 2),
    ]
    import pyarrow.parquet as pq

    for command, name, rows in jobs:
        out = tmp_path / f"{name}.parquet"
        assert prepare([command, "--input", str(make_data.DATA_DIR / name), "--output", str(out)]) == 0
        table = pq.read_table(out).to_pylist()
        assert len(table) == rows
    sft = pq.read_table(tmp_path / "retool_sft.jsonl.parquet").to_pylist()[0]
    roles = [m["role"] for m in sft["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"], roles
    call = sft["messages"][1]["tool_calls"][0]["function"]
    assert call["name"] == "code_interpreter" and call["arguments"]["code"].startswith("print(")
    assert sft["messages"][3]["content"] == f"\\boxed{{{sft['messages'][2]['content']}}}"


def test_sft_rows_fit_the_smoke_max_length(tmp_path: Path) -> None:
    """verl's own multi-turn SFT dataset, as the smoke's SFT stage builds it: every row fits SFT_MAX_LENGTH unpadded
    (the stage pads to it and runs with truncation=error, so a longer row would stop the smoke)."""
    from kit_testing import tiny_model_dir
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from recipes.retool.prepare import main as prepare
    from recipes.smoke.commands import SFT_MAX_LENGTH

    out = tmp_path / "sft.parquet"
    assert prepare(["sft", "--input", str(make_data.DATA_DIR / "retool_sft.jsonl"), "--output", str(out)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    config = {"max_length": SFT_MAX_LENGTH, "truncation": "error", "multiturn": {"enable": True}}
    dataset = MultiTurnSFTDataset(str(out), tokenizer, config=config)
    lengths = [int(dataset[i]["attention_mask"].sum()) for i in range(len(dataset))]
    assert max(lengths) <= SFT_MAX_LENGTH, max(lengths)
    # and the bound is not loose: padding is work the trainer does on every step
    assert SFT_MAX_LENGTH - max(lengths) < 32, (SFT_MAX_LENGTH, max(lengths))


def test_sandbox_counters() -> None:
    counters = sandbox_counters(METRICS)
    assert counters == {
        "ok": 7,
        "code_errors": 2,
        "sandbox_errors": 1,
        "refused": 3,
        "timeouts": 1,
        "calls": 10,
        "failures": 4,
    }
    assert sandbox_counters("")["calls"] == 0


def test_step_metrics_merges_lines_of_a_step() -> None:
    text = "step:0 - val-core/a/acc/mean@2:0.0\nstep:1 - critic/score/mean:-1.2 - num_turns/mean:4.0\nstep:1 - x:nan"
    steps = step_metrics(text)
    assert steps[0] == {"val-core/a/acc/mean@2": 0.0}
    assert steps[1]["critic/score/mean"] == -1.2 and steps[1]["num_turns/mean"] == 4.0
    assert steps[1]["x"] != steps[1]["x"]  # nan is kept (and then refused by the RL stage's finiteness check)


def test_render_table() -> None:
    summary = {
        "ok": False,
        "seconds": 12.5,
        "stages": [
            json.loads(json.dumps(Stage("sft", "ok", 10.0, "loss 11.9 -> 0.9").__dict__)),
            Stage("rl", "failed", 2.5, "").__dict__,
        ],
    }
    table = render_table(summary)
    assert "| sft   | ok     | 10.0    | loss 11.9 -> 0.9" in table, table
    assert "| rl    | failed | 2.5" in table and "| total | FAILED | 12.5" in table
