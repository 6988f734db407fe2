"""The learning check's sensitivity bench (scripts/bench_learn.sh, recipes/smoke/bench_learn.py), without training:
what each run changes, that a sabotage never reaches the shipped run, the table, and the exit rule. The learning
checks themselves are stubbed: a fake runner writes what a smoke run would (summary.json, logs/rl.log).

What would fail: a sabotage applied to the shipped run or missing from its own; a sabotage run that redoes SFT
instead of starting from the shipped run's; a bench that exits 0 when the shipped run did not learn, when a sabotage
learned, crashed, or never took effect; a refusal that comes only after the first 15-minute run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms.stacks import REFERENCE
from recipes.smoke import bench_learn, sabotage
from recipes.smoke.bench_learn import LEARNED, NOT_LEARNED, RUNS, SHIPPED, Run

SFT_STAGES = ("model", "data", "sft", "merge")  # the learning check has no tool-call check
TAIL = ("sandbox", "rl", "eval", "plots", "learn")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No sabotage switch in the test's environment, and no signal handlers replaced in pytest's process."""
    for name in (*sabotage.SWITCHES, sabotage.EXTERNAL_MODULES_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(bench_learn, "exit_on_signals", lambda: None)


def _summary(run: Run, outcome: str) -> dict:
    """What a learning check's summary.json holds after ``outcome``: learned | second (learned, its second try) | not |
    crash (the RL stage failed)."""
    first = [] if run.name != SHIPPED else [{"name": name, "status": "ok", "seconds": 1.0} for name in SFT_STAGES]
    first = first or [{"name": "reuse", "status": "ok", "seconds": 2.0}]
    failed = {"learned": None, "second": None, "not": "learn", "unseen": "learn", "crash": "rl"}[outcome]
    tail = [{"name": name, "status": "ok", "seconds": 400.0 if name == "rl" else 5.0} for name in TAIL]
    if failed:
        index = TAIL.index(failed)
        tail[index]["status"] = "failed"
        for stage in tail[index + 1 :]:
            stage.update(status="skipped", seconds=0.0)
    summary = {"ok": failed is None, "failed_stage": failed, "task": "learn", "seconds": 600.0, "stages": first + tail}
    if outcome == "second":  # learned on the learning check's second try (recipes/smoke/pipeline.py _second_try)
        outcome, summary["tries"] = "learned", 2
    if outcome != "crash":
        learned = outcome == "learned"
        verdict = "learn: val acc ...: " + ("learned (target ...)" if learned else "did NOT learn (acc target ...)")
        summary |= {"learn_ok": learned, "learn_verdict": verdict, "val_acc_before": 0.31}
        summary |= {"val_acc_after": 0.97 if learned else 0.30, "tool_call_rate_before": 0.33}
        summary |= {"tool_call_rate_after": 0.98 if learned else 0.30}
        # the weight sync's witness (recipes/smoke/sync_witness.py) names step 2; "unseen": it missed the break
        stale = run.name == "weight-sync" and outcome == "not"
        summary |= {"weight_sync_gaps": {"1": 0.001, "2": 0.05 if stale else 0.0011}}
        summary |= {"weight_sync_verdict": "weight sync: FAILED at step 2: ..." if stale else "weight sync: ... within"}
        # the loss mask's witness (recipes/smoke/mask_witness.py) names step 1; "unseen": it missed the break
        masked = run.name == "loss-mask" and outcome == "not"
        summary |= {"loss_mask_shares": {"1": 0.28 if masked else 0.0, "2": 0.3 if masked else 0.0}}
        summary |= {"loss_mask_verdict": "loss mask: FAILED at step 1: ..." if masked else "loss mask: no tool-output"}
    return summary


def _runner(outcomes: dict[str, tuple[str, int]], seen: list[tuple[str, dict[str, str]]]) -> Callable:
    """A stand-in for run_smoke: ``outcomes[run] = (outcome, marker lines)``; records each run's environment."""

    def run(run: Run, log: Path) -> int:
        env = run.environment(os.environ)
        seen.append((run.name, env))
        outcome, markers = outcomes[run.name]
        if "--force" in run.argv:  # what the smoke does with --force: the folder's contents are replaced
            shutil.rmtree(run.out, ignore_errors=True)
        (run.out / "logs").mkdir(parents=True)
        (run.out / "summary.json").write_text(json.dumps(_summary(run, outcome)))
        marker = run.marker or f"{sabotage.MARKER} weight sync"
        (run.out / "logs" / "rl.log").write_text("step:1 - x:1\n" + f"(Worker pid=1) {marker}: ...\n" * markers)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("[smoke] ...\n")
        return 0 if outcome in ("learned", "second") else 1

    return run


BEHAVED = {SHIPPED: ("learned", 0), **{s.name: ("not", 2) for s in sabotage.SABOTAGES}}


def _bench(tmp_path: Path, outcomes: dict, *args: str) -> tuple[int, list, Path]:
    seen: list = []
    out = tmp_path / "bench"
    status = bench_learn.main(["--out", str(out), *args], runner=_runner(outcomes, seen))
    return status, seen, out


# ----------------------------------------------------------------------------------------- plans per run


def test_each_run_changes_only_its_own_sabotage(tmp_path: Path) -> None:
    runs = {run.name: run for run in bench_learn.plan(tmp_path, 3, REFERENCE)}
    assert list(runs) == list(RUNS) == [SHIPPED, "weight-sync", "reward-sign", "loss-mask"]
    shipped = runs[SHIPPED]
    smoke_sh = str(REPO_ROOT / "scripts" / "smoke.sh")
    assert shipped.argv == ["bash", smoke_sh, "--learn", "--out", str(tmp_path / SHIPPED), "--seed", "3"]
    assert shipped.changes == {} and shipped.marker is None and shipped.expect == LEARNED
    hooks = {sabotage.EXTERNAL_MODULES_ENV: sabotage.HOOKS_MODULE}
    assert runs["weight-sync"].changes == {**hooks, "KIT_TEST_WEIGHT_SYNC": "first-only"}
    assert runs["loss-mask"].changes == {**hooks, "KIT_TEST_LOSS_MASK": "tool-tokens"}
    assert runs["reward-sign"].changes == {}
    reward = f"custom_reward_function.path={REPO_ROOT / 'recipes' / 'smoke' / 'sabotage' / 'reward.py'}"
    assert runs["reward-sign"].argv[-4:] == [
        "--rl-override",
        reward,
        "--rl-override",
        "custom_reward_function.name=compute_score",
    ]
    assert sabotage.REWARD_FILE.is_file()
    for name in RUNS[1:]:
        run = runs[name]
        assert run.expect == NOT_LEARNED and run.out == tmp_path / name and run.marker
        assert run.argv[run.argv.index("--from-sft") + 1] == str(tmp_path / SHIPPED), "SFT is done once"
        assert "--from-sft" not in shipped.argv and "--rl-override" not in shipped.argv
    assert all("--force" in run.argv for run in bench_learn.plan(tmp_path, 0, REFERENCE, force=True))


def test_a_sabotage_keeps_the_external_modules_already_set() -> None:
    environ = {sabotage.EXTERNAL_MODULES_ENV: "npu_kernels.auto"}
    run = {run.name: run for run in bench_learn.plan(Path("/x"), 0, REFERENCE, environ=environ)}["weight-sync"]
    modules = run.environment(environ)[sabotage.EXTERNAL_MODULES_ENV]
    assert modules == f"npu_kernels.auto,{sabotage.HOOKS_MODULE}"
    assert sabotage.switched_on({sabotage.EXTERNAL_MODULES_ENV: modules}) == [f"VERL_USE_EXTERNAL_MODULES={modules}"]
    assert sabotage.switched_on(environ) == []


def _smoke_dry_run(run: Run) -> list[str]:
    """The stages ``python -m recipes.smoke run --dry-run`` lists for the run's smoke.sh words, in its environment."""
    words = run.argv[2:] + ["--dry-run", "--platform", "cpu"]
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.smoke", "run", *words],
        capture_output=True,
        text=True,
        env=run.environment(kit_env()),
        timeout=180,
    )
    assert proc.returncode == 0, (run.name, proc.stderr[-2000:])
    if run.name == "reward-sign":
        assert f"custom_reward_function.path={sabotage.REWARD_FILE}" in proc.stdout
    if run.name != SHIPPED:
        source = run.argv[run.argv.index("--from-sft") + 1]
        assert f"in-process stage: reuse (copies data/, sft/hf_merged/ and sft/tensorboard/ of {source})" in proc.stdout
    return [line.removeprefix("== ") for line in proc.stdout.splitlines() if line.startswith("== ")]


