"""The end-to-end ReTool smoke run behind ``bash scripts/smoke.sh``: data -> SFT -> merge -> sandbox -> RL -> eval.

Why this exists: before anyone spends NPU days on ReTool they should see the whole pipeline work on the machine in
front of them, with the real trainers (verl's SFT trainer under torchrun, ``verl.trainer.main_ppo`` with the agent
loop), the kit's data preparation, tool, sandbox, reward, launcher and hand-off — only the model is tiny. CI runs
the same thing with ``--fast``. Every stage is timed, logged to ``OUT/logs/<stage>.log`` and summarised in a final
table and in ``OUT/summary.json`` (what ``tests/smoke`` checks); the first failing stage stops the run, the
remaining ones are ``skipped``, and the exit status is non-zero.

The SFT stage is sized so the 64-wide random model really learns the hermes ``<tool_call>`` format (short, regular
trajectories from ``recipes/smoke/data``, full-length sequences, lr 2e-2, ~100 steps): the RL stage only exercises
the tool and the sandbox if the policy emits well-formed calls, and the run fails if no tool call reached the sandbox.

    python -m recipes.smoke.pipeline run --out OUT [--fast] [--device auto|cpu]
    python -m recipes.smoke.pipeline tool-call-rate --model DIR --data FILE.parquet [--samples 4]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipes.smoke.progress import (
    RL_STEP_TIME,
    SFT_STEP_TIME,
    Progress,
    median_step_seconds,
    read_tail,
    step_metrics,
)

KIT_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = Path(__file__).resolve().parent / "data"
TOOL_NAME = "code_interpreter"

STAGES = ("model", "data", "sft", "merge", "tool-call check", "sandbox", "rl", "eval", "plots")


@dataclass(frozen=True)
class Sizes:
    """How much each trainer runs; ``--fast`` is the CI size (fewer steps, same stages and checks)."""

    sft_steps: int
    sft_epochs: int  # steps / (rows / batch): verl's cosine schedule spans epochs x steps per epoch
    rl_steps: int
    rl_test_freq: int  # validation after step N (plus the one before training); -1: only before training
    check_samples: int  # sampled completions per prompt for the tool-call rate


# Measured on 2 cores: after 72 SFT steps the model still breaks the JSON of its calls (0/16 well-formed), after 96
# steps 21/32 of its sampled answers are well-formed calls; --fast saves on RL (2 steps, one validation) instead.
FULL = Sizes(sft_steps=96, sft_epochs=4, rl_steps=3, rl_test_freq=3, check_samples=4)
FAST = Sizes(sft_steps=96, sft_epochs=4, rl_steps=2, rl_test_freq=-1, check_samples=2)

SFT_ROWS, SFT_BATCH = 96, 4
SFT_MAX_LENGTH = 336
SFT_OVERRIDES = (
    # A smoke trajectory is 319-323 Qwen tokens with the tool schema (tests/smoke/test_pipeline.py checks the bound);
    # verl's SFT trainer pads every row to max_length and scores all positions against the 151,936-row vocabulary,
    # so 336 instead of 384 is ~12% less work per step. Not truncated (left truncation to 128 tokens is 3x cheaper
    # per step, but a model trained without the system prompt answers the full RL prompt with \\boxed{} instead of a
    # tool call: measured 0/32 calls after 144 steps, against 21/32 after 96 full-length steps).
    f"data.max_length={SFT_MAX_LENGTH}",
    "data.truncation=error",
    "data.train_max_samples=-1",
    "data.val_max_samples=8",
    f"data.train_batch_size={SFT_BATCH}",
    "optim.lr=2e-2",  # a random 64-wide model: a high lr, or the format is not learned in a hundred steps
    "optim.lr_warmup_steps_ratio=0.03",
    "model.enable_gradient_checkpointing=false",  # nothing to save on a tiny model; recomputation costs time
)
RL_OVERRIDES = (
    "data.train_max_samples=-1",
    "data.val_max_samples=-1",
    "data.max_response_length=96",  # tool call + tool response + boxed answer is ~50 tokens
    "actor_rollout_ref.actor.optim.lr=1e-4",
    "trainer.val_before_train=True",
    "trainer.save_freq=-1",
    "trainer.logger=['console','tensorboard']",
)


@dataclass
class Stage:
    """One row of the final table."""

    name: str
    status: str = "skipped"  # ok | failed | skipped
    seconds: float = 0.0
    metric: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    error: str | None = None


class StageError(RuntimeError):
    """A stage failed; the message says why (and where its log is)."""


def say(message: str) -> None:
    print(f"[smoke] {message}", flush=True)


# ----------------------------------------------------------------------------------------------- subprocesses


def kit_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONUNBUFFERED="1",
        HYDRA_FULL_ERROR="1",
        KIT_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(KIT_ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    env.update(extra)
    return env


def run_logged(
    cmd: Sequence[str],
    log: Path,
    env: dict[str, str],
    timeout: float,
    label: str,
    heartbeat_s: float = 20.0,
    progress: Progress | None = None,
) -> None:
    """Run ``cmd`` with output to ``log``, printing a progress line every ``heartbeat_s``: for a trainer
    (``progress``) ``step k/N``, seconds per step and an ETA, otherwise the elapsed time.

    The command gets its own process group, killed on timeout or interrupt, so a hung trainer never outlives us.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(
            list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=KIT_ROOT, start_new_session=True
        )
        try:
            next_beat = start + heartbeat_s
            while proc.poll() is None:
                time.sleep(0.5)
                now = time.monotonic()
                if now - start > timeout:
                    raise StageError(f"{label}: timed out after {timeout:.0f} s (log: {log})")
                if now >= next_beat:
                    next_beat = now + heartbeat_s
                    if progress is None:
                        say(f"  {label}: {now - start:.0f} s")
                    else:
                        say(f"  {label}: {progress.describe(read_tail(log), now - start)}")
        finally:
            if proc.poll() is None:
                _kill_group(proc)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise StageError(f"{label}: exit status {proc.returncode} (log: {log})\n{tail}")


