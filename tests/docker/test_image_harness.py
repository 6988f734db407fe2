"""scripts/test_images.sh (docker/test_images.py) and the stand-in builders, without a docker daemon: their help,
their table, and that every stand-in answers for a pinned base. The builds themselves need a daemon and ~10 GB a
image: `bash scripts/test_images.sh` (README, "Images built and run here")."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from kit_testing import REPO_ROOT

from npu_kernels import pins
from npu_kernels.platform import PROFILES


def _harness():
    spec = importlib.util.spec_from_file_location("kit_test_images", REPO_ROOT / "docker" / "test_images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_help_names_what_it_checks() -> None:
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "test_images.sh"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "stand-in" in proc.stdout and "--keep" in proc.stdout and "--hw" in proc.stdout


def test_every_stand_in_is_for_a_pinned_base_and_has_help() -> None:
    harness = _harness()
    repo_keys = {p.image.base_repo_key for p in PROFILES.values() if p.image}
    for key, script in harness.STANDINS.items():
        assert key in repo_keys and pins.get(key), key
        proc = subprocess.run(["bash", str(REPO_ROOT / script), "--help"], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and "STAND-IN" in proc.stdout, proc.stdout + proc.stderr
        bare = subprocess.run(["bash", str(REPO_ROOT / script)], capture_output=True, text=True, timeout=30)
        assert bare.returncode == 2  # no tag: usage, not a debootstrap


def test_the_table_row() -> None:
    row = _harness().Row("retool-npu-kit:cpu-x", "python:x (stand-in)", 308.4, 9.42, {"build": "ok", "doctor": "ok"})
    assert row.line() == "| retool-npu-kit:cpu-x | python:x (stand-in) | 308 | 9.42 GB | build ok, doctor ok |"
    assert _harness().Row("i", "b").line() == "| i | b | - | - | - |"
