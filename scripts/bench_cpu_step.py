#!/usr/bin/env python3
"""Time one SFT step and one GRPO step of the smoke's tiny model on this CPU: fp32 vs bf16, the allocator, and the
rollout engine (verl's vLLM async server on vLLM's CPU build vs the kit's hf rollout).

Why: without AVX512-BF16 or AMX, PyTorch's CPU bf16 GEMM falls back to a slow reference path, so a bf16 trainer
step can cost 10-20x its fp32 twin; the kit's cpu platform therefore computes in fp32 everywhere
(``platforms.cpu.CpuPlatform.compute_dtype``). This script is the evidence, measured on the machine at
hand, in one run so that load and clock drift hit every variant alike:

* the real trainers, with the command and environment the kit's launcher builds for ``--hw cpu``
  (``recipes.launch.planning.plan.build`` and the cpu preset) and the smoke's SFT and RL overrides: 2 worker
  processes, the tiny random Qwen3 (the stack's width, ``--stack``) with the real Qwen tokenizer;
* per variant, the median of verl's own per-step durations (SFT ``train/time(s)``, RL ``timing_s/step``), the first
  step left out when there are more (it carries one-off warm-up);
* variants in the kit's cpu environment except where named: ``fp32`` (what the kit runs), ``bf16`` (verl's default
  dtype), ``fp32-glibc`` (``KIT_CPU_TCMALLOC=0``; tcmalloc is adopted only if it saves >= 15% per step),
  ``fp32-glibc-no-thp`` (also ``THP_MEM_ALLOC_ENABLE=0``) and for RL ``fp32-hf`` (the kit's hf rollout instead of
  vLLM, ``--rollouts``), with the generation time per step (``timing_s/gen``); the CPU flags that decide it.

    python scripts/bench_cpu_step.py                   # SFT and RL, fp32 and bf16, + tcmalloc if installed
    python scripts/bench_cpu_step.py --only sft --sft-steps 4 --json bench.json
    python scripts/bench_cpu_step.py --dtypes fp32 --only sft --sft-steps 6   # the allocator variants only
    python scripts/bench_cpu_step.py --dtypes fp32 --only rl --no-allocators  # vllm vs hf rollout only

Takes ~15-25 minutes on 2 AVX2 cores (the bf16 variants dominate); every trainer log is kept under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from platforms import PROFILES, TCMALLOC_SWITCH, EnvVar, applied, dtype_overrides, find_tcmalloc, stacks  # noqa: E402
from platforms.cli import add_stack_option  # noqa: E402
from platforms.cli_errors import entry_point  # noqa: E402
from platforms.cpu_info import cpu_info, fast_bf16  # noqa: E402
from platforms.stacks import Stack  # noqa: E402
from recipes.smoke.progress import RL_STEP_TIME, SFT_STEP_TIME, step_metrics, step_times  # noqa: E402
from recipes.smoke.supervisor import kit_env  # noqa: E402

#: verl's generation time per RL step (the agent loop's rollout, tool calls included).
GEN_TIME = "timing_s/gen"

#: The kit adopts an allocator only if it saves at least this much per step.
ADOPT_THRESHOLD = 0.15
#: PyTorch's CPU allocator: 2 MB-align tensors of 2 MB and more and madvise(MADV_HUGEPAGE) them (c10 alloc_cpu).
THP_VAR = "THP_MEM_ALLOC_ENABLE"


@dataclass
class Result:
    stage: str  # sft | rl
    variant: str  # fp32, bf16, fp32-glibc, fp32-glibc-no-thp, fp32-hf
    dtype: str
    env: dict[str, str | None]
    step_seconds: list[float]
    median_s: float | None
    wall_s: float
    log: str
    error: str | None = None
    rollout: str | None = None  # RL: the engine that rolled out
    gen_median_s: float | None = None  # RL: median generation seconds per step, first step left out


def median_after_warmup(times: dict[int, float]) -> float | None:
    """Median of the per-step durations, without the first step when there are at least two."""
    values = [seconds for step, seconds in sorted(times.items())]
    if len(values) >= 2:
        values = values[1:]
    return statistics.median(values) if values else None


def _kit_env(extra: dict[str, str]) -> dict[str, str]:
    """The smoke's child environment (the kit first on PYTHONPATH, no torch_npu autoload) for a trainer run."""
    return kit_env(PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", KIT_PYTHON=sys.executable, **extra)


@dataclass(frozen=True)
class Variant:
    """One way to run the trainers: a compute dtype and changes to the environment (None = unset).

    ``before`` is applied before the kit's cpu preset is computed (switches the preset reads, such as
    ``KIT_CPU_TCMALLOC``), ``after`` on top of it (overriding what the preset exports).
    """

    name: str
    dtype: str
    before: tuple[tuple[str, str | None], ...] = ()
    after: tuple[tuple[str, str | None], ...] = ()
    rollout: str | None = None  # RL rollout engine; None: the cpu platform's (vllm where installed)


def variants(
    dtypes: Sequence[str], tcmalloc: str | None, stack: Stack, rollouts: Sequence[str] = (), allocators: bool = True
) -> list[Variant]:
    """The kit's settings per dtype; for fp32 also glibc instead of tcmalloc, glibc without huge pages, and each of
    ``rollouts`` other than the platform's engine on ``stack`` (RL only: :func:`stage_variants`)."""
    out = [Variant(dtype, dtype) for dtype in dtypes]
    if "fp32" in dtypes and allocators:
        glibc = ((TCMALLOC_SWITCH, "0"),)
        if tcmalloc:
            out.append(Variant("fp32-glibc", "fp32", glibc))
        out.append(Variant("fp32-glibc-no-thp", "fp32", glibc, ((THP_VAR, "0"),)))
    engine = PROFILES["cpu"].platform.rollout_engine(stack).name
    if "fp32" in dtypes:
        out += [Variant(f"fp32-{name}", "fp32", rollout=name) for name in rollouts if name != engine]
    return out


def stage_variants(stage: str, variants_: Sequence[Variant]) -> list[Variant]:
    """What a stage times: SFT has no rollout, so the rollout variants are RL's only."""
    return [v for v in variants_ if stage == "rl" or v.rollout is None]


def _changed(environ: dict[str, str], changes: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """``environ`` with a variant's changes applied the way the platform's entries are (None: unset)."""
    return applied((EnvVar(name, value, "bench variant") for name, value in changes), environ)


class Bench:
    """The timed trainer runs of one stack (``stack``: resolved by :func:`main`; its launcher plan, environment,
    dtype overrides, rollout engine and tiny model width)."""

    def __init__(
        self,
        out: Path,
        stack: Stack,
        sft_steps: int,
        rl_steps: int,
        timeout: float,
        extra: dict[str, list[str]] | None = None,
    ) -> None:
        self.out, self.stack, self.sft_steps, self.rl_steps, self.timeout = out, stack, sft_steps, rl_steps, timeout
        self.extra = extra or {}
        self.model = out / "model" / "tiny-qwen3"
        self.data = out / "data"

    def prepare(self) -> None:
        """The smoke's tiny model and data (the same builders and files as ``scripts/smoke.sh``)."""
        from recipes.smoke.commands import DATA_DIR
        from recipes.smoke.tiny_model import build_tiny_qwen

        build_tiny_qwen(self.model, hidden_size=self.stack.tiny_hidden_size)
        for command, src, dst in (
            ("sft", "retool_sft.jsonl", "retool_sft.parquet"),
            ("rl", "dapo_math.jsonl", "dapo_math.parquet"),
            ("val", "smoke_val.jsonl", "smoke_val.parquet"),
        ):
            if (self.data / dst).is_file():
                continue
            subprocess.run(
                [sys.executable, "-m", "recipes.retool.prepare", command, "--input", str(DATA_DIR / src)]
                + ["--output", str(self.data / dst)],
                env=_kit_env({}),
                check=True,
                capture_output=True,
            )

    def _inputs(self, stage: str, tag: str) -> tuple[str, dict[str, str], list[str]]:
        """(recipe, input variables, overrides) of the smoke's SFT or RL stage, sized for timing."""
        from recipes.smoke.commands import RL_OVERRIDES, SFT_OVERRIDES

        ckpt = self.out / "ckpt" / f"{stage}-{tag}"
        shutil.rmtree(ckpt, ignore_errors=True)  # a checkpoint left by an earlier run would be resumed from
        inputs = {"MODEL_PATH": str(self.model), "CKPT_DIR": str(ckpt), "TENSORBOARD_DIR": str(ckpt / "tb")}
        if stage == "sft":
            inputs |= {"TRAIN_FILE": str(self.data / "retool_sft.parquet")}
            inputs |= {"VAL_FILE": str(self.data / "retool_sft.parquet")}
            overrides = [
                *SFT_OVERRIDES,
                f"trainer.total_training_steps={self.sft_steps}",
                "trainer.save_freq=-1",
                "trainer.test_freq=-1",
                "trainer.logger=['console']",
            ]
            return "qwen3_4b_sft", inputs, overrides + self.extra.get("sft", [])
        inputs |= {"TRAIN_FILE": str(self.data / "dapo_math.parquet"), "VAL_FILE": str(self.data / "smoke_val.parquet")}
        # nothing listens here: a random model emits no well-formed tool call, and the bench times the trainer
        inputs["RETOOL_SANDBOX_URL"] = "http://127.0.0.1:9/run_code"
        overrides = [
            *(o for o in RL_OVERRIDES if not o.startswith(("trainer.val_before_train", "trainer.logger"))),
            "trainer.val_before_train=False",
            "trainer.logger=['console']",
            "trainer.test_freq=-1",
            f"trainer.total_training_steps={self.rl_steps}",
        ]
        return "qwen3_4b_dapo", inputs, overrides + self.extra.get("rl", [])

    def command(self, stage: str, variant: Variant) -> tuple[list[str], dict[str, str]]:
        """The exact command and environment the kit's launcher would exec for this stage, then the variant's
        changes: the launcher's own code path (``recipes.launch.planning.plan.build``) with the cpu preset applied."""
        from recipes.launch.planning.plan import build
        from recipes.launch.run_inputs.catalog import RECIPES

        tag = variant.name.replace("+", "-")
        recipe, inputs, overrides = self._inputs(stage, tag)
        phase = RECIPES[recipe].phase
        base = _changed(_kit_env(inputs), variant.before)
        env = _changed(applied(PROFILES["cpu"].env(phase, self.stack, base), base), variant.after)
        overrides += dtype_overrides(phase, variant.dtype, self.stack)
        if variant.rollout:
            overrides.append(f"actor_rollout_ref.rollout.name={variant.rollout}")
        plan = build(RECIPES[recipe], "cpu", self.stack, overrides, path_check=False, environ=env)
        if plan.errors:
            raise SystemExit(f"bench_cpu_step: the {recipe} plan failed: {'; '.join(plan.errors)}")
        return plan.command, env

    def run(self, stage: str, variant: Variant) -> Result:
        cmd, env = self.command(stage, variant)
        log = self.out / "logs" / f"{stage}-{variant.name.replace('+', '-')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        steps = self.sft_steps if stage == "sft" else self.rl_steps
        print(f"[bench] {stage} {variant.name}: {steps} steps ... (log: {log})", flush=True)
        t0 = time.monotonic()
        error = None
        with open(log, "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            try:
                proc = subprocess.run(
                    cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=self.timeout, cwd=REPO_ROOT
                )
                if proc.returncode != 0:
                    error = f"exit status {proc.returncode}"
            except subprocess.TimeoutExpired:
                error = f"timed out after {self.timeout:.0f} s"
        wall = time.monotonic() - t0
        key = SFT_STEP_TIME if stage == "sft" else RL_STEP_TIME
        metrics = step_metrics(log.read_text(errors="replace"))
        times = step_times(metrics, key)
        if error is None and len(times) != steps:
            error = f"{len(times)} steps logged, expected {steps}"
        result = Result(
            stage,
            variant.name,
            variant.dtype,
            dict(variant.before + variant.after),
            list(times.values()),
            median_after_warmup(times),
            wall,
            str(log),
            error,
        )
        if stage == "rl":
            result.rollout = variant.rollout or PROFILES["cpu"].platform.rollout_engine(self.stack).label()
            result.gen_median_s = median_after_warmup(step_times(metrics, GEN_TIME))
        shown = f"{result.median_s:.2f} s/step" if result.median_s is not None else "no step"
        steps_text = ", ".join(f"{t:.1f}" for t in times.values())
        print(
            f"[bench] {stage} {variant.name}: {shown} (steps {steps_text}; wall {wall:.0f} s)"
            + (f"  ERROR {error}" if error else ""),
            flush=True,
        )
        return result


def summarize(results: Sequence[Result], info: dict[str, object], tcmalloc: str | None) -> dict[str, object]:
    """Ratios against the kit's fp32 per stage; the bf16, tcmalloc and huge-page verdicts."""
    by = {(r.stage, r.variant): r for r in results}

    def median(stage: str, variant: str) -> float | None:
        found = by.get((stage, variant))
        return found.median_s if found and not found.error else None

    rows, verdicts = [], []
    for r in results:
        base = median(r.stage, "fp32")
        rows.append({**asdict(r), "vs_fp32": r.median_s / base if base and r.median_s else None})
    for stage in sorted({r.stage for r in results}):
        fp32, bf16 = median(stage, "fp32"), median(stage, "bf16")
        glibc, plain = median(stage, "fp32-glibc"), median(stage, "fp32-glibc-no-thp")
        if fp32 and bf16:
            verdicts.append(f"{stage}: bf16/fp32 = {bf16 / fp32:.1f}x per step")
        if fp32 and glibc:
            saving = 1 - fp32 / glibc
            verdict = "adopted" if saving >= ADOPT_THRESHOLD else "below the threshold: set KIT_CPU_TCMALLOC=0"
            verdicts.append(
                f"{stage}: tcmalloc saves {saving:.0%} per step against glibc ({verdict}; "
                f"threshold {ADOPT_THRESHOLD:.0%})"
            )
        if plain and (glibc or (fp32 and not tcmalloc)):
            with_thp = glibc or fp32
            assert with_thp is not None
            verdicts.append(f"{stage}: THP_MEM_ALLOC_ENABLE=1 saves {1 - with_thp / plain:.0%} per step (glibc)")
        verdicts += _rollout_verdicts(stage, by)
    if not tcmalloc:
        verdicts.append("tcmalloc is not installed here (apt-get install libtcmalloc-minimal4): fp32 ran on glibc")
    return {
        "cpu": info,
        "fast_bf16_hardware": fast_bf16(info),
        "tcmalloc": tcmalloc,
        "results": rows,
        "verdicts": verdicts,
    }


def _rollout_verdicts(stage: str, by: dict[tuple[str, str], Result]) -> list[str]:
    """RL: each other engine's step and generation time against the platform's (the ``fp32`` variant)."""
    base = by.get((stage, "fp32"))
    if stage != "rl" or base is None or base.error or not base.median_s:
        return []
    out = []
    for (row_stage, name), other in by.items():
        if row_stage != stage or not name.startswith("fp32-") or other.error or not other.median_s:
            continue
        if other.rollout in (None, base.rollout) or name.startswith("fp32-glibc"):
            continue
        gen = ""
        if base.gen_median_s and other.gen_median_s:
            gen = f"; generation {other.gen_median_s:.2f} vs {base.gen_median_s:.2f} s/step"
        out.append(
            f"rl: {other.rollout} rollout {other.median_s:.2f} vs {base.rollout} {base.median_s:.2f} s/step "
            f"({other.median_s / base.median_s:.2f}x){gen}"
        )
    return out


def render(summary: dict[str, object]) -> str:
    info = summary["cpu"]
    assert isinstance(info, dict)
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["flags"].items())
    lines = [
        f"cpu: {info['model']} ({info['machine']}, {info['cores']} cores); flags: {flags}; "
        f"transparent hugepages: {info['transparent_hugepage']}",
        f"fast bf16 hardware (avx512_bf16 or amx_bf16): {'yes' if summary['fast_bf16_hardware'] else 'no'}",
        "",
        f"{'stage':<6} {'variant':<18} {'s/step':>8} {'vs fp32':>8} {'gen s':>7}  steps (s)",
    ]
    for row in summary["results"]:  # type: ignore[union-attr]
        med = f"{row['median_s']:.2f}" if row["median_s"] is not None else "-"
        ratio = f"{row['vs_fp32']:.2f}x" if row["vs_fp32"] is not None else "-"
        gen = f"{row['gen_median_s']:.2f}" if row.get("gen_median_s") is not None else "-"
        steps = ", ".join(f"{t:.1f}" for t in row["step_seconds"])
        err = f"  ERROR: {row['error']}" if row["error"] else ""
        engine = f"  [{row['rollout']}]" if row.get("rollout") else ""
        lines.append(f"{row['stage']:<6} {row['variant']:<18} {med:>8} {ratio:>8} {gen:>7}  {steps}{engine}{err}")
    lines += ["", *summary["verdicts"]]  # type: ignore[list-item]
    return "\n".join(lines)


@entry_point("python scripts/bench_cpu_step.py")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/bench_cpu_step.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--only", default="sft,rl", help="stages to time: sft, rl or both (default sft,rl)")
    parser.add_argument("--dtypes", default="fp32,bf16", help="compute dtypes to time (default fp32,bf16)")
    parser.add_argument("--sft-steps", type=int, default=3, help="SFT steps per variant (default 3)")
    parser.add_argument("--rl-steps", type=int, default=3, help="GRPO steps per variant (default 3)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per trainer run (default 1800)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "bench_cpu_step", help="logs and data")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--rollouts",
        default="vllm,hf",
        help="RL rollout engines to time (default vllm,hf): the platform's engine is the fp32 variant, each other "
        "one an fp32-<engine> variant",
    )
    parser.add_argument("--no-allocators", action="store_true", help="leave out the glibc / no-THP variants")
    parser.add_argument("--sft-override", action="append", default=[], help="extra Hydra override for SFT runs")
    parser.add_argument("--rl-override", action="append", default=[], help="extra Hydra override for RL runs")
    add_stack_option(parser)
    args = parser.parse_args(argv)
    stack = stacks.export(stacks.resolve(args.stack))
    lists = (args.only, args.dtypes, args.rollouts)
    stages, dtypes, rollouts = ([w.strip() for w in text.split(",") if w.strip()] for text in lists)
    if not stages or set(stages) - {"sft", "rl"}:
        parser.error("--only takes sft, rl or sft,rl")
    if not dtypes or set(dtypes) - {"fp32", "bf16"}:
        parser.error("--dtypes takes fp32, bf16 or fp32,bf16")
    if set(rollouts) - {"vllm", "hf"}:
        parser.error("--rollouts takes vllm, hf or vllm,hf")
    if args.sft_steps < 1 or args.rl_steps < 1:
        parser.error("--sft-steps and --rl-steps must be at least 1")
    tcmalloc = None if os.environ.get(TCMALLOC_SWITCH, "1").strip() == "0" else find_tcmalloc()
    info = cpu_info()
    print(render({"cpu": info, "fast_bf16_hardware": fast_bf16(info), "results": [], "verdicts": []}).split("\n\n")[0])
    print(f"[bench] tcmalloc: {tcmalloc or 'not found'}")
    extra = {"sft": args.sft_override, "rl": args.rl_override}
    bench = Bench(args.out.resolve(), stack, args.sft_steps, args.rl_steps, args.timeout, extra)
    bench.prepare()
    chosen = variants(dtypes, tcmalloc, stack, rollouts, allocators=not args.no_allocators)
    results = [bench.run(stage, variant) for stage in stages for variant in stage_variants(stage, chosen)]
    summary = summarize(results, info, tcmalloc)
    print()
    print(render(summary))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
