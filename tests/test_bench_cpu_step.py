"""scripts/bench_cpu_step.py without running trainers: CPU flags, the variants and the exact commands and
environments they run with, the per-step statistic, and the verdicts (bf16 ratio, the 15% allocator bar).

The timing itself is the benchmark's job (minutes per variant); the trainers it starts are the smoke's and are run
end to end by tests/smoke and tests/cpu.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms.stacks import REFERENCE

SCRIPT = REPO_ROOT / "scripts" / "bench_cpu_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cpu_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cpu_step"] = module
    spec.loader.exec_module(module)
    return module


X86 = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse avx avx2 fma
processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse avx avx2 fma
"""
SAPPHIRE = "model name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 sve\nCPU part\t: 0xd0c\n"


def test_cpu_flags(bench) -> None:
    info = bench.cpu_info(X86)
    assert info["model"] == "AMD EPYC 7B13"
    assert info["flags"] == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}
    assert not bench.fast_bf16(info)
    assert bench.fast_bf16(bench.cpu_info(SAPPHIRE))
    arm = bench.cpu_info(ARM)
    assert not any(arm["flags"].values()) and not bench.fast_bf16(arm)


def test_median_leaves_out_the_warm_up_step(bench) -> None:
    assert bench.median_after_warmup({1: 60.0, 2: 2.0, 3: 3.0, 4: 2.5}) == 2.5
    assert bench.median_after_warmup({1: 7.0}) == 7.0
    assert bench.median_after_warmup({}) is None


def test_variants(bench) -> None:
    names = [v.name for v in bench.variants(["fp32", "bf16"], "/usr/lib/libtcmalloc_minimal.so.4", REFERENCE)]
    assert names == ["fp32", "bf16", "fp32-glibc", "fp32-glibc-no-thp"]
    assert [v.name for v in bench.variants(["fp32"], None, REFERENCE)] == ["fp32", "fp32-glibc-no-thp"]
    assert [v.name for v in bench.variants(["bf16"], "/x.so", REFERENCE)] == ["bf16"]


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_commands_and_environments(bench, stage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each variant runs the launcher's own command for --hw cpu with the cpu environment, changed only as named."""
    fake = tmp_path / "libtcmalloc_minimal.so.4"
    fake.write_bytes(b"")
    monkeypatch.setattr("platforms.cpu.find_tcmalloc", lambda: str(fake))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("KIT_CPU_TCMALLOC", raising=False)
    runner = bench.Bench(tmp_path / "out", REFERENCE, sft_steps=3, rl_steps=2, timeout=10)
    commands = {v.name: runner.command(stage, v) for v in bench.variants(["fp32", "bf16"], str(fake), REFERENCE)}

    cmd, env = commands["fp32"]
    recipe = "retool_qwen3_4b_sft" if stage == "sft" else "retool_qwen3_4b_dapo"
    assert cmd[cmd.index("--config-name") + 1] == recipe
    assert f"trainer.total_training_steps={3 if stage == 'sft' else 2}" in cmd
    assert env["LD_PRELOAD"] == str(fake) and env["THP_MEM_ALLOC_ENABLE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    key = "model.fsdp_config.mixed_precision.param_dtype" if stage == "sft" else "actor_rollout_ref.rollout.dtype"
    assert f"{key}={'fp32' if stage == 'sft' else 'float32'}" in cmd

    bf16_cmd, bf16_env = commands["bf16"]
    assert f"{key}={'bf16' if stage == 'sft' else 'bfloat16'}" in bf16_cmd
    assert bf16_env["LD_PRELOAD"] == str(fake)  # same allocator: only the dtype differs

    _, glibc = commands["fp32-glibc"]
    assert "LD_PRELOAD" not in glibc and glibc["THP_MEM_ALLOC_ENABLE"] == "1"
    _, plain = commands["fp32-glibc-no-thp"]
    assert "LD_PRELOAD" not in plain and plain["THP_MEM_ALLOC_ENABLE"] == "0"


def _result(bench, stage: str, variant: str, median: float | None, error: str | None = None):
    return bench.Result(stage, variant, "fp32", {}, [median or 0.0], median, 1.0, "log", error)


def test_verdicts(bench) -> None:
    results = [
        _result(bench, "sft", "fp32", 2.0),
        _result(bench, "sft", "bf16", 48.0),
        _result(bench, "sft", "fp32-glibc", 3.0),
        _result(bench, "sft", "fp32-glibc-no-thp", 5.0),
        _result(bench, "rl", "fp32", 19.0),
        _result(bench, "rl", "fp32-glibc", 20.0),
    ]
    summary = bench.summarize(results, bench.cpu_info(X86), "/lib/libtcmalloc_minimal.so.4")
    verdicts = summary["verdicts"]
    assert "sft: bf16/fp32 = 24.0x per step" in verdicts
    assert any(v.startswith("sft: tcmalloc saves 33% per step") and "adopted" in v for v in verdicts), verdicts
    assert any(v.startswith("rl: tcmalloc saves 5% per step") and "below the threshold" in v for v in verdicts)
    assert "sft: THP_MEM_ALLOC_ENABLE=1 saves 40% per step (glibc)" in verdicts
    rows = {(r["stage"], r["variant"]): r for r in summary["results"]}
    assert rows[("sft", "bf16")]["vs_fp32"] == 24.0
    text = bench.render(summary)
    assert "avx512_bf16 no" in text and "fast bf16 hardware (avx512_bf16 or amx_bf16): no" in text


def test_failed_variant_gives_no_verdict(bench) -> None:
    results = [_result(bench, "sft", "fp32", 2.0), _result(bench, "sft", "bf16", None, error="timed out after 10 s")]
    summary = bench.summarize(results, bench.cpu_info(X86), None)
    assert not any("bf16/fp32" in v for v in summary["verdicts"])
    assert "ERROR: timed out after 10 s" in bench.render(summary)
