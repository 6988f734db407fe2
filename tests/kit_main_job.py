"""The main job's pipeline checks, shared by its two end-to-end tests.

``bash scripts/smoke.sh`` (the learning check on SmolLM2, tests/smoke/test_learning_run.py, in the default run) and
``bash scripts/smoke.sh --fast`` (the same stages on the tiny random model, tests/smoke/test_smoke_run.py, run with
``-m fast_smoke``) go through the same pipeline code (recipes/smoke/pipeline.py); only the model, the task and the
sizes differ. Each check here reads one run's ``summary.json``, stdout and output folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

from kit_testing import REPO_ROOT, interpreter_stack, kit_env

from platforms import CPU, stacks
from recipes.launch.cli import PREWARMED_LINE
from recipes.smoke import startup

PIPELINE_STAGES = ["env", "model", "data", "sft", "merge", "tool-call check", "sandbox", "rl", "eval", "plots"]
# the learning check: no tool-call check (its validation before RL measures the rate, recipes/smoke/learn.py), a verdict
LEARN_STAGES = [*(name for name in PIPELINE_STAGES if name != "tool-call check"), "learn"]
PLOTS = {"val_acc", "reward", "response_length", "turns", "step_time", "overview"}


def run_smoke(out: Path, *args: str, timeout: int) -> dict:
    """``bash scripts/smoke.sh ARGS --out OUT``: {"rc", "summary" ({} if none), "stdout", "stderr", "out", "wall"}."""
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    print(proc.stdout[-6000:])
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    return {
        "rc": proc.returncode,
        "summary": summary,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "out": out,
        "wall": wall,
    }


def check_every_stage_ok(run: dict, stages: list[str], sft_steps: int) -> None:
    """Every stage ran and is ok, in order, in the printed table; the cpu profile; the progress line; RL timed."""
    summary = run["summary"]
    assert summary, f"no summary.json (rc {run['rc']}):\n{run['stdout'][-8000:]}\n{run['stderr'][-4000:]}"
    assert summary["ok"] is True and summary["failed_stage"] is None, (
        f"failed at {summary['failed_stage']}:\n{run['stdout'][-8000:]}"
    )
    assert [s["name"] for s in summary["stages"]] == stages
    assert all(s["status"] == "ok" for s in summary["stages"]), [(s["name"], s["status"]) for s in summary["stages"]]
    for name in stages:
        assert f"| {name}" in run["stdout"], f"stage {name} missing from the printed table"
    assert run["rc"] == 0
    assert (summary["platform"], summary["hardware_profile"], summary["scale"]) == ("cpu", "cpu", "smoke")
    assert summary["device"] == summary["platform"]  # the old field keeps its meaning
    assert summary["sft_seconds_per_step"] > 0 and summary["rl_seconds_per_step"] > 0
    rl_seconds = next(s["seconds"] for s in summary["stages"] if s["name"] == "rl")
    assert 0 < summary["rl_first_step_s"] < rl_seconds, (summary["rl_first_step_s"], rl_seconds)
    check_rl_startup_phases(summary)
    progress = rf"\[smoke\]   sft: step \d+/{sft_steps}, [0-9.]+ s/step, ETA "
    assert re.search(progress, run["stdout"]), "no progress line"


def check_rl_startup_phases(summary: dict) -> None:
    """The first step's time split by phase (recipes/smoke/startup.py) off this stack's real log: each mark showed
    (the verl and Ray lines they wait for are printed by this run), in order, and the phases add up to it."""
    spans = summary["rl_startup"]
    assert list(spans) == [mark.phase for mark in startup.MARKS] + [startup.FIRST_STEP], spans
    assert all(seconds is not None and seconds >= 0 for seconds in spans.values()), spans
    assert math.isclose(sum(spans.values()), summary["rl_first_step_s"], abs_tol=0.01), spans


def check_sft_learned_the_tool_call_format(run: dict) -> None:
    summary = run["summary"]
    losses = summary["sft_losses"]
    assert len(losses) >= 10 and all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < 0.5 * losses[0], f"SFT loss did not fall: {losses[0]} -> {losses[-1]}"
    assert summary["tool_call_rate"] > 0, "the SFT model never emitted a well-formed <tool_call>"
    if summary["task"] == "learn":  # measured by the validation before RL, not by a check stage
        assert summary["tool_call_rate"] == summary["tool_call_rate_before"], summary


def check_rl_executed_tool_calls_in_the_sandbox(run: dict, rl_steps: int) -> None:
    """Calls from the SFT'd policy (not a mock) ran in the sandbox, rolled out by the platform's engine (verl's vLLM
    async server on vLLM's CPU build, which CI requires)."""
    summary = run["summary"]
    # vLLM's CPU build where the venv has it (CI requires it), else the hf rollout; on the stack the run served
    engine = CPU.rollout_engine(stacks.get(summary["stack"]))
    assert (summary["rollout_engine"], summary["rollout_engine_version"]) == (engine.name, engine.version), summary
    rl_log = (run["out"] / "logs" / "rl.log").read_text()
    assert PREWARMED_LINE in rl_log, "the RL launch did not run its prewarmed driver (rl.log)"
    if engine.name == "vllm":  # the calls came through verl's vLLM async server, prefix caching as the stack has it
        assert "vLLMHttpServer" in rl_log
        check_rollout_engine_prefix_caching(rl_log, stacks.get(summary["stack"]))
    assert summary["rl_tool_calls"] >= 1
    assert summary["sandbox"]["calls"] >= 1 and summary["sandbox"]["failures"] == 0, summary["sandbox"]
    rl = next(s for s in summary["stages"] if s["name"] == "rl")["details"]
    assert len(rl["reward_mean"]) == rl_steps and all(math.isfinite(x) for x in rl["reward_mean"])
    assert all(math.isfinite(x) for x in rl["pg_loss"])
    assert rl["val_core"], "no validation metrics (val_before_train)"
    assert rl["rollout_tool_rounds"] + rl["val_tool_rounds"] >= 1


#: What the rollout engine itself logs of prefix caching: vLLM 0.11's engine config (0.6.1) and the argument list verl
#: 0.9.1's vLLMHttpServer prints (vLLM 0.23, whose config line VLLM_LOGGING_LEVEL=WARN hides). The launch's own
#: ``rollout.enable_prefix_caching=...`` override (after a ".") is not the engine's word for it.
ENGINE_PREFIX_CACHING_OFF = re.compile(r"(?<![.\w])enable_prefix_caching=False\b|'--no-enable_prefix_caching'")
ENGINE_PREFIX_CACHING_ON = re.compile(r"(?<![.\w])enable_prefix_caching=True\b|'--enable_prefix_caching'")


def check_rollout_engine_prefix_caching(rl_log: str, stack: stacks.Stack) -> None:
    """The cpu platform's RL setting for the run's stack (CpuPlatform.prefix_caching_overrides) reached the engine
    that served the rollouts. Off on the reference (patch 0026): vLLM 0.11's CPU build with it on died in IPEX's
    decode kernel on GRPO groups that share a cached first block (tests/cpu/test_cpu_grpo_prefix_groups.py, opt-in
    since issue 51: this check guards the setting on every main job, that file the crash it avoids). On, in the
    stack's block size, on the current stack (Stack.vllm_cpu_prefix_block): what its generation's speed rests on."""
    block = stack.vllm_cpu_prefix_block
    wrong, right = (
        (ENGINE_PREFIX_CACHING_ON, ENGINE_PREFIX_CACHING_OFF)
        if block is None
        else (ENGINE_PREFIX_CACHING_OFF, ENGINE_PREFIX_CACHING_ON)
    )
    seen = wrong.search(rl_log)
    assert not seen, (
        f"a rollout engine started with the wrong prefix caching (rl.log): ...{rl_log[seen.start() - 200 : seen.end()]}"
    )
    assert right.search(rl_log), f"the rollout engine did not log prefix caching {'off' if block is None else 'on'}"
    if block is not None:
        # the server prints its arguments one a line: '--block_size', then '32' on the next, after Ray's prefix
        size = re.search(r"'--block_size',[^\n']*\n?[^\n']*'(\d+)'", rl_log)
        assert size and int(size.group(1)) == block, f"the rollout engine's block size is not {block}: {size}"


def check_sandbox_stopped(run: dict) -> None:
    out: Path = run["out"]
    assert not (out / "sandbox.pid").exists()
    pid = next(s for s in run["summary"]["stages"] if s["name"] == "sandbox")["details"]["pid"]
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return  # gone
    assert "sandbox" not in cmdline, f"the sandbox (pid {pid}) is still running: {cmdline}"


def check_artifacts(run: dict, eval_sources: set[str]) -> None:
    out: Path = run["out"]
    assert list((out / "rl" / "val_generations").glob("*.jsonl")), "no validation generations dumped"
    assert list((out / "rl" / "tensorboard").rglob("events.out.tfevents.*")), "no tensorboard events"
    report = json.loads((out / "eval" / "eval.json").read_text())
    assert report["samples"] > 0 and set(report["sources"]) == eval_sources, report["sources"]
    pngs = list((out / "plots").glob("*.png"))
    assert {p.stem for p in pngs} >= PLOTS
    assert all(p.stat().st_size > 5000 for p in pngs)
    assert (out / "sft" / "hf_merged" / "config.json").is_file()
    for log in ("sft.log", "merge.log", "rl.log", "eval.log", "plots.log"):
        assert (out / "logs" / log).is_file()
    for log in ("sft.log", "rl.log"):  # the trainers ran the cpu profile at the smoke scale, explicitly
        assert "--hw cpu --scale smoke" in (out / "logs" / log).read_text().splitlines()[0]
    assert os.path.getsize(out / "logs" / "rl.log") > 0
    check_run_logs(out)
    check_checkpoints_hold_the_model_only(out)


def check_checkpoints_hold_the_model_only(out: Path) -> None:
    """Each stage's last checkpoint holds what its hand-off reads (the model's shards, fsdp_config.json, huggingface/:
    recipes/launch/handoffs/handoff.py check_step_dir) and no optimizer state (recipes/smoke/commands.py MODEL_ONLY):
    the GBs CI's disk ran out of."""
    from recipes.launch.handoffs.handoff import HandoffError, check_step_dir

    verl = interpreter_stack().verl
    for phase in ("sft", "rl"):
        ckpt, layout = out / phase / "ckpt", verl.checkpoint(phase)
        step = layout.tracker_step(ckpt)
        assert step is not None, f"{ckpt}: no checkpoint saved: {sorted(p.name for p in ckpt.iterdir())}"
        try:
            check_step_dir(layout.step_dir(ckpt, step), layout)  # the hand-off's own check
        except HandoffError as exc:
            raise AssertionError(f"{phase}'s checkpoint lacks what its hand-off reads: {exc}") from None
        optim = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("optim_*.pt"))
        assert not optim, f"{phase}'s checkpoint holds the optimizer's state: {optim}"


