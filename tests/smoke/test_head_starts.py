"""The smoke's head starts (``HEAD_STARTS``): the sandbox begins while the merge (or reuse) runs, the plots while
eval runs, and a process begun for a stage the run does not reach is stopped with the run.

The stages here are stand-ins that record what had begun when they ran; the sandbox is a stand-in for
:class:`recipes.smoke.sandbox_service.SandboxService`; the plots command is a real child process.
"""

from __future__ import annotations

import sys
from pathlib import Path

from platforms import PROFILES
from platforms.stacks import REFERENCE
from recipes.smoke.commands import HEAD_STARTS, STAGES, Command
from recipes.smoke.learn import LEARN, LEARN_TASK
from recipes.smoke.pipeline import Smoke
from recipes.smoke.report import REUSE_STAGE, Stage
from recipes.smoke.supervisor import StageError, kit_env

PLOTTER = (
    "import pathlib, sys; out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True); "
    "(out / 'a.png').write_bytes(b'png'); print('plotted')"
)


class FakeSandbox:
    def __init__(self) -> None:
        self.launched = False

    def launch(self) -> None:
        self.launched = True

    def stats(self) -> None:
        return None

    def stop(self) -> None:
        pass


def _smoke(tmp_path: Path, names: list[str], plots_code: str, failing: str = "") -> tuple[Smoke, dict[str, dict]]:
    (tmp_path / "run").mkdir()
    smoke = Smoke(tmp_path / "run", LEARN, PROFILES["cpu"], REFERENCE, task=LEARN_TASK)
    smoke.sandbox = FakeSandbox()  # type: ignore[assignment]
    smoke.plots_command = lambda: Command(
        "plots", [sys.executable, "-c", plots_code, str(smoke.out / "plots")], kit_env()
    )  # type: ignore[method-assign]
    seen: dict[str, dict] = {}

    def stage(name: str):
        def run(st: Stage) -> None:
            seen[name] = {"sandbox": smoke.sandbox.launched, "plots": "plots" in smoke.ahead}
            if name == failing:
                raise StageError(f"{name} failed")
            if name == "plots":
                Smoke.stage_plots(smoke, st)

        return run

    smoke.steps = lambda: [(name, stage(name)) for name in names]  # type: ignore[method-assign]
    return smoke, seen


def test_the_sandbox_and_the_plots_begin_while_the_stage_before_runs(tmp_path: Path) -> None:
    smoke, seen = _smoke(tmp_path, ["sft", "merge", "sandbox", "rl", "eval", "plots"], PLOTTER)
    assert smoke.run() == 0
    assert seen["sft"] == {"sandbox": False, "plots": False}
    assert seen["merge"]["sandbox"] and seen["sandbox"]["sandbox"]
    assert not seen["rl"]["plots"] and seen["eval"]["plots"]
    assert "plotted" in (smoke.logs / "plots.log").read_text()
    assert smoke.ahead == {}  # the plots stage took its child over and waited for it


def test_a_head_start_is_only_for_a_stage_the_run_has(tmp_path: Path) -> None:
    smoke, seen = _smoke(tmp_path, ["merge", "eval"], PLOTTER)
    assert smoke.run() == 0
    assert not seen["merge"]["sandbox"] and not seen["eval"]["plots"]


def test_a_child_begun_for_a_stage_the_run_did_not_reach_is_stopped(tmp_path: Path) -> None:
    smoke, _ = _smoke(tmp_path, ["eval", "plots"], "import time; time.sleep(300)", failing="eval")
    assert smoke.run() == 1
    child = smoke.ahead["plots"].proc
    assert child.wait(timeout=30) is not None


def test_every_head_start_comes_before_its_stage() -> None:
    order = [REUSE_STAGE, *STAGES]
    for first, then in HEAD_STARTS.items():
        assert first in order and then in STAGES
        assert order.index(first) < order.index(then), (first, then)
