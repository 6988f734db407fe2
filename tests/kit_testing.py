"""Helpers shared by the kit's tests (importable as `kit_testing`; pytest puts tests/ on sys.path).

The patch tests prove two things: the installed (patched) verl behaves, and the same check fails on
unpatched verl 0.6.1. The unpatched package is taken from the base commit of the patched git tree
that scripts/setup_verl.sh built (tag ``v0.6.1``), so no network is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def verl_tree() -> Path:
    """The patched verl git tree (KIT_VERL_TREE, default build/verl as the test command makes it)."""
    return Path(os.environ.get("KIT_VERL_TREE", REPO_ROOT / "build" / "verl"))


def kit_env(**extra: str) -> dict[str, str]:
    """Environment for subprocesses: no torch_npu autoload, the kit importable, quiet Ray."""
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p)
    env.update(extra)
    return env


@dataclass
class UnpatchedVerl:
    """An importable copy of the unpatched verl package, and a way to run a check against it."""

    root: Path

    def run(self, test_file: str, func: str, timeout: float = 300) -> subprocess.CompletedProcess:
        code = textwrap.dedent(
            f"""
            import runpy, sys, verl
            assert verl.__file__.startswith({str(self.root)!r}), verl.__file__
            runpy.run_path({test_file!r})[{func!r}]()
            """
        )
        env = kit_env()
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), env["PYTHONPATH"]])
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
        )

    def expect_failure(self, test_file: str, func: str, match: str, timeout: float = 300) -> str:
        """Run ``func`` from ``test_file`` against unpatched verl; it must fail and print ``match``."""
        proc = self.run(test_file, func, timeout=timeout)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"{func} passed on UNPATCHED verl 0.6.1; the test does not cover its patch:\n{out}"
        assert match in out, f"{func} failed on unpatched verl, but not with {match!r}:\n{out[-4000:]}"
        return out