def _kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------------------------------- parsing


def sandbox_counters(metrics_text: str) -> dict[str, int]:
    """The sandbox's Prometheus text -> request counts: ``calls`` (answered /run_code requests), ``ok``,
    ``code_errors`` (code ran and failed: SandboxFusion's ``Failed``), ``sandbox_errors``, ``refused``,
    ``timeouts``; ``failures`` = sandbox errors + refused (the sandbox's fault, not the code's)."""

    def value(pattern: str) -> int:
        return sum(int(float(m)) for m in re.findall(pattern + r"\s+([0-9.e+]+)$", metrics_text, re.M))

    p = "retool_sandbox"
    out = {
        "ok": value(rf'^{p}_requests_total\{{status="Success"\}}'),
        "code_errors": value(rf'^{p}_requests_total\{{status="Failed"\}}'),
        "sandbox_errors": value(rf'^{p}_requests_total\{{status="SandboxError"\}}'),
        "refused": value(rf"^{p}_refused_total\{{[^}}]*\}}"),
        "timeouts": value(rf"^{p}_timeouts_total"),
    }
    out["calls"] = out["ok"] + out["code_errors"] + out["sandbox_errors"]
    out["failures"] = out["sandbox_errors"] + out["refused"]
    return out


# ------------------------------------------------------------------------------------------- tool-call check


