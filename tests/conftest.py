"""Shared fixtures (helpers live in kit_testing.py)."""

from __future__ import annotations

import subprocess
import tarfile

import pytest
from kit_testing import UnpatchedVerl, verl_tree


@pytest.fixture(scope="session")
def unpatched_verl(tmp_path_factory: pytest.TempPathFactory) -> UnpatchedVerl:
    tree = verl_tree()
    if not (tree / ".git").exists():
        pytest.fail(f"no patched verl tree at {tree}: run scripts/setup_verl.sh --source sdist --dest {tree}")
    dest = tmp_path_factory.mktemp("verl-unpatched")
    archive = dest / "base.tar"
    subprocess.run(
        ["git", "-C", str(tree), "archive", "--format=tar", "-o", str(archive), "v0.6.1", "verl"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return UnpatchedVerl(dest)
