"""``--max-restarts``: the supervisor relaunches a dead trainer resuming from its checkpoint, cleans up what the dead
attempt left, gives up after N, and never answers the user's own Ctrl-C/SIGTERM with a restart.

Real processes: ``fake_trainer.py`` keeps verl's checkpoint contract (tracker after the folder, ``resume_mode=auto``
resumes after the tracker's step, ``step:N - ...`` console lines) and dies by SIGKILL, leaving a child behind as a
local Ray head would. The real trainer under the same supervisor: tests/cpu/test_cpu_rl.py.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, interpreter_stack, kit_env

from recipes.launch.supervision import restart

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

FAKE = Path(__file__).with_name("fake_trainer.py")


def _command(ckpt: Path, total: int, save: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(FAKE),
        f"trainer.default_local_dir={ckpt}",
        f"trainer.total_training_steps={total}",
        f"trainer.save_freq={save}",
        *extra,
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]


def test_a_killed_trainer_resumes_from_its_checkpoint_and_its_leftovers_are_killed(tmp_path: Path) -> None:
    ckpt, child_pid = tmp_path / "ckpt", tmp_path / "child.pid"
    env = {**os.environ, "FAKE_DIE_AT": "5", "FAKE_MARKER": str(tmp_path / "died"), "FAKE_CHILD_PID": str(child_pid)}
    log, out = io.StringIO(), io.StringIO()
    command = _command(ckpt, 8, 3, "trainer.resume_mode=disable")
    rc = restart.supervise(command, env, ckpt, max_restarts=2, log=log, out=out)
    assert rc == 0, log.getvalue()
    lines = log.getvalue()
    # died in step 5: steps 1-4 ran, the checkpoint is step 3, so step 4 is lost work
    assert "restart 1/2: trainer exited with status -9 after step 4; resuming from global_step_3 " in lines, lines
    assert "(lost 1 steps of work)" in lines and "restart 2/2" not in lines
    assert "attempt 2: rc 0, from global_step_3, last step 8" in lines
    text = out.getvalue()
    assert f"Resuming from {ckpt / 'global_step_3'}" in text  # resume_mode=disable was replaced by auto
    steps = [int(line.split()[0].split(":")[1]) for line in text.splitlines() if line.startswith("step:")]
    assert steps == [1, 2, 3, 4, 4, 5, 6, 7, 8]  # step 4 again: the one lost
    assert restart.checkpoint_step(ckpt) == 6
    pid = int(child_pid.read_text())
    assert not _alive(pid), f"the dead attempt's child {pid} outlived the restart"


def test_gives_up_after_max_restarts(tmp_path: Path) -> None:
    log = io.StringIO()
    env = {**os.environ, "FAKE_EXIT": "3"}
    rc = restart.supervise(_command(tmp_path / "ckpt", 2, 1), env, tmp_path / "ckpt", 2, log=log, out=io.StringIO())
    assert rc == 3
    text = log.getvalue()
    assert "restart 1/2" in text and "restart 2/2" in text and "giving up after 2 restart(s)" in text
    assert text.count("  attempt ") == 3


def test_no_restart_without_max_restarts(tmp_path: Path) -> None:
    log = io.StringIO()
    env = {**os.environ, "FAKE_EXIT": "3"}
    assert restart.supervise(_command(tmp_path / "c", 1, 1), env, tmp_path / "c", 0, log=log, out=io.StringIO()) == 3
    assert "restart 1" not in log.getvalue()


def test_sigterm_to_the_supervisor_stops_the_trainer_without_a_restart(tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from recipes.launch.supervision import restart; "
        f"sys.exit(restart.supervise({_command(tmp_path / 'ckpt', 100000, 1000)!r}, dict(__import__('os').environ), "
        f"Path({str(tmp_path / 'ckpt')!r}), 3))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=kit_env(), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout.readline().startswith(b"step:1 ")
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 15
    assert proc.returncode != 0 and b"restart 1/3" not in err, err.decode()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["x", "a=1"], ["x", "a=1", "trainer.resume_mode=auto"]),
        (["x", "trainer.resume_mode=disable", "a=1"], ["x", "a=1", "trainer.resume_mode=auto"]),
        (["x", "+trainer.resume_mode=resume_path"], ["x", "trainer.resume_mode=auto"]),
    ],
)
def test_restarts_always_resume_auto(command: list[str], expected: list[str]) -> None:
    assert restart.with_resume_auto(command) == expected


def test_step_lines_are_read_with_ray_prefixes() -> None:
    assert restart.STEP_LINE.search("(TaskRunner pid=42) step:12 - actor/pg_loss:0.1").group(1) == "12"
    assert restart.STEP_LINE.search("step:3").group(1) == "3"
    assert restart.STEP_LINE.search("global_step:3 saved") is None
    assert restart.STEP_LINE.search("Training Progress: step:3/10") is None


def test_step_lines_are_read_after_the_sft_progress_bar() -> None:
    """fsdp_sft_trainer's tqdm bar (stderr, no newline) and its console logger (stdout) share the supervisor's pipe."""
    line = "\rEpoch 1/3:  50%|█████     | 1/2 [00:02<00:02,  2.63s/it]step:1 - train/loss:11.9 - train/lr(1e-3):0.0"
    assert restart.STEP_LINE.search(line).group(1) == "1"
    assert restart.STEP_LINE.search("step:3 - training/global_step:3 - timing_s/step:7 - x:1").group(1) == "3"
    assert restart.STEP_LINE.search("training/global_step:3 - timing_s/step:7 - x:1") is None


def test_run_cli_checks_max_restarts_and_shows_it_in_the_dry_run() -> None:
    base = [sys.executable, "-m", "recipes.launch", "run", "qwen3_4b_dapo", "--hw", "a3", "--no-path-check"]
    bad = subprocess.run([*base, "--max-restarts", "-1"], env=kit_env(), cwd=REPO_ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--max-restarts: -1 is out of range (0 or more)" in bad.stderr
    dry = subprocess.run(
        [*base, "--dry-run", "--max-restarts", "2"], env=kit_env(), cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "restarts: up to 2, each resuming from the newest checkpoint in" in dry.stdout
    assert "run log:" in dry.stdout and "run.log  (every launch and restart appends to it)" in dry.stdout


def test_a_restart_waits_for_the_cluster_and_stops_with_the_reason_when_it_stays_broken(tmp_path: Path) -> None:
    """Multi-node RL: a worker node's death ends the run in seconds, and a relaunch onto a cluster with a node missing
    would wait forever for its placement group (scripts/test_images.sh --two-node). The gate runs before each
    relaunch: a reason stops the supervisor with it; None lets the restart go on."""
    env = {
        **os.environ,
        "FAKE_DIE_AT": "3",
        "FAKE_MARKER": str(tmp_path / "died"),
        "FAKE_CHILD_PID": str(tmp_path / "pid"),
    }
    asked: list[int] = []

    def broken() -> str:
        asked.append(1)
        return "the Ray cluster is not whole after 1 s: 1 live node(s) joined, expected 2"

    log = io.StringIO()
    rc = restart.supervise(_command(tmp_path / "a", 6, 1), env, tmp_path / "a", 3, log, io.StringIO(), broken)
    assert rc == -9 and asked == [1], log.getvalue()
    assert "restart: not restarting after exit status -9: the Ray cluster is not whole" in log.getvalue()
    assert "restart 1/3" not in log.getvalue()
    log = io.StringIO()
    env["FAKE_MARKER"] = str(tmp_path / "died-b")
    rc = restart.supervise(_command(tmp_path / "b", 6, 1), env, tmp_path / "b", 3, log, io.StringIO(), lambda: None)
    assert rc == 0 and "restart 1/3: trainer exited with status -9 after step 2" in log.getvalue(), log.getvalue()


def test_the_cluster_wait_is_bounded_and_ends_when_the_node_is_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.launch.cluster import ray_cluster

    answers = [["1 live node(s) joined, expected 2"]] * 2 + [[]]
    monkeypatch.setattr(ray_cluster, "cluster_problems", lambda hw, n, address: answers.pop(0) if answers else [])
    reached: list[str] = []
    monkeypatch.setattr(ray_cluster, "sandbox_reach_problems", lambda url, address: reached.append(url) or [])
    said: list[str] = []

    def check() -> list[str]:
        return ray_cluster.whole_cluster_problems("cpu", 2, "10.0.0.1:6379", "http://127.0.0.1:8080/run_code")

    assert ray_cluster.wait_for_nodes(check, "cpu", 2, 30, said.append, stack=STACK, poll_s=0.01) is None
    assert reached == ["http://127.0.0.1:8080/run_code"]  # asked once the nodes were back
    assert said == ["restart: waiting up to 30 s for the Ray cluster (1 live node(s) joined, expected 2)"]
    monkeypatch.setattr(ray_cluster, "cluster_problems", lambda hw, n, address: ["1 live node(s) joined, expected 2"])
    t0 = time.monotonic()
    why = ray_cluster.wait_for_nodes(check, "cpu", 2, 0.3, said.append, stack=STACK, poll_s=0.05)
    assert time.monotonic() - t0 < 5
    assert why is not None and "not whole after 0 s: 1 live node(s) joined, expected 2" in why
    assert "ray_cluster.sh worker --hw cpu" in why and "re-run the same command" in why


def test_the_launchers_gate_asks_the_whole_cluster_with_the_runs_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run ... --max-restarts` on a multi-node RL plan: the gate asks for its nodes and its sandbox URL, waits as long
    as KIT_RESTART_NODE_WAIT_S says (a bad value is one line), and says why it gives up."""
    from platforms.cli_errors import UsageError
    from recipes.launch import cli
    from recipes.launch.cluster import ray_cluster
    from recipes.launch.planning import plan
    from recipes.launch.run_inputs.catalog import RECIPES

    url = "http://127.0.0.1:8080/run_code"
    built = plan.build(
        RECIPES["qwen3_4b_dapo"],
        "cpu",
        STACK,
        ["trainer.nnodes=2"],
        path_check=False,
        environ={"RETOOL_SANDBOX_URL": url},
    )
    asked: list[tuple] = []

    def whole(hw: str, nodes: int, address: str | None, sandbox: str | None) -> list[str]:
        asked.append((hw, nodes, address, sandbox))
        return ["1 live node(s) joined, expected 2"]

    monkeypatch.setattr(ray_cluster, "whole_cluster_problems", whole)
    gate = cli._cluster_gate(built, {"RAY_ADDRESS": "10.0.0.1:6379", ray_cluster.NODE_WAIT_ENV: "0"})
    why = gate()
    assert asked and asked[0] == ("cpu", 2, "10.0.0.1:6379", url)
    assert why is not None and "not whole after 0 s: 1 live node(s) joined, expected 2" in why
    with pytest.raises(UsageError, match="KIT_RESTART_NODE_WAIT_S='soon' is not a number"):
        cli._cluster_gate(built, {ray_cluster.NODE_WAIT_ENV: "soon"})