def test_the_planned_commands_are_ones_the_smoke_accepts(tmp_path: Path) -> None:
    """Each run's smoke.sh words pass the smoke's own checks; the sabotage runs start from OUT/shipped with no data,
    SFT or merge command of their own."""
    out = tmp_path / "bench"
    runs = bench_learn.plan(out, 0, REFERENCE)
    assert _smoke_dry_run(runs[0]) == ["data"] * 3 + ["sft", "merge", "sandbox", "rl", "eval", "plots"]
    (out / SHIPPED).mkdir(parents=True)  # what the shipped run leaves: its SFT stages ok
    summary = {"task": "learn", "stages": [{"name": name, "status": "ok"} for name in SFT_STAGES]}
    (out / SHIPPED / "summary.json").write_text(json.dumps(summary))
    for run in runs[1:]:
        assert _smoke_dry_run(run) == ["sandbox", "rl", "eval", "plots"], run.name
    assert sorted(p.name for p in out.iterdir()) == [SHIPPED], "a dry run creates no run folder"


# ------------------------------------------------------------------------------------ the table, exit rule


def test_all_behaved_exits_0_with_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, seen, out = _bench(tmp_path, BEHAVED, "--seed", "1")
    assert status == 0, capsys.readouterr().err
    assert [name for name, _ in seen] == list(RUNS)
    envs = dict(seen)
    assert not sabotage.switched_on(envs[SHIPPED]), "the shipped run carries no sabotage"
    assert (
        envs["weight-sync"]["KIT_TEST_WEIGHT_SYNC"] == "first-only" and "KIT_TEST_LOSS_MASK" not in envs["weight-sync"]
    )
    assert envs["loss-mask"]["KIT_TEST_LOSS_MASK"] == "tool-tokens" and "KIT_TEST_WEIGHT_SYNC" not in envs["loss-mask"]
    assert not sabotage.switched_on(envs["reward-sign"])
    report = json.loads((out / "bench_learn.json").read_text())
    assert report["ok"] and report["problems"] == [] and report["seed"] == 1
    rows = {row["run"]: row for row in report["rows"]}
    assert list(rows) == list(RUNS)
    assert rows[SHIPPED]["verdict"] == LEARNED and rows[SHIPPED]["rl_seconds"] == 400.0
    assert all(rows[name]["verdict"] == NOT_LEARNED and rows[name]["sabotage_lines"] == 2 for name in RUNS[1:])
    table = (out / "bench_learn.md").read_text()
    assert (
        "| shipped | nothing (as shipped) | 0.31 -> 0.97 | 33% -> 98% | 1.00e-03 1.10e-03 | 0.000 0.000 | learned | 0 "
        "| 400 | yes |" in table
    )
    assert "| weight-sync | weight sync skipped" in table
    assert "0.31 -> 0.30 | 33% -> 30% | 1.00e-03 **5.00e-02** | 0.000 0.000 | did NOT learn | 2 |" in table
    assert rows["weight-sync"]["sync_failed_step"] == 2 and rows[SHIPPED]["sync_failed_step"] is None
    assert "| 1.00e-03 1.10e-03 | **0.280** 0.300 | did NOT learn | 2 |" in table  # the loss-mask run
    assert rows["loss-mask"]["mask_failed_step"] == 1 and rows["weight-sync"]["mask_failed_step"] is None
    assert "every run behaved" in table
    printed = capsys.readouterr().out
    assert (
        "| run | what was broken | val acc | tool calls | sync gap by step | tool share of loss by step | verdict |"
        in printed
        and "every run reported" in printed
    )