def check_run_logs(out: Path) -> None:
    """Each trainer's output is also in ``<CKPT_DIR>/run.log`` (recipes/launch/supervision/runlog.py), which the
    launch names first: a log that outlives the terminal, beside the checkpoints on the mount."""
    for stage, ckpt in (("sft", out / "sft" / "ckpt"), ("rl", out / "rl" / "ckpt")):
        run_log = ckpt / "run.log"
        stage_log = (out / "logs" / f"{stage}.log").read_text()
        assert f"run log: {run_log} " in stage_log, stage_log[:3000]
        text = run_log.read_text()
        assert "===== " in text and "run_recipe: run " in text, text[:3000]
        assert re.search(r"(?<![\w/])step:1(\s+-|\s*$)", text, re.M), text[-3000:]  # the trainer's own lines


def check_pipeline(run: dict, stages: list[str], sft_steps: int, rl_steps: int, eval_sources: set[str]) -> None:
    """Every pipeline check above on one run, in order (the current stack's runs: tests/stack091/test_main_job_091.py;
    the reference's keep one test per check, for their diagnoses)."""
    check_every_stage_ok(run, stages, sft_steps)
    check_sft_learned_the_tool_call_format(run)
    check_rl_executed_tool_calls_in_the_sandbox(run, rl_steps)
    check_sandbox_stopped(run)
    check_artifacts(run, eval_sources)
