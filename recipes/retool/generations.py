"""Read ReTool generations (verl validation dumps or any JSONL) into :class:`Sample` records for ``retool-eval``.

Input records (one JSON object per line): verl's dump (``input``, ``output``, ``gts``, ``score``, ``step`` plus the
reward's extra keys ``acc``, ``acc_strict``, ``pred``, ``tool_rounds``, ``num_turns`` …) or any file with the same
meaning under common names (``prompt``/``question``, ``response``/``generation``, ``ground_truth``/``answer``,
``data_source``). A record without ``acc`` is checked with the kit's verifier as the reward does; one without
``acc_strict`` (dumps written before the reward reported it, or other tools' files) with verl's ``math_dapo`` strict
rule (:mod:`recipes.retool.strict`), so older runs can be rescored the way the published numbers were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platforms.cli_errors import MissingPathError, UsageError
from recipes.retool.tool_output import response_outcomes

INPUT_KEYS = ("input", "prompt", "question", "problem")
OUTPUT_KEYS = ("output", "response", "generation", "completion")
TRUTH_KEYS = ("gts", "ground_truth", "answer", "gt")

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str, tool_name: str | None = None) -> tuple[int, int]:
    """``(blocks, well_formed)``: ``<tool_call>…</tool_call>`` blocks in ``text``, and how many verl would run.

    Well-formed as verl 0.6.1's ``HermesToolParser`` decides (JSON with ``name`` and ``arguments``), and, when
    ``tool_name`` is given, naming that tool with a non-empty string ``code`` argument (what the kit's tool needs).
    """
    blocks = _TOOL_CALL.findall(text)
    good = 0
    for block in blocks:
        try:
            call = json.loads(block)
            name, arguments = call["name"], call["arguments"]
        except (ValueError, KeyError, TypeError):
            continue
        if tool_name is not None:
            code = arguments.get("code") if isinstance(arguments, dict) else None
            if name != tool_name or not isinstance(code, str) or not code.strip():
                continue
        good += 1
    return len(blocks), good


@dataclass
class Sample:
    """One generation with what the metrics need (``correct``: the kit's verifier; ``correct_strict``: verl's)."""

    prompt: str
    response: str
    ground_truth: str
    correct: bool
    pred: str
    correct_strict: bool
    data_source: str = "all"
    step: int | None = None
    tool_calls: int = 0
    tool_calls_ok: int = 0
    tool_rounds: int = 0
    code_errors: int = 0
    timeouts: int = 0
    sandbox_failures: int = 0
    length_chars: int = 0
    length_tokens: int | None = None


def _first(record: dict[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in record and record[key] is not None:
            return record[key]
    return None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _tool_stats(response: str) -> dict[str, int]:
    outcomes = response_outcomes(response)
    return {
        "tool_responses": len(outcomes),
        "code_errors": outcomes.count("code_error"),
        "timeouts": outcomes.count("timeout"),
        "sandbox_failures": outcomes.count("sandbox_failure"),
    }


def tool_rounds(record: dict[str, Any]) -> int:
    """A dumped record's tool rounds: the reward's ``tool_rounds`` where the trainer dumped it, else the
    ``<tool_response>`` blocks of its response (verl 0.9.1's V1 trainer dumps a training rollout with its uid only,
    no reward extras: verl/trainer/ppo/v1/trainer_base.py:1331)."""
    rounds = record.get("tool_rounds")
    if rounds is not None:
        return int(rounds)
    return _tool_stats(str(_first(record, OUTPUT_KEYS) or ""))["tool_responses"]


def _check_answer(response: str, ground_truth: str) -> tuple[bool, str]:
    """The kit's answer check (what the reward does), without math-verify's subprocess (timeout 0)."""
    from recipes.retool.answer import canonical, extract_answer
    from recipes.retool.verify import judge

    answer = extract_answer(response)
    return judge(answer, ground_truth, timeout_s=0).correct, canonical(answer) if answer is not None else ""


def to_sample(record: dict[str, Any], tool_name: str | None = "code_interpreter") -> Sample:
    """A :class:`Sample` from one record of a verl dump or a generic generations file."""
    prompt = _first(record, INPUT_KEYS)
    if isinstance(prompt, list):  # chat messages
        prompt = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    response = str(_first(record, OUTPUT_KEYS) or "")
    truth = _first(record, TRUTH_KEYS)
    if isinstance(truth, dict):  # reward_model column
        truth = truth.get("ground_truth")
    truth_text = "" if truth is None else str(truth)
    if "acc" in record or "correct" in record:
        correct = _as_bool(record.get("acc", record.get("correct")))
        pred = str(record.get("pred") or "")
        if not pred and "pred" not in record:
            pred = _check_answer(response, truth_text)[1]
    else:
        correct, pred = _check_answer(response, truth_text)
    if "acc_strict" in record:
        correct_strict = _as_bool(record["acc_strict"])
    else:
        from recipes.retool.strict import strict_verdict

        correct_strict = strict_verdict(response, truth_text).correct
    calls, calls_ok = parse_tool_calls(response, tool_name)
    stats = _tool_stats(response)
    step = record.get("step")
    return Sample(
        prompt=str(prompt or ""),
        response=response,
        ground_truth=truth_text,
        correct=correct,
        pred=pred,
        correct_strict=correct_strict,
        data_source=str(record.get("data_source") or "all"),
        step=int(step) if step is not None else None,
        tool_calls=calls,
        tool_calls_ok=calls_ok,
        tool_rounds=tool_rounds(record),
        code_errors=stats["code_errors"],
        timeouts=stats["timeouts"],
        sandbox_failures=stats["sandbox_failures"],
        length_chars=len(response),
    )


def dump_files(path: Path, step: int | None = None, all_steps: bool = False) -> list[Path]:
    """The JSONL files to read: ``path`` itself, or in a dump folder the last step's ``<step>.jsonl`` (or all)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingPathError(f"{path}: no such file or folder")
    numbered = sorted((int(p.stem), p) for p in path.glob("*.jsonl") if p.stem.isdigit())
    if not numbered:
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise MissingPathError(f"{path}: no .jsonl files")
        return files
    if all_steps:
        return [p for _, p in numbered]
    if step is not None:
        chosen = [p for s, p in numbered if s == step]
        if not chosen:
            raise MissingPathError(f"{path}: no dump of step {step} (have {', '.join(str(s) for s, _ in numbered)})")
        return chosen
    return [numbered[-1][1]]


def _jsonl_text(file: Path) -> str:
    """A generations file's text. A parquet (a validation file given where the dumps go) or any other binary file is
    named in one line: decoding it would end in a UnicodeDecodeError traceback."""
    data = file.read_bytes()
    if data[:4] == b"PAR1":
        raise UsageError(
            f"{file} is a parquet file, not JSONL generations",
            "give a dump folder (trainer.validation_data_dir) or a .jsonl file; a validation parquet goes with --data",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{file}: not a UTF-8 text file (byte {exc.start})", "give a dump folder or a .jsonl file of generations"
        ) from None


def read_records(files: Iterable[Path]) -> list[dict[str, Any]]:
    """Every JSON object of the files; a bad line is named by file and line number (counted from 1, as editors do)."""
    records = []
    for file in files:
        for lineno, line in enumerate(_jsonl_text(file).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise UsageError(f"{file}: line {lineno}: not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise UsageError(f"{file}: line {lineno}: expected a JSON object")
            records.append(record)
    return records


def _index_rows(file: Path) -> list[dict[str, Any]]:
    """The ``prompt`` and ``data_source`` columns of one ``--data`` file. A missing file, a folder, a file that is
    not parquet (a log, a JSONL) or a parquet without those columns is the user's input: one line, exit 2, not
    pyarrow's traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not file.exists():
        raise MissingPathError(f"--data {file}: no such file", "give the RL/val parquet that retool-prepare wrote")
    if not file.is_file():
        raise UsageError(f"--data {file} is a folder, not a parquet file", "name the parquet file in it")
    try:
        names = pq.read_schema(file).names
    except (pa.ArrowException, OSError):
        raise UsageError(
            f"--data {file}: not a readable parquet file", "give the RL/val parquet that retool-prepare wrote"
        ) from None
    missing = [name for name in ("prompt", "data_source") if name not in names]
    if missing:
        raise UsageError(
            f"--data {file} has no {' or '.join(missing)} column: not an RL/val parquet",
            "give a parquet that retool-prepare rl|val wrote",
        )
    return pq.read_table(file, columns=["prompt", "data_source"]).to_pylist()


def data_source_index(parquets: Sequence[Path]) -> list[tuple[str, str]]:
    """``(user prompt text, data_source)`` of every row of the RL/val parquet files, longest prompt first."""
    pairs = []
    for file in parquets:
        for row in _index_rows(file):
            prompt = row["prompt"]
            if isinstance(prompt, str):  # a plain-text prompt column: the user's text itself
                prompt = [{"role": "user", "content": prompt}]
            users = [m.get("content", "") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
            if users and users[-1]:
                pairs.append((users[-1].strip(), str(row["data_source"])))
    return sorted(pairs, key=lambda p: -len(p[0]))


def assign_data_sources(samples: list[Sample], index: list[tuple[str, str]]) -> int:
    """Set ``data_source`` of samples whose prompt contains an indexed prompt; returns how many stayed unmatched."""
    unmatched = 0
    cache: dict[str, str | None] = {}
    for sample in samples:
        if sample.data_source != "all":
            continue
        if sample.prompt not in cache:
            cache[sample.prompt] = next((ds for text, ds in index if text in sample.prompt), None)
        found = cache[sample.prompt]
        if found is None:
            unmatched += 1
        else:
            sample.data_source = found
    return unmatched
