"""``plan --dry-run`` and ``run --dry-run`` print the same text for every recipe and profile (issue 22, finding 2).

Both go through :func:`recipes.launch.cli._plan`; before, only ``run`` applied the profile's environment, so
``plan --dry-run`` left ``VERL_USE_EXTERNAL_MODULES=npu_kernels.auto`` out of the RL command on a2/a3/cuda/h200
while promising the command a launch runs (``recipes/launch/planning/plan.py`` module docstring). In-process: 60 dry
runs as subprocesses would take minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from platforms import PROFILE_NAMES
from recipes.launch import cli
from recipes.launch.run_inputs.catalog import RECIPES


def _dry_run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = cli.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("hw", PROFILE_NAMES)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_plan_and_run_dry_runs_print_the_same(
    recipe: str, hw: str, launch_environ: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planned = _dry_run(capsys, ["plan", "--recipe", recipe, "--hw", hw, "--dry-run", "--no-path-check"])
    run = _dry_run(capsys, ["run", recipe, "--hw", hw, "--dry-run", "--no-path-check"])
    assert planned == run
    assert run[0] == cli.EXIT_OK and "dry run OK" in run[1], run
