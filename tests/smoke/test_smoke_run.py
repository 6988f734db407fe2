"""The main job in CI: ``bash scripts/smoke.sh --fast``, end to end with the real trainers, then its table checked.

Every stage must be ok; the SFT losses finite and falling; the SFT model must emit well-formed tool calls; at least
one tool call must have been executed by the sandbox during RL (from the SFT'd policy, not a mock), rolled out by
the platform's engine (verl's vLLM async server on vLLM's CPU build, which CI requires); the sandbox
must be gone afterwards; eval and plots must exist. Takes minutes (``slow``), never skipped.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from npu_kernels.platform import CPU

pytestmark = pytest.mark.slow

EXPECTED_STAGES = ["env", "model", "data", "sft", "merge", "tool-call check", "sandbox", "rl", "eval", "plots"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("smoke")
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), "--fast", "--out", str(out)],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=1200,
    )
    wall = time.monotonic() - t0
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, f"smoke failed (rc={proc.returncode}):\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    summary = json.loads((out / "summary.json").read_text())
    return {"out": out, "summary": summary, "stdout": proc.stdout, "wall": wall}


def test_every_stage_ok_and_table_printed(smoke: dict) -> None:
    summary = smoke["summary"]
    assert summary["ok"] is True and summary["failed_stage"] is None and summary["fast"] is True
    assert [s["name"] for s in summary["stages"]] == EXPECTED_STAGES
    assert all(s["status"] == "ok" for s in summary["stages"]), [(s["name"], s["status"]) for s in summary["stages"]]
    for name in EXPECTED_STAGES:
        assert f"| {name}" in smoke["stdout"], f"stage {name} missing from the printed table"
    assert (summary["platform"], summary["hardware_profile"], summary["scale"]) == ("cpu", "cpu", "smoke")
    assert summary["device"] == summary["platform"]  # the old field keeps its meaning
    assert summary["sft_seconds_per_step"] > 0 and summary["rl_seconds_per_step"] > 0
    rl_seconds = next(s["seconds"] for s in summary["stages"] if s["name"] == "rl")
    assert 0 < summary["rl_first_step_s"] < rl_seconds, (summary["rl_first_step_s"], rl_seconds)
    assert re.search(r"\[smoke\]   sft: step \d+/96, [0-9.]+ s/step, ETA ", smoke["stdout"]), "no progress line"
    print(
        f"\n[smoke --fast] wall {smoke['wall']:.0f} s; RL's first step {summary['rl_first_step_s']:.0f} s "
        "into its stage"
    )


def test_sft_learned_the_tool_call_format(smoke: dict) -> None:
    summary = smoke["summary"]
    losses = summary["sft_losses"]
    assert len(losses) >= 10 and all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < 0.5 * losses[0], f"SFT loss did not fall: {losses[0]} -> {losses[-1]}"
    assert summary["tool_call_rate"] > 0, "the SFT model never emitted a well-formed <tool_call>"


def test_rl_executed_tool_calls_in_the_sandbox(smoke: dict) -> None:
    summary = smoke["summary"]
    engine = CPU.rollout_engine()  # vLLM's CPU build where the venv has it (CI requires it), else the hf rollout
    assert (summary["rollout_engine"], summary["rollout_engine_version"]) == (engine.name, engine.version), summary
    if engine.name == "vllm":  # the calls came through verl's vLLM async server
        assert "vLLMHttpServer" in (smoke["out"] / "logs" / "rl.log").read_text()
    assert summary["rl_tool_calls"] >= 1
    assert summary["sandbox"]["calls"] >= 1 and summary["sandbox"]["failures"] == 0, summary["sandbox"]
    rl = next(s for s in summary["stages"] if s["name"] == "rl")["details"]
    assert len(rl["reward_mean"]) == 2 and all(math.isfinite(x) for x in rl["reward_mean"])
    assert all(math.isfinite(x) for x in rl["pg_loss"])
    assert rl["val_core"], "no validation metrics (val_before_train)"
    assert rl["rollout_tool_rounds"] + rl["val_tool_rounds"] >= 1


def test_sandbox_stopped(smoke: dict) -> None:
    out: Path = smoke["out"]
    assert not (out / "sandbox.pid").exists()
    pid = next(s for s in smoke["summary"]["stages"] if s["name"] == "sandbox")["details"]["pid"]
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return  # gone
    assert "sandbox" not in cmdline, f"the sandbox (pid {pid}) is still running: {cmdline}"


def test_artifacts(smoke: dict) -> None:
    out: Path = smoke["out"]
    assert list((out / "rl" / "val_generations").glob("*.jsonl")), "no validation generations dumped"
    assert list((out / "rl" / "tensorboard").rglob("events.out.tfevents.*")), "no tensorboard events"
    report = json.loads((out / "eval" / "eval.json").read_text())
    assert report["samples"] > 0 and set(report["sources"]) == {"smoke_val", "aime_2025"}
    pngs = list((out / "plots").glob("*.png"))
    assert {p.stem for p in pngs} >= {"val_acc", "reward", "response_length", "turns", "step_time", "overview"}
    assert all(p.stat().st_size > 5000 for p in pngs)
    assert (out / "sft" / "hf_merged" / "config.json").is_file()
    for log in ("sft.log", "merge.log", "rl.log", "eval.log", "plots.log"):
        assert (out / "logs" / log).is_file()
    for log in ("sft.log", "rl.log"):  # the trainers ran the cpu profile at the smoke scale, explicitly
        assert "--hw cpu --scale smoke" in (out / "logs" / log).read_text().splitlines()[0]
    assert os.path.getsize(out / "logs" / "rl.log") > 0