def test_a_shipped_run_that_learned_on_its_second_try_says_so(tmp_path: Path) -> None:
    status, _, out = _bench(tmp_path, {**BEHAVED, SHIPPED: ("second", 0)})
    rows = {row["run"]: row for row in json.loads((out / "bench_learn.json").read_text())["rows"]}
    assert status == 0 and rows[SHIPPED]["verdict"] == LEARNED and rows[SHIPPED]["tries"] == 2
    assert rows["weight-sync"]["tries"] == 1
    table = (out / "bench_learn.md").read_text()
    assert "| learned (second try) | 0 |" in table and table.count("(second try)") == 1, table


def _fails(tmp_path: Path, capsys: pytest.CaptureFixture[str], outcomes: dict, *args: str) -> tuple[str, list, Path]:
    status, seen, out = _bench(tmp_path, outcomes, *args)
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("bench-learn: error: ") and len(err.strip().splitlines()) == 1, err
    assert not json.loads((out / "bench_learn.json").read_text())["ok"]
    return err, seen, out


def test_a_shipped_run_that_did_not_learn_fails_and_stops_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err, seen, out = _fails(tmp_path, capsys, {**BEHAVED, SHIPPED: ("not", 0)})
    assert "shipped did NOT learn (exit 1)" in err
    assert [name for name, _ in seen] == [SHIPPED], "sabotage runs would prove nothing"
    rows = {row["run"]: row for row in json.loads((out / "bench_learn.json").read_text())["rows"]}
    assert rows["loss-mask"]["verdict"] == "not run"


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (("learned", 2), "reward-sign learned: the check missed it (reward sign flipped"),
        (("crash", 2), "reward-sign failed at rl (exit 1)"),
        (("not", 0), "reward-sign shows no '[kit_sabotage] reward sign flipped' line in its RL log"),
    ],
)
def test_a_sabotage_that_learned_crashed_or_never_ran_fails_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], outcome: tuple[str, int], message: str
) -> None:
    err, seen, _ = _fails(tmp_path, capsys, {**BEHAVED, "reward-sign": outcome})
    assert message in err, err
    assert [name for name, _ in seen] == list(RUNS), "the other sabotage runs still run"
    assert "weight-sync" not in err and "loss-mask" not in err and "shipped" not in err