def tool_call_rate(
    model_dir: Path,
    parquets: Sequence[Path],
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """How often the model opens its answer with a tool call verl's hermes parser accepts (and names our tool).

    Prompts are rendered exactly as ToolAgentLoop renders them (chat template with the tool schema, generation
    prompt); ``samples`` completions per prompt at ``temperature`` (1.0 = the RL rollout's) plus one greedy one.
    """
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipes.retool.evaluate import parse_tool_calls
    from recipes.retool.schema import TOOL_SCHEMA

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [
        tokenizer.apply_chat_template(row["prompt"], tools=[TOOL_SCHEMA], add_generation_prompt=True, tokenize=False)
        for file in parquets
        for row in pq.read_table(file, columns=["prompt"]).to_pylist()
    ]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    common = dict(max_new_tokens=max_new_tokens, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id)
    width = batch["input_ids"].shape[1]
    torch.manual_seed(seed)
    with torch.no_grad():
        sampled = model.generate(
            **batch, do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=samples, **common
        )
        greedy = model.generate(**batch, do_sample=False, **common)

    def ok(ids: Any) -> tuple[bool, str]:
        text = tokenizer.decode(ids[width:], skip_special_tokens=False)
        return parse_tool_calls(text, TOOL_NAME)[1] > 0, text

    sampled_ok = [ok(ids) for ids in sampled]
    greedy_ok = [ok(ids) for ids in greedy]
    hits = sum(flag for flag, _ in sampled_ok)
    return {
        "prompts": len(prompts),
        "samples": len(sampled_ok),
        "well_formed": hits,
        "rate": hits / len(sampled_ok),
        "greedy_rate": sum(flag for flag, _ in greedy_ok) / len(greedy_ok),
        "temperature": temperature,
        "example": greedy_ok[0][1].replace("<|endoftext|>", ""),
    }


# ------------------------------------------------------------------------------------------------ the stages


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (our own loopback sandbox)
        return response.read().decode()


@dataclass
class Smoke:
    """One smoke run: settings, paths and what the stages found."""

    out: Path
    sizes: Sizes
    device: str  # cpu | cuda | npu
    stages: dict[str, Stage] = field(default_factory=dict)
    sandbox: subprocess.Popen | None = None
    sandbox_url: str = ""

    def __post_init__(self) -> None:
        self.logs = self.out / "logs"
        self.model_dir = self.out / "model" / "tiny-qwen3"
        self.data = self.out / "data"
        self.sft_ckpt = self.out / "sft" / "ckpt"
        self.merged = self.out / "sft" / "hf_merged"
        self.rl_dir = self.out / "rl"
        self.val_files = [self.data / "smoke_val.parquet", self.data / "aime_2025.parquet"]

    # -- helpers

    def platform_overrides(self, phase: str) -> list[str]:
        """On an accelerator: the device abstraction's overrides replace the cpu profile's platform settings."""
        if self.device == "cpu":
            return []
        text = subprocess.run(
            [sys.executable, "-m", "npu_kernels.platform", "overrides", "--phase", phase],
            env=kit_env(KIT_DEVICE=self.device),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line.strip() for line in text.splitlines() if line.strip()] + ["trainer.n_gpus_per_node=1"]

    # -- stages

    def stage_model(self, st: Stage) -> None:
        from recipes.smoke.tiny_model import build_tiny_qwen

        build_tiny_qwen(self.model_dir)
        config = json.loads((self.model_dir / "config.json").read_text())
        st.metric = f"{config['model_type']} hidden {config['hidden_size']} x {config['num_hidden_layers']} layers"

    def stage_data(self, st: Stage) -> None:
        jobs = [
            ("sft", "retool_sft.jsonl", "retool_sft.parquet", []),
            ("rl", "dapo_math.jsonl", "dapo_math.parquet", []),
            ("val", "smoke_val.jsonl", "smoke_val.parquet", []),
            ("val", "aime_2025.jsonl", "aime_2025.parquet", []),
        ]
        counts = {}
        for command, src, dst, extra in jobs:
            cmd = [sys.executable, "-m", "recipes.retool.prepare", command, "--input", str(DATA_DIR / src)]
            run_logged(
                [*cmd, "--output", str(self.data / dst), *extra],
                self.logs / f"prepare_{dst}.log",
                kit_env(),
                120,
                f"prepare {command}",
            )
            import pyarrow.parquet as pq

            counts[dst.removesuffix(".parquet")] = pq.ParquetFile(self.data / dst).metadata.num_rows
        st.details = counts
        st.metric = ", ".join(f"{name} {n}" for name, n in counts.items()) + " rows"

    def stage_sft(self, st: Stage) -> None:
        s = self.sizes
        env = kit_env(
            MODEL_PATH=str(self.model_dir),
            TRAIN_FILE=str(self.data / "retool_sft.parquet"),
            VAL_FILE=str(self.data / "retool_sft.parquet"),
            CKPT_DIR=str(self.sft_ckpt),
            TENSORBOARD_DIR=str(self.out / "sft" / "tensorboard"),
        )
        overrides = [
            *SFT_OVERRIDES,
            f"trainer.total_training_steps={s.sft_steps}",
            f"trainer.total_epochs={s.sft_epochs}",
            f"trainer.save_freq={s.sft_steps}",
            "trainer.test_freq=-1",
            *self.platform_overrides("sft"),
        ]
        log = self.logs / "sft.log"
        st.log = str(log)
        cmd = ["bash", str(KIT_ROOT / "recipes" / "run_qwen3_4b_sft_npu.sh"), "--hw", "cpu", *overrides]
        run_logged(cmd, log, env, timeout=1200, label="sft", progress=Progress(s.sft_steps, SFT_STEP_TIME))
        steps = step_metrics(log.read_text(errors="replace"))
        losses = [steps[k]["train/loss"] for k in sorted(steps) if "train/loss" in steps[k]]
        if len(losses) != s.sft_steps:
            raise StageError(f"sft: {len(losses)} train/loss values logged, expected {s.sft_steps} (log: {log})")
        if not all(math.isfinite(x) for x in losses):
            raise StageError(f"sft: non-finite loss {losses}")
        per_step = median_step_seconds(steps, SFT_STEP_TIME)
        st.details = {"losses": losses, "steps": len(losses), "seconds_per_step": per_step}
        st.metric = f"loss {losses[0]:.2f} -> {losses[-1]:.2f} ({len(losses)} steps, {per_step or 0:.1f} s/step)"

    def stage_merge(self, st: Stage) -> None:
        log = self.logs / "merge.log"
        st.log = str(log)
        cmd = ["bash", str(KIT_ROOT / "scripts" / "sft_to_rl.sh"), "--recipe", "qwen3_4b", "--hw", "cpu"]
        cmd += ["--ckpt-dir", str(self.sft_ckpt), "--target", str(self.merged)]
        run_logged(cmd, log, kit_env(), timeout=300, label="merge")
        weights = sorted(p.name for p in self.merged.glob("*.safetensors"))
        if not weights:
            raise StageError(f"merge: no *.safetensors in {self.merged} (log: {log})")
        st.metric = f"{self.merged.name}: {', '.join(weights)}"

    def stage_check(self, st: Stage) -> None:
        import torch

        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
        result = tool_call_rate(self.merged, self.val_files, samples=self.sizes.check_samples)
        (self.out / "sft" / "tool_call_rate.json").write_text(json.dumps(result, indent=2) + "\n")
        st.details = result
        st.metric = (
            f"tool-call rate {result['well_formed']}/{result['samples']} = {result['rate']:.0%} (T=1), "
            f"greedy {result['greedy_rate']:.0%}"
        )
        say(f"  greedy completion: {result['example'][:160]!r}")
        if result["well_formed"] == 0 and result["greedy_rate"] == 0:
            raise StageError("tool-call check: the SFT model never emits a well-formed <tool_call>")

    def start_sandbox(self, st: Stage) -> None:
        port = free_port()
        self.sandbox_url = f"http://127.0.0.1:{port}"
        log = self.logs / "sandbox.log"
        st.log = str(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "sandbox", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
        with open(log, "w") as out:
            self.sandbox = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=kit_env(), cwd=KIT_ROOT, start_new_session=True
            )
        (self.out / "sandbox.pid").write_text(f"{self.sandbox.pid}\n")
        st.details["pid"] = self.sandbox.pid
        deadline = time.monotonic() + 60
        while True:
            if self.sandbox.poll() is not None:
                raise StageError(f"sandbox: exited with status {self.sandbox.returncode} (log: {log})")
            try:
                http_get(f"{self.sandbox_url}/v1/ping", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise StageError(f"sandbox: no answer on {self.sandbox_url}/v1/ping in 60 s (log: {log})") from None
                time.sleep(0.5)
        health = http_get(f"{self.sandbox_url}/health")
        try:
            st.details["health"] = json.loads(health)
        except ValueError:
            st.details["health"] = health
        st.metric = f"up on {self.sandbox_url}"

    def stop_sandbox(self) -> None:
        if self.sandbox is not None and self.sandbox.poll() is None:
            _kill_group(self.sandbox, grace_s=5)
        (self.out / "sandbox.pid").unlink(missing_ok=True)

    def sandbox_stats(self) -> dict[str, int] | None:
        if self.sandbox is None or self.sandbox.poll() is not None:
            return None
        try:
            return sandbox_counters(http_get(f"{self.sandbox_url}/metrics"))
        except OSError:
            return None

    def stage_rl(self, st: Stage) -> None:
        s = self.sizes
        env = kit_env(
            MODEL_PATH=str(self.merged),
            TRAIN_FILE=str(self.data / "dapo_math.parquet"),
            VAL_FILE=str(self.val_files[0]),
            CKPT_DIR=str(self.rl_dir / "ckpt"),
            TENSORBOARD_DIR=str(self.rl_dir / "tensorboard"),
            RETOOL_SANDBOX_URL=f"{self.sandbox_url}/run_code",
        )
        overrides = [
            *RL_OVERRIDES,
            f"data.val_files=[{','.join(str(p) for p in self.val_files)}]",
            f"trainer.total_training_steps={s.rl_steps}",
            f"trainer.test_freq={s.rl_test_freq}",
            f"trainer.validation_data_dir={self.rl_dir / 'val_generations'}",
            f"trainer.rollout_data_dir={self.rl_dir / 'rollouts'}",
            *self.platform_overrides("rl"),
        ]
        log = self.logs / "rl.log"
        st.log = str(log)
        cmd = ["bash", str(KIT_ROOT / "recipes" / "run_qwen3_4b_dapo_npu.sh"), "--hw", "cpu", *overrides]
        run_logged(cmd, log, env, timeout=1500, label="rl", progress=Progress(s.rl_steps, RL_STEP_TIME))
        steps = step_metrics(log.read_text(errors="replace"))
        train = {k: v for k, v in steps.items() if k >= 1 and "critic/score/mean" in v}
        if sorted(train) != list(range(1, s.rl_steps + 1)):
            raise StageError(f"rl: training steps logged {sorted(train)}, expected 1..{s.rl_steps} (log: {log})")
        bad = {f"{k}:{m}": v for k, ms in train.items() for m, v in ms.items() if not math.isfinite(v)}
        if bad:
            raise StageError(f"rl: non-finite metrics {bad}")
        val = {k: {m: v for m, v in ms.items() if m.startswith("val-core/")} for k, ms in steps.items()}
        val = {k: v for k, v in val.items() if v}
        rollouts = _dumped(self.rl_dir / "rollouts")
        val_dumps = _dumped(self.rl_dir / "val_generations")
        rounds = [int(r.get("tool_rounds", 0)) for r in rollouts]
        st.details = {
            "seconds_per_step": median_step_seconds(train, RL_STEP_TIME),
            "steps": {k: train[k] for k in sorted(train)},
            "reward_mean": [train[k]["critic/score/mean"] for k in sorted(train)],
            "num_turns_mean": [train[k].get("num_turns/mean") for k in sorted(train)],
            "pg_loss": [train[k].get("actor/pg_loss") for k in sorted(train)],
            "val_core": val,
            "rollouts": len(rollouts),
            "rollout_tool_rounds": sum(rounds),
            "tool_rounds_per_response": sum(rounds) / len(rounds) if rounds else 0.0,
            "val_samples": len(val_dumps),
            "val_tool_rounds": sum(int(r.get("tool_rounds", 0)) for r in val_dumps),
        }
        sandbox = self.sandbox_stats()
        st.details["sandbox"] = sandbox
        calls = sandbox["calls"] if sandbox else st.details["rollout_tool_rounds"] + st.details["val_tool_rounds"]
        st.details["tool_calls_executed"] = calls
        acc = _val_acc(val)
        st.metric = (
            f"{st.details['seconds_per_step'] or 0:.1f} s/step; "
            f"reward {' '.join(f'{x:+.2f}' for x in st.details['reward_mean'])}; "
            f"val acc {acc}; tool rounds/response {st.details['tool_rounds_per_response']:.2f}; "
            f"tool calls executed {calls}"
        )
        if calls == 0:
            raise StageError("rl: no tool call reached the sandbox (the policy never emitted a well-formed call)")

    def stage_eval(self, st: Stage) -> None:
        out = self.out / "eval"
        # the last validation (after training; with --fast the one before it)
        cmd = [sys.executable, "-m", "recipes.retool.evaluate", str(self.rl_dir / "val_generations")]
        cmd += [f"--data={p}" for p in self.val_files]
        cmd += ["--tokenizer", str(self.merged), "--json", str(out / "eval.json"), "--markdown", str(out / "eval.md")]
        log = self.logs / "eval.log"
        st.log = str(log)
        run_logged(cmd, log, kit_env(), timeout=300, label="eval")
        report = json.loads((out / "eval.json").read_text())
        parts = []
        for source, m in report["sources"].items():
            key = f"mean@{m['n']}"
            parts.append(f"{source} {key} {m[key]:.2f}")
        tool = report["tool_use"]
        st.details = {"sources": report["sources"], "tool_use": tool, "samples": report["samples"]}
        st.metric = (
            f"{report['samples']} samples; {', '.join(parts)}; tool calls {tool['tool_calls_well_formed']}"
            f"/{tool['tool_calls']} well-formed; code errors {tool['code_errors']}"
        )

    def stage_plots(self, st: Stage) -> None:
        out = self.out / "plots"
        logdirs = [str(self.out / "sft" / "tensorboard"), str(self.rl_dir / "tensorboard")]
        cmd = [sys.executable, "-m", "recipes.retool.plot", *logdirs, "--out", str(out)]
        log = self.logs / "plots.log"
        st.log = str(log)
        run_logged(cmd, log, kit_env(), timeout=300, label="plots")
        pngs = sorted(p.name for p in out.glob("*.png"))
        if not pngs:
            raise StageError(f"plots: no PNG written (log: {log})")
        st.details = {"files": pngs}
        st.metric = f"{len(pngs)} PNGs in {out.name}/"

    # -- the run

    def run(self) -> int:
        steps: list[tuple[str, Callable[[Stage], None]]] = [
            ("model", self.stage_model),
            ("data", self.stage_data),
            ("sft", self.stage_sft),
            ("merge", self.stage_merge),
            ("tool-call check", self.stage_check),
            ("sandbox", self.start_sandbox),
            ("rl", self.stage_rl),
            ("eval", self.stage_eval),
            ("plots", self.stage_plots),
        ]
        self.stages = {name: Stage(name) for name, _ in steps}
        failed = None
        t_run = time.monotonic()
        try:
            for i, (name, fn) in enumerate(steps, start=1):
                st = self.stages[name]
                say(f"stage {i}/{len(steps)}: {name} ...")
                t0 = time.monotonic()
                try:
                    fn(st)
                    st.status = "ok"
                except Exception as exc:  # noqa: BLE001 (any failure ends the run with the stage named)
                    st.status, st.error = "failed", str(exc) if isinstance(exc, StageError) else repr(exc)
                    failed = name
                finally:
                    st.seconds = time.monotonic() - t0
                say(f"stage {i}/{len(steps)}: {name} {st.status} in {st.seconds:.1f} s  {st.metric}")
                if failed:
                    say(f"  {st.error}")
                    break
        finally:
            sandbox = self.sandbox_stats()
            if sandbox is not None:
                st = self.stages["sandbox"]
                st.details["counters"] = sandbox
                st.metric = (
                    f"{sandbox['calls']} calls, {sandbox['failures']} failures, {sandbox['code_errors']} code errors, "
                    f"{sandbox['timeouts']} timeouts"
                )
            self.stop_sandbox()
        total = time.monotonic() - t_run
        summary = self.summary(total, failed)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(render_table(summary), flush=True)
        if failed:
            say(f"FAILED at stage '{failed}': {self.stages[failed].error.splitlines()[0]}")
            return 1
        say(f"all stages ok in {total:.0f} s; artifacts in {self.out}")
        return 0

    def summary(self, total: float, failed: str | None) -> dict[str, Any]:
        env_text = os.environ.get("KIT_SMOKE_ENV_SECONDS", "").strip()  # set by scripts/smoke.sh
        env_seconds = float(env_text or 0)
        stages = [asdict(self.stages[name]) for name in self.stages]
        if env_text:
            stages.insert(0, asdict(Stage("env", "ok", env_seconds, f".venv ready ({sys.executable})")))
        rl = self.stages["rl"].details if "rl" in self.stages else {}
        sft = self.stages["sft"].details if "sft" in self.stages else {}
        return {
            "ok": failed is None,
            "failed_stage": failed,
            "fast": self.sizes == FAST,
            "device": self.device,
            "out": str(self.out),
            "seconds": total + env_seconds,
            "stages": stages,
            "sft_losses": sft.get("losses", []),
            "sft_seconds_per_step": sft.get("seconds_per_step"),
            "rl_seconds_per_step": rl.get("seconds_per_step"),
            "tool_call_rate": self.stages["tool-call check"].details.get("rate"),
            "rl_tool_calls": rl.get("tool_calls_executed", 0),
            "rl_reward_mean": rl.get("reward_mean", []),
            "sandbox": self.stages["sandbox"].details.get("counters") if "sandbox" in self.stages else None,
        }


def _dumped(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for file in sorted(folder.glob("*.jsonl")):
        records += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return records


def _val_acc(val: dict[int, dict[str, float]]) -> str:
    """``step0 x -> stepN y`` of the mean over data sources of ``val-core/<source>/acc/mean@k``."""
    parts = []
    for step in sorted(val):
        accs = [v for k, v in val[step].items() if "/acc/mean@" in k]
        if accs:
            parts.append(f"{sum(accs) / len(accs):.2f}@{step}")
    return " -> ".join(parts) or "n/a"


def render_table(summary: dict[str, Any]) -> str:
    rows = [(s["name"], s["status"], f"{s['seconds']:.1f}", s["metric"]) for s in summary["stages"]]
    rows.append(("total", "ok" if summary["ok"] else "FAILED", f"{summary['seconds']:.1f}", ""))
    widths = [max(len(r[i]) for r in [("stage", "status", "seconds", "key metric"), *rows]) for i in range(3)]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+-" + "-" * 60
    out = [
        line,
        "| "
        + " | ".join(h.ljust(w) for h, w in zip(("stage", "status", "seconds"), widths, strict=True))
        + " | key metric",
    ]
    out.append(line)
    for row in rows:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + " | " + row[3])
    out.append(line)
    return "\n".join(out)


def _exit_on_signals() -> None:
    """SIGTERM (scripts/smoke.sh forwards it) and SIGINT unwind the stack, so every ``finally`` stops its trainer
    process group and the sandbox. SIGINT is re-armed: a background job of a non-interactive shell starts with it
    ignored."""

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def detect_device() -> str:
    from npu_kernels.platform import current_platform

    return current_platform().name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.smoke.pipeline", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the whole smoke run (what scripts/smoke.sh calls)")
    run.add_argument("--out", type=Path, required=True, help="artifacts folder (created; must be empty or absent)")
    run.add_argument("--fast", action="store_true", help="CI size: 2 RL steps, one validation (before training)")
    run.add_argument("--device", choices=("auto", "cpu", "cuda", "npu"), default="auto")
    run.add_argument("--force", action="store_true", help="reuse a non-empty --out (its contents are replaced)")
    rate = sub.add_parser("tool-call-rate", help="sample a model on RL prompts and count well-formed tool calls")
    rate.add_argument("--model", type=Path, required=True)
    rate.add_argument("--data", type=Path, action="append", required=True, help="RL/val parquet (repeatable)")
    rate.add_argument("--samples", type=int, default=4)
    rate.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.command == "tool-call-rate":
        print(json.dumps(tool_call_rate(args.model, args.data, args.samples, args.temperature), indent=2))
        return 0
    _exit_on_signals()
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        if not args.force:
            print(f"smoke: {out} is not empty (use another --out, or --force to replace it)", file=sys.stderr)
            return 2
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    device = detect_device() if args.device == "auto" else args.device
    sizes = FAST if args.fast else FULL
    say(
        f"device {device}; {'fast' if args.fast else 'full'} run: SFT {sizes.sft_steps} steps, RL {sizes.rl_steps} "
        f"steps; artifacts in {out}"
    )
    return Smoke(out, sizes, device).run()


if __name__ == "__main__":
    sys.exit(main())
