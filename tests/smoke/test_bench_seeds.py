"""The sensitivity bench on several seeds and stacks (scripts/bench_learn_seeds.sh, recipes/smoke/bench_seeds.py),
without training: each stack and seed's bench is the real bench_learn.main, its learning checks stubbed by
test_bench_learn's fake runner (a summary.json and an RL log per run).

What would fail: a stack or seed left out or run twice; a claim judged true with a run that misbehaved, or with a
seed or run missing; a resumed bench that reruns what finished (hours) or keeps what did not (a killed run's
half-written folder); an --add that reruns the added bench, or takes one of a stack or seed not chosen.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from smoke.test_bench_learn import BEHAVED, _runner

from recipes.smoke import bench_learn, bench_seeds, sabotage
from recipes.smoke.bench_learn import RUNS, SHIPPED
from recipes.smoke.learn import needed_acc

Outcomes = dict[tuple[str, int], dict[str, tuple[str, int]]]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*sabotage.SWITCHES, sabotage.EXTERNAL_MODULES_ENV):
        monkeypatch.delenv(name, raising=False)
    # each bench exports its stack (stacks.export writes os.environ): set first, so the teardown restores what was
    # there and no later test's children inherit this test's 0.9.1
    monkeypatch.setenv("KIT_STACK", "0.6.1")
    monkeypatch.delenv("KIT_STACK")
    monkeypatch.setattr(bench_learn, "exit_on_signals", lambda: None)
    monkeypatch.setattr(bench_seeds, "exit_on_signals", lambda: None)


def _value(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]


def _benches(outcomes: Outcomes, calls: list[list[str]]) -> Callable[[list[str]], int]:
    """A stand-in for run_bench: the real bench (bench_learn.main) on the argv bench_seeds built, its smoke runs
    faked with ``outcomes[(stack, seed)]`` (BEHAVED where not given); records each argv."""

    def run(argv: list[str]) -> int:
        assert argv[:2] == ["bash", str(bench_seeds.BENCH_SH)]
        calls.append(argv)
        key = (_value(argv, "--stack"), int(_value(argv, "--seed")))
        return bench_learn.main(argv[2:], runner=_runner(outcomes.get(key, BEHAVED), []))

    return run


def _main(out: Path, outcomes: Outcomes, calls: list, *args: str) -> int:
    return bench_seeds.main(["--out", str(out), *args], runner=_benches(outcomes, calls))


def _pairs(calls: list[list[str]]) -> list[tuple[str, int]]:
    return [(_value(argv, "--stack"), int(_value(argv, "--seed"))) for argv in calls]


def test_every_stack_and_seed_runs_once_and_one_misbehaving_run_fails_the_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, calls = tmp_path / "seeds", []
    missed = {**BEHAVED, "loss-mask": ("learned", 2)}  # the loss mask's sabotage passed: the check missed it
    status = _main(out, {("0.9.1", 1): missed}, calls, "--seeds", "0,1")
    assert status == 1
    assert _pairs(calls) == [("0.6.1", 0), ("0.9.1", 0), ("0.6.1", 1), ("0.9.1", 1)], "seed by seed, every stack"
    assert all(
        _value(argv, "--out") == str(out / s / f"seed-{n}") for argv, (s, n) in zip(calls, _pairs(calls), strict=True)
    )
    err = capsys.readouterr().err
    assert "stack 0.9.1 seed 1: loss-mask learned: the check missed it" in err and "0.6.1 seed" not in err
    report = json.loads((out / "bench_seeds.json").read_text())
    assert not report["ok"] and len(report["problems"]) == 1 and report["seeds"] == [0, 1]
    table = (out / "bench_seeds.md").read_text()
    bar = needed_acc(0.31)
    assert f"| shipped | 0.31 -> 0.97 (bar {bar:.2f}, {0.97 - bar:+.2f}); learned |" in table
    assert f"0.31 -> 0.30 (bar {bar:.2f}, {0.30 - bar:+.2f}); sync gap 5.00e-02 at step 2; did NOT learn" in table
    assert "tool share 0.280 at step 1; did NOT learn" in table
    assert "learned (NOT as it must)" in table.split("## stack 0.9.1")[1]
    assert "FAILED: stack 0.9.1 seed 1: loss-mask learned" in table


def test_all_behaved_exits_0_and_a_second_call_reruns_nothing(tmp_path: Path) -> None:
    out, calls = tmp_path / "seeds", []
    assert _main(out, {}, calls, "--stacks", "0.9.1", "--seeds", "2") == 0
    assert _pairs(calls) == [("0.9.1", 2)]
    assert "every run behaved on seed 2" in (out / "bench_seeds.md").read_text()
    calls.clear()
    assert _main(out, {}, calls, "--stacks", "0.9.1", "--seeds", "2") == 0
    assert calls == [], "a finished bench is kept"


def test_a_resumed_bench_reruns_only_the_runs_that_did_not_finish(tmp_path: Path) -> None:
    out, calls = tmp_path / "seeds", []
    killed = {**BEHAVED, "weight-sync": ("crash", 0)}  # its RL stage died (a killed run: no verdict)
    assert _main(out, {("0.6.1", 0): killed}, calls, "--stacks", "0.6.1", "--seeds", "0") == 1
    calls.clear()
    assert _main(out, {}, calls, "--stacks", "0.6.1", "--seeds", "0") == 0
    (argv,) = calls
    assert argv[argv.index("--out") :] == ["--out", str(out / "0.6.1" / "seed-0"), "--force", "--only", "weight-sync"]


def test_a_shipped_run_that_did_not_finish_reruns_all_and_one_that_did_not_learn_stands(tmp_path: Path) -> None:
    out, calls = tmp_path / "seeds", []
    crashed = {**BEHAVED, SHIPPED: ("crash", 0)}
    assert _main(out, {("0.6.1", 0): crashed}, calls, "--stacks", "0.6.1", "--seeds", "0") == 1
    calls.clear()
    assert _main(out, {("0.6.1", 0): {**BEHAVED, SHIPPED: ("not", 0)}}, calls, "--stacks", "0.6.1", "--seeds", "0") == 1
    (argv,) = calls
    assert "--only" not in argv and "--force" in argv, "every run again: the sabotages start from its SFT model"
    calls.clear()
    assert _main(out, {}, calls, "--stacks", "0.6.1", "--seeds", "0") == 1
    assert calls == [], "a shipped run that finished without learning is the bench's answer"
    assert "shipped did NOT learn" in (out / "bench_seeds.md").read_text()


def _bench_elsewhere(tmp_path: Path, stack: str, seed: int, *, old: bool = False) -> Path:
    """A bench run by hand; ``old``: its report written before reports named their stack (the runs' summaries do)."""
    folder = tmp_path / f"elsewhere-{stack}-{seed}"
    argv = ["--out", str(folder), "--stack", stack, "--seed", str(seed)]
    assert bench_learn.main(argv, runner=_runner(BEHAVED, [])) == 0
    if old:
        report = json.loads((folder / "bench_learn.json").read_text())
        del report["stack"]
        (folder / "bench_learn.json").write_text(json.dumps(report))
        for run in RUNS:
            summary = json.loads((folder / run / "summary.json").read_text())
            (folder / run / "summary.json").write_text(json.dumps({**summary, "stack": stack}))
    return folder


def test_an_added_bench_stands_for_its_stack_and_seed(tmp_path: Path) -> None:
    old = _bench_elsewhere(tmp_path, "0.9.1", 1, old=True)
    out, calls = tmp_path / "seeds", []
    assert _main(out, {}, calls, "--seeds", "1", "--add", str(old)) == 0
    assert _pairs(calls) == [("0.6.1", 1)], "the added bench is not run again"
    report = json.loads((out / "bench_seeds.json").read_text())
    assert {(b["stack"], b["seed"], b["folder"]) for b in report["benches"]} >= {("0.9.1", 1, str(old))}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0", "--add", "{old}"], "is stack 0.9.1 seed 1"),
        (["--seeds", "1", "--add", "{old}", "--add", "{old}"], "is added twice"),
        (["--seeds", "1", "--add", "{empty}"], "no bench_learn.json in it"),
    ],
)
def test_a_wrong_add_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    old, empty = _bench_elsewhere(tmp_path, "0.9.1", 1), tmp_path / "empty"
    empty.mkdir()
    calls: list = []
    words = [word.format(old=old, empty=empty) for word in args]
    assert _main(tmp_path / "seeds", {}, calls, *words) == 2
    assert calls == [] and message in capsys.readouterr().err


