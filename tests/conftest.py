"""Shared fixtures (helpers live in kit_testing.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kit_testing import UnpatchedVerl, extract_verl, verl_tree, verl_without_patch


@pytest.fixture(scope="session")
def unpatched_verl(tmp_path_factory: pytest.TempPathFactory) -> UnpatchedVerl:
    tree = verl_tree()
    if not (tree / ".git").exists():
        pytest.fail(f"no patched verl tree at {tree}: run scripts/setup_verl.sh --source sdist --dest {tree}")
    return UnpatchedVerl(extract_verl("v0.6.1", tmp_path_factory.mktemp("verl-unpatched")))


@pytest.fixture(scope="session")
def kit_verl_without(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], UnpatchedVerl]:
    """``kit_verl_without("0024")``: the kit's verl less one patch (kit_testing.verl_without_patch), made once."""
    made: dict[str, UnpatchedVerl] = {}

    def make(patch_number: str) -> UnpatchedVerl:
        if patch_number not in made:
            dest = tmp_path_factory.mktemp(f"verl-without-{patch_number}")
            made[patch_number] = verl_without_patch(dest, patch_number)
        return made[patch_number]

    return make
