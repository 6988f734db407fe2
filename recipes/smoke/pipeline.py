"""The end-to-end ReTool smoke run's stages: model -> data -> SFT -> merge -> tool-call check -> sandbox -> RL -> eval
-> plots, what each one runs and what it must find.

Why this exists: before anyone spends NPU days on ReTool they should see the whole pipeline work on the machine in
front of them, with the real trainers (verl's SFT trainer under torchrun, ``verl.trainer.main_ppo`` with the agent
loop), the kit's data preparation, tool, sandbox, reward, launcher and hand-off — only the model is tiny. CI runs
the same thing with ``--fast``. Every stage is timed, logged to ``OUT/logs/<stage>.log`` and summarised in a final
table and in ``OUT/summary.json`` (:mod:`recipes.smoke.report`); the first failing stage stops the run, the remaining
ones are ``skipped``, and the exit status is non-zero.

The trainers run through the kit's own launcher with the platform's own hardware profile at the ``smoke`` scale
(``--hw <profile> --scale smoke``): on a CPU that is the ``cpu`` profile; on an NPU or GPU host the same tiny
pipeline checks the accelerator stack (the profile's environment, one device: ``trainer.n_gpus_per_node=1``).

The SFT stage is sized so the 64-wide random model really learns the hermes ``<tool_call>`` format (short, regular
trajectories from ``recipes/smoke/data``, full-length sequences, lr 2e-2, ~100 steps): the RL stage only exercises
the tool and the sandbox if the policy emits well-formed calls, and the run fails if no tool call reached the sandbox.

``--from-sft DIR`` starts from an earlier run instead: a ``reuse`` stage copies its data and merged SFT model, then
the stages from the sandbox on run as usual (to try RL settings or a sabotage without redoing SFT: the learning
check's sensitivity bench, :mod:`recipes.smoke.bench_learn`).

The command line is :mod:`recipes.smoke.cli` (``python -m recipes.smoke``); ``python -m recipes.smoke.pipeline``
is kept as an alias of it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from platforms import HardwareProfile
from platforms.cpu_info import cpu_info
from platforms.stacks import Stack
from recipes.launch.supervision.trace import rollout_traces
from recipes.retool.generations import tool_rounds
from recipes.smoke.commands import CHECK_STAGE, FAST, HEAD_STARTS, SCALE, STAGES, Sizes, SmokeCommands
from recipes.smoke.progress import (
    RL_STEP_TIME,
    SFT_STEP_MARK,
    SFT_STEP_TIME,
    Progress,
    median_step_seconds,
    read_tail,
    step_metrics,
)
from recipes.smoke.report import REUSE_STAGE, RunFacts, Stage, render_table, summary, val_acc
from recipes.smoke.sandbox_service import SandboxService
from recipes.smoke.startup import describe as describe_startup
from recipes.smoke.supervisor import StageError, Started, kill_group, run_logged, say, start_logged, wait_logged


def _dumped(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for file in sorted(folder.glob("*.jsonl")):
        records += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return records


class Smoke(SmokeCommands):
    """One smoke run: its commands (:class:`SmokeCommands`), its stages, and what the stages found."""

    def __init__(self, out: Path, sizes: Sizes, profile: HardwareProfile, stack: Stack, **options: Any) -> None:
        """``stack``: the stack the run serves; ``options``: :class:`SmokeCommands`' keywords (trace, rollout, task,
        seed, rl_extra)."""
        super().__init__(out, sizes, profile, stack, **options)
        self.stages: dict[str, Stage] = {}
        self.try_number = 1  # the learning check's second try is 2 (_second_try): never a third
        self.sandbox = SandboxService(self.logs / "sandbox.log", out / "sandbox.pid", self.helper_env())
        self.ahead: dict[str, Started] = {}  # children begun before their stage (HEAD_STARTS)

    # -- stages

    def stage_model(self, st: Stage) -> None:
        if self.user_model is not None:  # --model: the user's checkpoint, used as it is
            if not (self.model_dir / "config.json").is_file():
                raise StageError(f"model: {self.model_dir} has no config.json (--model needs a Hugging Face folder)")
        elif self.task.model == "smollm2":
            from recipes.smoke import smollm2

            smollm2.build(self.model_dir)
        else:
            from recipes.smoke.tiny_model import build_tiny_qwen

            build_tiny_qwen(self.model_dir, hidden_size=self.stack.tiny_hidden_size, seed=self.seed)
        config = json.loads((self.model_dir / "config.json").read_text())
        st.details = {"path": str(self.model_dir)}
        st.metric = (
            f"{config['model_type']} hidden {config['hidden_size']} x {config['num_hidden_layers']} layers "
            f"({self.model_dir})"
        )

    def stage_data(self, st: Stage) -> None:
        import pyarrow.parquet as pq

        if self.task.generate is not None:  # the task writes its own source files first (learning check)
            self.task.generate(self.sources, self.seed)
        counts = {}
        for job, cmd in zip(self.task.data_jobs, self.data_commands(), strict=True):
            run_logged(cmd.argv, self.logs / f"prepare_{job.output}.log", cmd.env, 120, f"prepare {job.command}")
            counts[job.output.removesuffix(".parquet")] = pq.ParquetFile(self.data / job.output).metadata.num_rows
        st.details = counts
        st.metric = ", ".join(f"{name} {n}" for name, n in counts.items()) + " rows"

    def stage_sft(self, st: Stage) -> None:
        s, cmd = self.sizes, self.sft_command()
        log = self.logs / "sft.log"
        st.log = str(log)
        progress = Progress(s.sft_steps, SFT_STEP_TIME, SFT_STEP_MARK)
        clock = run_logged(cmd.argv, log, cmd.env, timeout=1200, label="sft", progress=progress)
        steps = step_metrics(log.read_text(errors="replace"))
        losses = [steps[k]["train/loss"] for k in sorted(steps) if "train/loss" in steps[k]]
        if len(losses) != s.sft_steps:
            raise StageError(f"sft: {len(losses)} train/loss values logged, expected {s.sft_steps} (log: {log})")
        if not all(math.isfinite(x) for x in losses):
            raise StageError(f"sft: non-finite loss {losses}")
        # verl 0.6.1 logs each step's duration; 0.9.1 none, so the gaps between its step lines tell it
        per_step = median_step_seconds(steps, SFT_STEP_TIME) or (clock.seconds_per_step() if clock else None)
        st.details = {"losses": losses, "steps": len(losses), "seconds_per_step": per_step}
        st.metric = f"loss {losses[0]:.2f} -> {losses[-1]:.2f} ({len(losses)} steps, {per_step or 0:.1f} s/step)"

    def stage_merge(self, st: Stage) -> None:
        cmd = self.merge_command()
        log = self.logs / "merge.log"
        st.log = str(log)
        run_logged(cmd.argv, log, cmd.env, timeout=300, label="merge")
        weights = sorted(p.name for p in self.merged.glob("*.safetensors"))
        if not weights:
            raise StageError(f"merge: no *.safetensors in {self.merged} (log: {log})")
        st.metric = f"{self.merged.name}: {', '.join(weights)}"

    def stage_check(self, st: Stage) -> None:
        import torch

        from recipes.smoke.toolcheck import tool_call_rate

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

    def stage_reuse(self, st: Stage) -> None:
        """``--from-sft``: the earlier run's data, merged SFT model and SFT curves, copied rather than linked so that
        nothing this run does (or a later ``--force`` on it) can change the earlier run's files."""
        source = self.from_sft
        assert source is not None
        copied = {}
        for part in ("data", "sft/hf_merged", "sft/tensorboard"):
            if not (source / part).is_dir():
                raise StageError(f"reuse: {source / part} is missing (an earlier run's --out has it after its merge)")
            shutil.copytree(source / part, self.out / part, symlinks=True)
            copied[part] = sum(f.stat().st_size for f in (self.out / part).rglob("*") if f.is_file())
        if not sorted(self.merged.glob("*.safetensors")):
            raise StageError(f"reuse: no *.safetensors in {source / 'sft' / 'hf_merged'}")
        st.details = {"from": str(source), "bytes": copied}
        st.metric = f"data + SFT model of {source} ({sum(copied.values()) / 2**20:.0f} MB copied)"

    def stage_sandbox(self, st: Stage) -> None:
        st.log = str(self.sandbox.log)
        st.details = self.sandbox.start()
        self.sandbox_url = self.sandbox.url
        st.metric = f"up on {self.sandbox_url}"

    def stage_rl(self, st: Stage) -> None:
        s, cmd = self.sizes, self.rl_command(self.sandbox_url)
        log = self.logs / "rl.log"
        st.log = str(log)
        clock = run_logged(
            cmd.argv, log, cmd.env, timeout=1500, label="rl", progress=Progress(s.rl_steps, RL_STEP_TIME)
        )
        first = clock.seconds if clock else None
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
        rounds = [tool_rounds(r) for r in rollouts]
        st.details = {
            "seconds_per_step": median_step_seconds(train, RL_STEP_TIME),
            "first_step_s": first,
            "startup": clock.startup_phases() if clock else {},
            "steps": {k: train[k] for k in sorted(train)},
            "reward_mean": [train[k]["critic/score/mean"] for k in sorted(train)],
            "num_turns_mean": [train[k].get("num_turns/mean") for k in sorted(train)],
            "pg_loss": [train[k].get("actor/pg_loss") for k in sorted(train)],
            "val_core": val,
            "rollouts": len(rollouts),
            "rollout_tool_rounds": sum(rounds),
            "tool_rounds_per_response": sum(rounds) / len(rounds) if rounds else 0.0,
            "val_samples": len(val_dumps),
            "val_tool_rounds": sum(tool_rounds(r) for r in val_dumps),
        }
        counters = self.sandbox.stats()
        st.details["sandbox"] = counters
        calls = counters["calls"] if counters else st.details["rollout_tool_rounds"] + st.details["val_tool_rounds"]
        st.details["tool_calls_executed"] = calls
        st.metric = (
            f"{self.rollout_engine().label()}; first step at {first or 0:.0f} s; "
            f"{st.details['seconds_per_step'] or 0:.1f} s/step; "
            f"reward {' '.join(f'{x:+.2f}' for x in st.details['reward_mean'])}; "
            f"val acc {val_acc(val)}; tool rounds/response {st.details['tool_rounds_per_response']:.2f}; "
            f"tool calls executed {calls}"
        )
        if st.details["startup"]:
            say(f"  rl: first step at {first:.0f} s: {describe_startup(st.details['startup'])}")
        if calls == 0:
            raise StageError("rl: no tool call reached the sandbox (the policy never emitted a well-formed call)")
        if self.trace:
            self._check_traces(st)

    def _check_traces(self, st: Stage) -> None:
        """--trace: the rollouts reached mlflow's file store, with the tool's own spans among them."""
        traces, with_tool = rollout_traces(self.trace_store)
        st.details.update(rollout_traces=traces, traces_with_tool_call=with_tool, trace_store=str(self.trace_store))
        st.metric += f"; {traces} rollout traces ({with_tool} with a tool call) in {self.trace_store}"
        if not traces:
            raise StageError(f"rl: --trace wrote no rollout trace to {self.trace_store}")
        if not with_tool:
            raise StageError(f"rl: no rollout trace in {self.trace_store} has a span of the code tool")

    def stage_eval(self, st: Stage) -> None:
        cmd = self.eval_command()
        log = self.logs / "eval.log"
        st.log = str(log)
        run_logged(cmd.argv, log, cmd.env, timeout=300, label="eval")
        report = json.loads((self.out / "eval" / "eval.json").read_text())
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

    def stage_learn(self, st: Stage) -> None:
        """The learning check's verdict on the validation curve (recipes.smoke.learn) and the weight sync's and loss
        mask's direct witnesses (recipes.smoke.sync_witness, recipes.smoke.mask_witness), after eval and plots exist."""
        from recipes.smoke import learn, mask_witness, sync_witness

        curve = learn.read_curve(self.rl_dir / "val_generations")
        steps = step_metrics(read_tail(self.logs / "rl.log"))
        witness = sync_witness.judge(sync_witness.gaps(steps))
        mask = mask_witness.judge(mask_witness.readings(steps))
        verdict, training = learn.judge(curve, witness, mask), learn.training_accuracy(steps)
        st.details = learn.summary_fields(curve, verdict, witness, mask, training)
        st.metric = verdict.line.removeprefix("learn: ")
        print(learn.render_curve(curve), flush=True)
        print(witness.line, flush=True)
        print(mask.line, flush=True)
        if self.try_number == 1 and learn.second_try_warranted(curve, verdict, witness, mask, training):
            self._second_try(st)
        elif not verdict.ok:
            raise StageError(verdict.line)

    def _second_try(self, st: Stage) -> None:
        """One more RL run from this run's SFT model, its own run in ``OUT/try2`` (as ``--from-sft OUT``), its
        training prompts reshuffled; its verdict is the check's, and both tries' are kept
        (recipes.smoke.learn.second_try_warranted says when, and why)."""
        from recipes.smoke import learn

        override = learn.second_try_override(self.rl_extra)
        out = self.out / learn.SECOND_TRY_DIR
        say(f"learn: the first try fell short ({st.metric}); a second RL try from its SFT model ({override}) in {out}")
        second = type(self)(
            out, self.sizes, self.profile, self.stack, trace=self.trace, rollout=self.rollout, task=self.task,
            seed=self.seed, rl_extra=(*self.rl_extra, override), sft_extra=self.sft_extra, model=self.user_model,
            from_sft=self.out,
        )  # fmt: skip
        second.try_number = 2
        out.mkdir()
        failed = second.run() != 0
        decided = second.stages.get("learn")
        tries = {"first_try": {**st.details, "out": str(self.out)}, "tries": 2, "second_try_out": str(out)}
        if decided is not None and decided.details:
            st.details = {**decided.details, **tries}
            st.metric = f"try 1: {st.metric}; try 2: {decided.metric}"
        else:  # the second try stopped before its verdict: the check has none beyond the first's
            stopped = next((s for s in second.stages.values() if s.status == "failed"), None)
            why = f"failed at {stopped.name}: {stopped.error}" if stopped else "did not finish"
            st.details = {**st.details, "learn_ok": False, **tries}
            st.metric = f"try 1: {st.metric}; try 2 {why} ({out})"
        if failed:
            raise StageError(f"learn: {st.metric}")

    def start_plots(self) -> Started:
        cmd = self.plots_command()
        return start_logged(cmd.argv, self.logs / "plots.log", cmd.env)

    def stage_plots(self, st: Stage) -> None:
        out, log = self.out / "plots", self.logs / "plots.log"
        st.log = str(log)
        started = self.ahead.pop("plots", None) or self.start_plots()
        wait_logged(started, log, timeout=300, label="plots")
        pngs = sorted(p.name for p in out.glob("*.png"))
        if not pngs:
            raise StageError(f"plots: no PNG written (log: {log})")
        st.details = {"files": pngs}
        st.metric = f"{len(pngs)} PNGs in {out.name}/"

    # -- the run

    def steps(self) -> list[tuple[str, Callable[[Stage], None]]]:
        fns = [
            self.stage_model,
            self.stage_data,
            self.stage_sft,
            self.stage_merge,
            self.stage_check,
            self.stage_sandbox,
            self.stage_rl,
            self.stage_eval,
            self.stage_plots,
        ]
        steps = list(zip(STAGES, fns, strict=True))
        if not self.sizes.check_samples:  # the learning check: its validation before RL measures the rate (learn.LEARN)
            steps = [(name, fn) for name, fn in steps if name != CHECK_STAGE]
        if self.from_sft is not None:  # an earlier run's data and SFT model stand in for the stages before the sandbox
            after_sft = STAGES.index("sandbox")
            steps = [(REUSE_STAGE, self.stage_reuse), *(s for s in steps if STAGES.index(s[0]) >= after_sft)]
        return [*steps, ("learn", self.stage_learn)] if self.task.judges_learning else steps

    def head_start(self, name: str, later: list[str]) -> None:
        """Start, as stage ``name`` begins, the process of the stage HEAD_STARTS pairs with it, if the run has it."""
        target = HEAD_STARTS.get(name)
        if target == "sandbox" and target in later:
            self.sandbox.launch()
        elif target == "plots" and target in later:
            self.ahead[target] = self.start_plots()

    def run(self) -> int:
        """All stages in order; the first failure stops the run. Returns the exit status (0 ok, 1 failed)."""
        steps = self.steps()
        self.stages = {name: Stage(name) for name, _ in steps}
        failed = None
        t_run = time.monotonic()
        try:
            for i, (name, fn) in enumerate(steps, start=1):
                st = self.stages[name]
                say(f"stage {i}/{len(steps)}: {name} ...")
                self.head_start(name, [later for later, _ in steps[i:]])
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
            counters = self.sandbox.stats()
            if counters is not None:
                st = self.stages["sandbox"]
                st.details["counters"] = counters
                st.metric = (
                    f"{counters['calls']} calls, {counters['failures']} failures, "
                    f"{counters['code_errors']} code errors, {counters['timeouts']} timeouts"
                )
            self.sandbox.stop()
            for started in self.ahead.values():  # begun for a stage the run did not reach
                kill_group(started.proc)
        total = time.monotonic() - t_run
        result = summary(self.stages, self.facts(), total, failed, env_stage(self.stack))
        (self.out / "summary.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(render_table(result), flush=True)
        if failed:
            error = self.stages[failed].error or "failed"
            say(f"FAILED at stage '{failed}': {error.splitlines()[0]}")
            return 1
        say(f"all stages ok in {total:.0f} s; artifacts in {self.out}")
        return 0

    def facts(self) -> RunFacts:
        engine = self.rollout_engine()
        return RunFacts(
            fast=self.sizes == FAST,
            task=self.task.name,
            seed=self.seed,
            platform=self.profile.platform.name,
            rollout_engine=engine.name,
            rollout_engine_version=engine.version,
            hardware_profile=self.profile.name,
            scale=SCALE,
            python=sys.executable,
            out=str(self.out),
            from_sft=str(self.from_sft) if self.from_sft else None,
            stack=self.stack.name,
            machine=cpu_info(),
        )


def env_stage(stack: Stack) -> Stage | None:
    """The environment row: scripts/smoke.sh times the venv it builds for ``stack`` (KIT_SMOKE_ENV_SECONDS); None
    when the run was started without it."""
    text = os.environ.get("KIT_SMOKE_ENV_SECONDS", "").strip()
    if not text:
        return None
    venv = stack.venv
    ours = Path(sys.prefix).resolve() == venv.resolve()
    what = f"{venv.name} ready ({sys.executable})" if ours else f"no venv: this interpreter ({sys.executable})"
    return Stage("env", "ok", float(text), what)


if __name__ == "__main__":
    # The old entry point, kept as an alias of ``python -m recipes.smoke`` (tests/smoke/test_cli.py). Run by name,
    # not imported: the command line sits above the stages (cli imports this module), never below them.
    import runpy

    runpy.run_module("recipes.smoke", run_name="__main__", alter_sys=True)
