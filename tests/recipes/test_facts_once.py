"""Facts once (issue 41): the plan derives every number once; the report only formats; the launch walk stays short.

What would fail: a row of the dry-run table that derives its number again while it renders (the world size was
computed five times for one table), a check that recomputes what the plan holds, a second read of the model's
config.json, and a launch whose data wanders through more modules than it did when this was measured
(tests/launch_walk.py says how the walk is counted).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kit_testing import interpreter_stack
from launch_walk import walk

from recipes.launch.planning import facts, plan, report
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.launch.sizing import memory

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

#: Measured with tests/launch_walk.py. Before issue 41 (41c02a2): qwen3_4b_dapo on a3 10 modules, 52 entries,
#: 43 returns, report.py entered 10 times; qwen3_4b_sft 9 / 36 / 28, report.py 7 times. With the facts derived once:
#: 8 / 24 / 17 and 8 / 18 / 11; with the plan calling the checks once (checks.check_plan): 8 / 20 / 13 and 8 / 16 / 9.
#: Issue 44 added one stage the checks enter once, the values a run is given against their domains
#: (recipes/launch/planning/validate_values.py): 9 / 22 / 14 and 9 / 18 / 10. Issue 52 added one stage the RL checks
#: enter once, the values against what the installed verl accepts (verl_check.py), which asks its two readers of verl
#: (verl_values.py, verl_keys.py) one question each: 12 / 36 / 25 for RL, SFT unchanged.
WALK_BOUNDS = {("qwen3_4b_dapo", "a3"): (12, 36, 25), ("qwen3_4b_sft", "a3"): (9, 18, 10)}

#: What the report may call outside itself while it renders: formatting helpers and the properties of the plan's
#: value objects (they read, they do not derive).
FORMATTING = {
    ("recipes.launch.sizing.budget", "human"),
    ("recipes.launch.sizing.ray_cpus", "total"),
    ("recipes.launch.sizing.ray_cpus", "describe"),
    ("recipes.launch.sizing.ray_cpus", "<genexpr>"),  # inside total and describe
    ("recipes.launch.run_inputs.inputs", "model_key"),  # the name of the model's config key, for the model row
    ("recipes.launch.planning.facts", "trajectories"),
    ("recipes.launch.planning.facts", "updates"),
    ("recipes.launch.planning.facts", "accumulation"),
    ("recipes.launch.sizing.budget", "total"),
    ("recipes.launch.sizing.memory", "train_gb"),
    ("recipes.launch.planning.parity", "describe"),
    ("platforms.profiles", "note"),
}


@pytest.mark.parametrize(("recipe", "hw"), list(WALK_BOUNDS))
def test_the_launch_walk_stays_short(recipe: str, hw: str, tmp_path: Path) -> None:
    found = walk(recipe, hw, tmp_path)
    modules, entries, returns = WALK_BOUNDS[(recipe, hw)]
    print(
        f"\n{recipe} {hw}: {found.distinct} modules, {found.entries} entries, {found.returns} returns: {found.line()}"
    )
    assert found.entered("recipes.launch.planning.report") == 1, found.line()
    assert found.distinct <= modules and found.entries <= entries and found.returns <= returns, found.line()


def _built(name: str = "qwen3_4b_dapo", hw: str = "a3") -> plan.Plan:
    built = plan.build(RECIPES[name], hw, STACK, [], path_check=False, environ={"HOME": "/nonexistent/kit-home"})
    assert built.facts is not None, built.errors
    return built


@pytest.mark.parametrize("name", ["qwen3_4b_dapo", "qwen3_4b_sft"])
def test_the_report_only_formats(name: str) -> None:
    """Every function of the kit that runs while the table renders is the report's own or a formatting helper."""
    built = _built(name)
    called: set[tuple[str, str]] = set()

    def profile(frame, event: str, _arg: object) -> None:  # noqa: ANN001
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith(("recipes.", "platforms")) and module != report.__name__:
            called.add((module, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        report.render(built, dry_run=True)
    finally:
        sys.setprofile(None)
    assert called <= FORMATTING, f"the report derives or probes while it renders: {sorted(called - FORMATTING)}"


def test_each_fact_is_derived_once_per_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """One layout (the world size and its divisions) and one read of the model's shape per plan, dry run or launch."""
    counts = {"layout": 0, "model": 0, "shape": 0}

    def counting(name: str, original):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(facts, "_layout", counting("layout", facts._layout))
    monkeypatch.setattr(facts, "_model", counting("model", facts._model))
    monkeypatch.setattr(memory, "facts_from_config", counting("shape", memory.facts_from_config))
    built = _built()
    report.render(built, dry_run=True)
    assert counts == {"layout": 1, "model": 1, "shape": 1}, counts