def test_a_shipped_run_with_a_sabotage_line_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err, _, _ = _fails(tmp_path, capsys, {**BEHAVED, SHIPPED: ("learned", 1)})
    assert "shipped ran with a sabotage (1 '[kit_sabotage]' lines in its RL log)" in err


# ---------------------------------------------------------------------------- before the first run, --only


def test_refusals_come_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("KIT_TEST_LOSS_MASK", "tool-tokens")
    status, seen, _ = _bench(tmp_path, BEHAVED)
    assert status == 2 and not seen and "a sabotage is switched on here: KIT_TEST_LOSS_MASK" in capsys.readouterr().err
    monkeypatch.delenv("KIT_TEST_LOSS_MASK")
    (tmp_path / "bench" / "loss-mask").mkdir(parents=True)
    (tmp_path / "bench" / "loss-mask" / "old.txt").write_text("keep")
    status, seen, _ = _bench(tmp_path, BEHAVED)
    assert status == 2 and not seen and "loss-mask not empty (another --out, or --force)" in capsys.readouterr().err
    status, seen, _ = _bench(tmp_path, BEHAVED, "--only", "weight-sync")
    err = capsys.readouterr().err
    assert status == 2 and not seen and "start from OUT/shipped" in err and "no summary.json" in err


def test_only_reruns_a_sabotage_from_the_shipped_run_already_there(tmp_path: Path, capsys) -> None:
    status, _, out = _bench(tmp_path, BEHAVED, "--only", SHIPPED)
    assert status == 0, capsys.readouterr().err
    assert [row["run"] for row in json.loads((out / "bench_learn.json").read_text())["rows"]] == [SHIPPED]
    status, seen, out = _bench(tmp_path, {**BEHAVED, "loss-mask": ("learned", 1)}, "--only", "loss-mask")
    err = capsys.readouterr().err
    assert status == 1 and [name for name, _ in seen] == ["loss-mask"] and "loss-mask learned" in err
    rows = json.loads((out / "bench_learn.json").read_text())["rows"]
    assert [(row["run"], row["earlier"]) for row in rows] == [(SHIPPED, True), ("loss-mask", False)]
    status, seen, _ = _bench(tmp_path, BEHAVED, "--only", "loss-mask", "--force")
    assert status == 0 and [name for name, _ in seen] == ["loss-mask"]