def test_a_folder_holding_another_pairs_bench_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "seeds"
    elsewhere = _bench_elsewhere(tmp_path, "0.9.1", 1)
    (out / "0.9.1").mkdir(parents=True)
    elsewhere.rename(out / "0.9.1" / "seed-0")
    calls: list = []
    assert _main(out, {}, calls, "--stacks", "0.9.1", "--seeds", "0") == 2
    assert calls == [] and "holds stack 0.9.1 seed 1's bench" in capsys.readouterr().err


def test_the_dry_run_starts_nothing_and_says_what_each_pair_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, calls = tmp_path / "seeds", []
    _main(out, {("0.9.1", 0): {**BEHAVED, "reward-sign": ("crash", 0)}}, calls, "--stacks", "0.9.1", "--seeds", "0")
    calls.clear()
    capsys.readouterr()
    assert _main(out, {}, calls, "--seeds", "0,1", "--dry-run") == 0
    assert calls == []
    text = capsys.readouterr().out
    assert "stack 0.9.1 seed 0: unfinished: reward-sign" in text and "--only reward-sign" in text
    assert text.count(": new") == 3
    assert not (out / "0.6.1").exists(), "a dry run creates no bench folder"


@pytest.mark.parametrize("bad", [["--seeds", "0,0"], ["--seeds", "x"], ["--stacks", "0.7.0"], ["--seeds", "-1"]])
def test_bad_lists_are_usage_errors(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        bench_seeds.main(bad, runner=lambda argv: pytest.fail("ran"))
    assert exited.value.code == 2 and "bench_learn_seeds.sh: error:" in capsys.readouterr().err


def test_a_cell_says_when_its_verdict_is_the_second_trys() -> None:
    row = {"val_acc_before": 0.65, "val_acc_after": 0.91, "verdict": "learned", "problem": None}
    assert bench_seeds.cell(row).endswith("; learned")
    assert bench_seeds.cell({**row, "tries": 2}).endswith("; learned (second try)")
