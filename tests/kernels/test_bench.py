"""scripts/bench_kernels.py stays runnable: --help, and a shrunken CPU run that prints sane rows."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from kit_testing import REPO_ROOT

import platforms as kit_platform

SCRIPT = REPO_ROOT / "scripts" / "bench_kernels.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = module  # dataclasses resolve string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_kernels", None)


def test_help(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--model {qwen3-4b,qwen2.5-32b,all}" in out and "--full-size" in out


def test_tiny_cpu_run(bench: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kit_platform, "current_platform", lambda: kit_platform.CPU)
    args = ["--reduce", "40", "--seq", "16", "--iters", "1", "--warmup", "0"]
    assert bench.main([*args, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["layer"] for r in rows] == ["qwen3-4b", "qwen2.5-32b"]
    for row in rows:
        assert row["backend"] == "reference" and row["dtype"] == "bfloat16" and row["seq"] == 16
        assert row["fused_ms"] > 0 and row["unfused_ms"] > 0
        assert row["err_fused"] == row["err_unfused"]  # reference backend: same math, same bits
        assert max(row["err_fused"].values()) < 5e-2
    assert bench.main([*args, "--model", "qwen3-4b"]) == 0
    out = capsys.readouterr().out
    assert "REDUCED SIZE on cpu" in out and "| qwen3-4b | h64 q1/kv1x128 i243 | 16 | bfloat16 | reference |" in out