def test_dry_run_prints_each_runs_changes_and_starts_nothing(tmp_path: Path, capsys) -> None:
    status, seen, out = _bench(tmp_path, BEHAVED, "--dry-run")
    text = capsys.readouterr().out
    assert status == 0 and not seen and not out.exists()
    assert [line for line in text.splitlines() if line.startswith("== ")][0].startswith("== shipped: nothing")
    assert "  env KIT_TEST_WEIGHT_SYNC=first-only" in text and "  env KIT_TEST_LOSS_MASK=tool-tokens" in text
    assert text.count(f"--from-sft {out / SHIPPED}") == 3 and "stages: reuse" in text


def test_the_script_answers_help_and_refuses_bad_options() -> None:
    script = str(REPO_ROOT / "scripts" / "bench_learn.sh")
    proc = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, env=kit_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: bash scripts/bench_learn.sh"), proc.stderr
    assert "--only RUN" in proc.stdout and "--dry-run" in proc.stdout and "~45 min" in proc.stdout
    proc = subprocess.run(
        ["bash", script, "--only", "bogus"], capture_output=True, text=True, env=kit_env(), timeout=60
    )
    assert proc.returncode == 2 and "invalid choice: 'bogus'" in proc.stderr


def test_the_bench_imports_only_the_standard_library() -> None:
    """scripts/bench_learn.sh runs it with whatever python the kit finds: each run picks its own through smoke.sh."""
    code = (
        "import sys; before = set(sys.modules); import recipes.smoke.bench_learn; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names) - {'recipes', 'platforms'}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=kit_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_task_names_agree() -> None:
    from recipes.smoke.commands import SMOKE_TASK
    from recipes.smoke.learn import LEARN_TASK

    assert (LEARN_TASK.name, SMOKE_TASK.name) == (bench_learn.TASK, "smoke")  # cli.check-args uses the same literals


def test_a_weight_sync_break_the_witness_missed_fails_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 51: accuracy alone is a weak witness of the sync; the weight-sync sabotage must be named at step 2."""
    err, _, _ = _fails(tmp_path, capsys, {**BEHAVED, "weight-sync": ("unseen", 2)})
    assert "weight-sync: the weight sync's witness named none, not step 2" in err, err


def test_a_loss_mask_break_the_witness_missed_fails_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 51: accuracy judged the loss-mask sabotage by 0.03; its witness must name step 1, and no other run's."""
    err, _, _ = _fails(tmp_path, capsys, {**BEHAVED, "loss-mask": ("unseen", 2)})
    assert "loss-mask: the loss mask's witness named none, not step 1" in err, err
    assert {run.name: run.mask_breaks_at for run in bench_learn.plan(tmp_path, 0, REFERENCE)} == {
        SHIPPED: None,
        "weight-sync": None,
        "reward-sign": None,
        "loss-mask": 1,
    }
