"""The prewarmed RL driver (recipes.launch.supervision.prewarm): it imports its module while the launcher checks the
run, then runs the plan's command as ``python -m`` would, or exits without running anything when the command is not
one it can run so, when the checks fail or when the launcher lets it go.

Real child processes run a toy entry module that says when it is imported and what its ``__main__`` sees; the
launcher's side is checked in-process with the supervisor replaced (the real driver under it: the main job's RL
stage, tests/kit_main_job.py).
"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.launch.supervision import prewarm, restart

HEAVY = """
import os
print("heavy imported", flush=True)
open(os.environ["TOY_WARMED"], "w").close()
"""

TOY = """
import os, sys
import toyheavy
print("imported", flush=True)
if __name__ == "__main__":
    marker = os.environ.get("TOY_MARKER")
    fail_once = marker is not None and not os.path.exists(marker)
    if fail_once:
        open(marker, "w").close()
    print("main", os.getpid(), __name__, sys.argv[1:], os.environ.get("LATE"), repr(sys.stdin.read()), flush=True)
    sys.exit(1 if fail_once else int(os.environ.get("TOY_EXIT", "0")))
"""


@pytest.fixture
def toy_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "toyentry.py").write_text(TOY)
    (tmp_path / "toyheavy.py").write_text(HEAVY)
    env = kit_env()
    env["TOY_WARMED"] = str(tmp_path / "warmed")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


ARGV = [sys.executable, "-m", "toyentry", "a", "trainer.x=1"]


def _output(proc) -> str:  # noqa: ANN001
    """Everything the child printed (its stdin may be closed already: no ``communicate``)."""
    out = proc.stdout.read()
    proc.wait(timeout=60)
    return out.decode()


def test_it_imports_while_waiting_and_runs_the_command_as_python_m_would(toy_env: dict[str, str]) -> None:
    warm = prewarm.start("toyentry", toy_env)
    deadline = time.monotonic() + 60
    while not Path(toy_env["TOY_WARMED"]).exists():  # what the module imports, before any command came
        assert time.monotonic() < deadline and warm.proc.poll() is None, "the waiting driver imported nothing"
        time.sleep(0.05)
    proc = warm.take(ARGV, {"LATE": "late", "TOY_EXIT": "3"}, late_env={"LATE", "TOY_EXIT"})
    assert proc is warm.proc and warm.refused is None
    lines = _output(proc).splitlines()
    # the module's body once, as __main__ (not also as an imported module); its stdin is empty, not the pipe
    assert lines == ["heavy imported", "imported", f"main {proc.pid} __main__ ['a', 'trainer.x=1'] late ''"], lines
    assert proc.returncode == 3


@pytest.mark.parametrize(
    ("argv", "extra_env", "why"),
    [
        (ARGV, {"EARLY": "1"}, "its environment sets EARLY"),
        ([sys.executable, "-m", "otherentry", "a"], {}, "is not"),
        (["/usr/bin/python3", "-m", "toyentry", "a"], {}, "is not"),
    ],
)
def test_a_command_it_cannot_run_so_is_refused_and_it_runs_nothing(
    toy_env: dict[str, str], argv: list[str], extra_env: dict[str, str], why: str
) -> None:
    warm = prewarm.start("toyentry", toy_env)
    assert warm.take(argv, extra_env, late_env={"LATE"}) is None
    assert why in (warm.refused or "")
    assert warm.proc.poll() is not None
    assert "main" not in _output(warm.proc)


def test_dismissed_it_exits_without_running_anything(toy_env: dict[str, str]) -> None:
    warm = prewarm.start("toyentry", toy_env)
    warm.dismiss()
    assert warm.proc.poll() is not None
    assert "main" not in _output(warm.proc)
    warm.dismiss()  # again: nothing


def test_the_first_attempt_is_the_prewarmed_driver_and_a_restart_starts_afresh(
    toy_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**toy_env, "TOY_MARKER": str(tmp_path / "failed-once")}
    warm = prewarm.start("toyentry", env)
    first = warm.take(ARGV, {}, late_env=())
    assert first is not None
    log, out = io.StringIO(), io.StringIO()
    rc = restart.supervise(ARGV, env, tmp_path / "ckpt", 1, log, out, first=first)
    assert rc == 0, log.getvalue()
    mains = [line.split() for line in out.getvalue().splitlines() if line.startswith("main ")]
    assert [int(words[1]) for words in mains][0] == first.pid
    assert len(mains) == 2 and int(mains[1][1]) != first.pid
    assert "restart 1/1" in log.getvalue()


class _FakeWarm:
    def __init__(self, module: str, env: dict[str, str]) -> None:
        self.module, self.env, self.taken_with, self.dismissed, self.refused = module, env, None, False, None

    def take(self, argv, extra_env, late_env):  # noqa: ANN001, ANN201
        prefix = ["env", *(f"{k}={v}" for k, v in extra_env.items())] if extra_env else []
        self.taken_with = ([*prefix, *argv], set(late_env))  # the command a fresh driver would have run
        return "the prewarmed driver"

    def dismiss(self) -> None:
        self.dismissed = True


@pytest.mark.parametrize(("recipe", "prewarmed"), [("qwen3_4b_dapo", True), ("qwen3_4b_sft", False)])
def test_the_launcher_prewarms_an_rl_launch_only(
    recipe: str,
    prewarmed: bool,
    launch_environ: Path,
    make_model,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from recipes.launch import cli
    from recipes.launch.planning.plan import LATE_ENV, RL_ENTRY

    started: list[_FakeWarm] = []
    supervised: dict[str, object] = {}

    def start(module: str, env: dict[str, str]) -> _FakeWarm:
        started.append(_FakeWarm(module, env))
        return started[-1]

    def supervise(command, env, *args, first=None, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        supervised.update(command=list(command), env=env, first=first)
        return 0

    monkeypatch.setattr(cli.prewarm, "start", start)
    monkeypatch.setattr(cli.restart, "supervise", supervise)
    monkeypatch.setenv("MODEL_PATH", str(make_model(tmp_path / "model")))
    monkeypatch.setenv("CKPT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("RETOOL_SANDBOX_URL", "http://127.0.0.1:1/run_code")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["run", recipe, "--hw", "cpu", "--no-path-check"]) == 0, err.getvalue()
    assert cli.main(["run", recipe, "--hw", "cpu", "--no-path-check", "--dry-run"]) == 0
    if not prewarmed:
        assert started == [] and supervised["first"] is None
        return
    assert len(started) == 1, "one driver: the dry run starts none"
    warm = started[0]
    assert warm.module == RL_ENTRY and warm.env == supervised["env"]  # the environment the command runs in
    assert warm.taken_with == (supervised["command"], set(LATE_ENV))
    assert supervised["first"] == "the prewarmed driver" and warm.dismissed
    assert cli.PREWARMED_LINE in err.getvalue()
