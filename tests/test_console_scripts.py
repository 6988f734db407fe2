"""Every user-facing command in pyproject.toml's [project.scripts] is a ``retool-<verb>`` with a working ``--help``."""

from __future__ import annotations

import importlib

import pytest
import tomllib
from kit_testing import REPO_ROOT

SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_names_follow_the_house_rule() -> None:
    assert SCRIPTS and all(name.startswith("retool-") for name in SCRIPTS), sorted(SCRIPTS)
    expected = {"retool-sandbox", "retool-prepare", "retool-doctor", "retool-eval", "retool-plot", "retool-bundle"}
    assert expected | {"retool-launch", "retool-models"} <= set(SCRIPTS), sorted(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module, _, function = SCRIPTS[name].partition(":")
    entry = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as exit_info:
        entry(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and len(out.splitlines()) > 3, out
