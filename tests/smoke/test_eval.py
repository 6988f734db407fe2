"""``retool-eval`` on a hand-made verl validation dump: every number below is computed by hand in the comments.

The dump is in verl 0.6.1's ``_dump_generations`` layout (``input``, ``output``, ``gts``, ``score``, ``step`` plus
the kit reward's extra keys), without ``data_source`` (verl does not dump it): sources come from ``--data``. It has
no ``acc_strict`` (a dump from before the reward reported it), so the strict accuracy is computed from ``output``
with verl's math_dapo; ``test_eval_reads_the_dumped_strict_accuracy`` covers a dump that has it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.retool.evaluate import main, parse_tool_calls, pass_at_k
from recipes.retool.prompts import build_prompt

CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(3 * 4)"}}\n</tool_call>'
BAD_CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": \n</tool_call>'
TRACEBACK = 'Traceback (most recent call last):\n  File "<stdin>", line 1\nNameError: name "x" is not defined'


def _input(problem: str) -> str:
    """What verl dumps as ``input``: the chat prompt decoded with skip_special_tokens=True."""
    return f"system\nYou are Qwen.\n\n# Tools\n...\nuser\n{build_prompt(problem)}\nassistant\n"


def _tool_turn(output: str) -> str:
    return f"{CALL}user\n<tool_response>\n{output}\n</tool_response>assistant\n"


P1, P2, P3 = "What is $3 \\times 4$?", "Compute $4 + 5$.", "Find $x$ with $x^2 = 49$, $x > 0$."

# (problem, response, ground truth, acc, pred, tool_rounds)
RECORDS = [
    # P1 (source arith): right, wrong, wrong, right -> n=4, c=2; preds 12, 13, 13, 12: tie -> "12" (first) -> maj ok
    # strict (verl's math_dapo): the last answer's spaces make it wrong -> 1/4
    (P1, _tool_turn("12") + "\\boxed{12}", "12", True, "12", 1),
    (P1, _tool_turn(TRACEBACK) + "\\boxed{13}", "12", False, "13", 1),
    (P1, BAD_CALL + "\\boxed{13}", "12", False, "13", 0),
    (P1, "\\boxed{ 12 }", "12", True, "12", 0),
    # P2 (source arith): c=1 (strict too); preds 7, 7, -, 9 -> majority "7" -> wrong
    (P2, "\\boxed{7}", "9", False, "7", 0),
    (P2, _tool_turn("[timed out after 30 s]") + "\\boxed{7}", "9", False, "7", 1),
    (P2, "no idea", "9", False, "", 0),
    (P2, _tool_turn("9") + "\\boxed{9}", "9", True, "9", 1),
    # P3 (source aime): c=0, no answers
    (P3, "hmm", "7", False, "", 0),
    (P3, "hmm", "7", False, "", 0),
    (P3, "hmm", "7", False, "", 0),
    (P3, "hmm", "7", False, "", 0),
]


def _write_dump(folder: Path, step: int, records: list[tuple]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for problem, output, gt, acc, pred, rounds in records:
        score = (1.0 if acc else -1.0) - (0.4 if rounds == 0 else 0.0)
        lines.append(
            json.dumps(
                {
                    "input": _input(problem),
                    "output": output,
                    "gts": gt,
                    "score": score,
                    "step": step,
                    "reward": score,
                    "acc": acc,
                    "pred": pred,
                    "has_answer": bool(pred),
                    "tool_rounds": rounds,
                    "used_tool": rounds > 0,
                    "num_turns": 2 + 2 * rounds,
                }
            )
        )
    path = folder / f"{step}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_val_parquet(path: Path, problems: list[str], data_source: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"data_source": data_source, "prompt": [{"role": "user", "content": build_prompt(p)}], "ability": "MATH"}
        for p in problems
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def dump(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "val_generations"
    _write_dump(folder, 0, [(p, "x", gt, False, "", 0) for p, _, gt, *_ in RECORDS])  # an earlier, all-wrong step
    _write_dump(folder, 3, RECORDS)
    return {
        "folder": folder,
        "arith": _write_val_parquet(tmp_path / "arith.parquet", [P1, P2], "arith"),
        "aime": _write_val_parquet(tmp_path / "aime.parquet", [P3], "aime"),
    }


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)  # 1 - C(2,1)/C(4,1) = 1 - 2/4
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 2, 4) == 1.0  # n - c < k: every 4-subset holds a correct one
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(16, 3, 8) == pytest.approx(1 - math.comb(13, 8) / math.comb(16, 8))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_parse_tool_calls_matches_verl_hermes_rules() -> None:
    assert parse_tool_calls(CALL, "code_interpreter") == (1, 1)
    assert parse_tool_calls(BAD_CALL, "code_interpreter") == (1, 0)  # JSON cut off
    other = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    assert parse_tool_calls(other, "code_interpreter") == (1, 0)  # not our tool
    assert parse_tool_calls(other, None) == (1, 1)  # verl's parser alone accepts it
    assert parse_tool_calls("<tool_call>\n{}", "code_interpreter") == (0, 0)  # never closed


def test_eval_numbers_per_source_and_problem(dump: dict[str, Path], tmp_path: Path) -> None:
    out_json, out_md = tmp_path / "eval.json", tmp_path / "eval.md"
    rc = main(
        [str(dump["folder"]), "--data", str(dump["arith"]), "--data", str(dump["aime"])]
        + ["--json", str(out_json), "--markdown", str(out_md)]
    )
    assert rc == 0
    report = json.loads(out_json.read_text())
    assert report["steps"] == [3], "the default is the last step's dump"
    assert report["samples"] == 12 and report["unmatched"] == 0
    arith, aime = report["sources"]["arith"], report["sources"]["aime"]
    assert report["ks"] == {"arith": [1, 2, 4], "aime": [1, 2, 4]}
    assert arith["problems"] == 2 and arith["samples"] == 8 and arith["n"] == 4
    assert arith["mean@4"] == pytest.approx((2 / 4 + 1 / 4) / 2)  # 0.375
    assert arith["strict_mean@4"] == pytest.approx((1 / 4 + 1 / 4) / 2)  # 0.25: P1's "\\boxed{ 12 }" fails math_dapo
    assert arith["best@4"] == pytest.approx(1.0)
    assert arith["maj@4"] == pytest.approx(0.5)  # P1 vote "12" (tie, first seen) right; P2 vote "7" wrong
    assert arith["pass@1"] == pytest.approx((0.5 + 0.25) / 2)
    assert arith["pass@2"] == pytest.approx((5 / 6 + 0.5) / 2)
    assert arith["pass@4"] == pytest.approx(1.0)
    assert {aime[k] for k in ("mean@4", "strict_mean@4", "best@4", "maj@4", "pass@1", "pass@2", "pass@4")} == {0.0}

    tool = report["tool_use"]
    assert tool["tool_calls"] == 5  # 4 well-formed calls (P1 #1, #2, P2 #2, #4) + the cut-off one
    assert tool["tool_calls_well_formed"] == 4
    assert tool["tool_rounds"] == 4 and tool["tool_rounds_per_response"] == pytest.approx(4 / 12)
    assert tool["responses_with_tool"] == 4
    assert tool["code_errors"] == 1 and tool["timeouts"] == 1 and tool["sandbox_failures"] == 0
    assert arith["tool_use"]["tool_rounds_per_response"] == pytest.approx(4 / 8)

    problems = {p["problem"]: p for p in report["problems"]}
    assert set(problems) == {P1, P2, P3}, "the kit's prompt template is stripped back to the problem"
    p1 = problems[P1]
    assert (p1["n"], p1["correct"], p1["majority_answer"], p1["maj@4"]) == (4, 2, "12", 1.0)
    assert (p1["correct_strict"], p1["strict_mean@4"]) == (1, 0.25)
    assert p1["pass@2"] == pytest.approx(5 / 6)
    assert problems[P2]["majority_answer"] == "7" and problems[P2]["maj@4"] == 0.0

    markdown = out_md.read_text()
    assert "| arith | 2 | 8 | 0.375 | 0.250 | 0.500 | 1.000 | 0.375 | 0.667 | 1.000 |" in markdown, markdown
    assert "| data source | problems | samples | mean@4 | strict mean@4 | maj@4 |" in markdown
    assert "| 2/4 | 1/4 | 12 |" in markdown  # P1: correct/n, strict/n, majority
    assert "## Per problem" in markdown and "What is $3 \\times 4$?" in markdown


def test_eval_step_selection_and_unmatched_sources(dump: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    assert main([str(dump["folder"]), "--step", "0", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["steps"] == [0] and list(report["sources"]) == ["all"]
    assert report["sources"]["all"]["mean@4"] == 0.0 and report["sources"]["all"]["problems"] == 3
    markdown = tmp_path / "e.md"
    assert main([str(dump["folder"]), "--step", "0", "--markdown", str(markdown)]) == 0
    tool_table = markdown.read_text().split("## Tool use")[1].split("## Per problem")[0]
    assert [line.split("|")[1].strip() for line in tool_table.splitlines() if line.startswith("| all")] == ["all"]
    assert main([str(dump["folder"]), "--all-steps", "--json", str(out), "--quiet", "--k", "1,3", "--force"]) == 0
    report = json.loads(out.read_text())
    assert report["steps"] == [0, 3] and report["samples"] == 24
    assert report["ks"]["all"] == [1, 3]
    # with --data only for arith, P3's samples stay unmatched
    assert main([str(dump["folder"]), "--data", str(dump["arith"]), "--json", str(out), "--quiet", "--force"]) == 0
    report = json.loads(out.read_text())
    assert report["unmatched"] == 4 and set(report["sources"]) == {"arith", "all"}
    assert main([str(dump["folder"]), "--step", "7", "--quiet"]) == 2


def test_eval_reads_the_dumped_strict_accuracy(tmp_path: Path) -> None:
    """A dump from the current reward carries ``acc_strict``: it is read, not recomputed from the output."""
    folder = tmp_path / "dump"
    path = _write_dump(folder, 5, RECORDS[:4])
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, strict in zip(records, [False, False, False, True], strict=True):  # not what math_dapo would say
        record["acc_strict"] = strict
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "e.json"
    assert main([str(folder), "--json", str(out), "--quiet"]) == 0
    source = json.loads(out.read_text())["sources"]["all"]
    assert source["mean@4"] == 0.5 and source["strict_mean@4"] == 0.25


def test_eval_generic_file_uses_the_kit_verifier(tmp_path: Path) -> None:
    """A generations file with other field names and no ``acc``: answers are checked as the reward checks them."""
    path = tmp_path / "gen.jsonl"
    rows = [
        {"prompt": "q1", "response": "so \\boxed{42}", "ground_truth": "42", "data_source": "d"},
        {"prompt": "q1", "response": "\\boxed{42.0}", "ground_truth": "42", "data_source": "d"},
        {"prompt": "q1", "response": "\\boxed{41}", "ground_truth": "42", "data_source": "d"},
        {"prompt": "q2", "response": "nothing", "ground_truth": "1", "data_source": "d"},
        {"prompt": "q2", "response": "\\boxed{1}", "ground_truth": "1", "data_source": "d"},
        {"prompt": "q2", "response": "\\boxed{2}", "ground_truth": "1", "data_source": "d"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "e.json"
    assert main([str(path), "--json", str(out), "--quiet"]) == 0
    d = json.loads(out.read_text())["sources"]["d"]
    assert d["n"] == 3 and d["mean@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert d["strict_mean@3"] == pytest.approx((1 / 3 + 1 / 3) / 2)  # "\\boxed{42.0}" is wrong for math_dapo
    # q1: "42" and "42.0" are one answer in the kit's canonical form (2 votes) -> right; q2: "1" vs "2" tie -> "1",
    # seen first -> right
    assert d["maj@3"] == pytest.approx(1.0)
    assert d["pass@1"] == pytest.approx(0.5) and d["pass@3"] == pytest.approx(1.0)
    q1 = next(p for p in json.loads(out.read_text())["problems"] if p["problem"] == "q1")
    assert q1["majority_answer"] == "42" and q1["correct"] == 2


def test_eval_cli_help_and_console_script() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.retool.evaluate", "--help"],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0 and "pass@k" in proc.stdout and "--data" in proc.stdout


TOKEN_TEXTS = [
    "",
    " a leading space, then  two",
    CALL + "user\n<tool_response>\n12\n</tool_response>assistant\nThe answer is \\boxed{12}.",
    "ünïcødé 数学 \t\n  x = 3^{2}",
    "<|im_end|><|im_start|>assistant\n<think>\n\n</think>",
    TRACEBACK,
]


def test_token_counter_counts_as_transformers_does_without_importing_it(tmp_path: Path) -> None:
    """``--tokenizer FOLDER`` counts each response's tokens with the ``tokenizers`` library when the folder has a
    ``tokenizer.json``: the same counts as transformers' tokenizer (special tokens left out), and neither
    transformers nor torch imported (their import was most of the learning check's eval stage)."""
    from kit_testing import tiny_model_dir
    from transformers import AutoTokenizer

    from recipes.retool.evaluate import token_counter

    folder = tiny_model_dir()
    reference = AutoTokenizer.from_pretrained(str(folder))
    count = token_counter(str(folder))
    expected = [len(reference(text, add_special_tokens=False).input_ids) for text in TOKEN_TEXTS]
    assert [count(text) for text in TOKEN_TEXTS] == expected
    assert expected[2] > 10  # the tool call's text, not a fluke of empty strings
    probe = (
        "import sys\nfrom recipes.retool.evaluate import token_counter\n"
        f"print(token_counter({str(folder)!r})('x = 1'), 'transformers' in sys.modules, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=kit_env(), cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1:] == ["False", "False"], proc.stdout


def test_token_counter_falls_back_to_transformers_without_a_tokenizer_json(tmp_path: Path) -> None:
    """A folder without ``tokenizer.json`` goes to transformers' AutoTokenizer, whose refusal is the CLI's error."""
    from platforms.cli_errors import UsageError
    from recipes.retool.evaluate import token_counter

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="cannot load a tokenizer"):
        token_counter(str(tmp_path))
