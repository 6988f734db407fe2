"""The run's log file (recipes/launch/supervision/runlog.py): what a launch prints, the trainer's output and the restart
supervisor's lines land in ``<CKPT_DIR>/run.log``, named first, appended by every restart and every re-run; a failed
run ends with the line that says how to resume; a log that cannot be written never stops the run.

The launcher's own launch path (``cli._launch``) runs ``fake_trainer.py`` (verl's checkpoint contract, no model).
The real trainers' run logs: tests/kit_main_job.py ``check_run_logs`` (the main job's SFT and RL stages)."""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from kit_testing import interpreter_stack

from recipes.launch import cli
from recipes.launch.run_inputs import catalog
from recipes.launch.supervision import runlog

FAKE = Path(__file__).with_name("fake_trainer.py")
STACK = interpreter_stack()  # the stack this venv's verl serves


def _plan(ckpt: Path, total: int, *, phase: str = "rl", nnodes: int = 1) -> SimpleNamespace:
    """What ``cli._launch`` reads of a plan: the command, the recipe, the stack (whose checkpoint layout says where
    a restart resumes), and the facts it was handed (the checkpoint folder, this node's run log, the node count); a
    one-node run does not join a cluster."""
    command = [sys.executable, str(FAKE), f"trainer.default_local_dir={ckpt}", f"trainer.total_training_steps={total}"]
    command.append("trainer.save_freq=2")
    recipe = catalog.get("qwen3_4b_dapo" if phase == "rl" else "qwen3_4b_sft")
    facts = SimpleNamespace(
        ckpt_dir=ckpt, run_log=runlog.log_path(ckpt, phase, nnodes, {}), layout=SimpleNamespace(nnodes=nnodes)
    )
    return SimpleNamespace(command=command, recipe=recipe, stack=STACK, facts=facts, joins_cluster=False)


def _launch(plan: SimpleNamespace, max_restarts: int, env: dict[str, str], capsys: pytest.CaptureFixture) -> tuple:
    args = argparse.Namespace(max_restarts=max_restarts)
    rc = cli._launch(args, plan, {**os.environ, **env}, env, "| the plan's table |")
    captured = capsys.readouterr()
    return rc, captured.out, captured.err, plan.facts.run_log


def test_a_supervised_run_and_its_rerun_append_everything_to_the_named_log(tmp_path, capsys) -> None:
    ckpt = tmp_path / "ckpt"
    env = {"FAKE_DIE_AT": "3", "FAKE_MARKER": str(tmp_path / "died"), "FAKE_CHILD_PID": str(tmp_path / "child")}
    rc, out, err, log_file = _launch(_plan(ckpt, 4), 1, env, capsys)
    assert rc == 0, err
    assert log_file == ckpt / "run.log"
    assert err.splitlines()[0].startswith(f"run log: {log_file} (appending"), err[:500]
    text = log_file.read_text()
    assert text.count("===== ") == 1 and "| the plan's table |" in text and "run_recipe: run " in text
    assert "step:2 - " in text and "step:4 - " in text  # the trainer's stdout, both attempts
    assert "restart 1/1: trainer exited with status -9 after step 2; resuming from global_step_2" in text
    assert "attempt 2: rc 0, from global_step_2, last step 4" in text  # the supervisor's summary
    assert "step:4 - " in out  # the terminal still gets everything
    # the re-run that resumes (here: more steps) appends after the first launch's lines
    rc, _, _, _ = _launch(_plan(ckpt, 6), 0, {}, capsys)
    again = log_file.read_text()
    assert rc == 0 and again.startswith(text) and again.count("===== ") == 2 and "step:6 - " in again


def test_a_failed_run_says_how_to_resume_from_its_checkpoint(tmp_path, capsys) -> None:
    ckpt = tmp_path / "ckpt"
    rc, _, err, log_file = _launch(_plan(ckpt, 3), 0, {"FAKE_EXIT": "3"}, capsys)
    hint = (
        f"run: the trainer ended with exit status 3; run the same command again to resume from global_step_2 in {ckpt}"
    )
    assert rc == 3 and hint in err and hint in log_file.read_text()


def test_a_multi_node_sft_run_is_not_restarted_by_one_node(tmp_path) -> None:
    with pytest.raises(cli.UsageError, match=r"torchrun job spans all 2 nodes.*run the same command again on every"):
        cli._check_restarts(2, 10, "sft", 2)
    # RL restarts once the Ray cluster is whole (recipes/launch/cluster/ray_cluster.py)
    cli._check_restarts(2, 10, "rl", 2)
    cli._check_restarts(0, 10, "sft", 2)
    assert runlog.log_path(tmp_path, "sft", 2, {"NODE_RANK": "1"}) == tmp_path / "run.node1.log"
    assert runlog.log_path(tmp_path, "sft", 2, {"NODE_RANK": "0"}) == tmp_path / "run.log"


def test_a_log_that_cannot_be_written_does_not_stop_the_run(tmp_path, capsys) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "run.log").mkdir()  # cannot be opened as a file
    rc, out, err, _ = _launch(_plan(ckpt, 2), 0, {}, capsys)
    assert rc == 0 and "step:2 - " in out
    assert f"run log: cannot write {ckpt / 'run.log'} (" in err and "this terminal only" in err

    warn = io.StringIO()
    log = runlog.RunLog(tmp_path / "full.log", warn)
    log._file = open("/dev/full", "w")  # noqa: SIM115 - every write fails with ENOSPC, as a full disk does
    log.write("x" * 10000)
    log.write("more")
    assert warn.getvalue().count("cannot write") == 1 and not log.open
