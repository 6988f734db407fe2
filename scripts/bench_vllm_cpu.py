#!/usr/bin/env python3
"""vLLM's CPU engine with verl's batch limits against vLLM's own CPU limits: start-up and a generation, in one run.

Why: verl hands every vLLM server ``max_num_batched_tokens=8192`` and ``max_num_seqs=1024`` (its rollout config's
GPU-sized defaults), and vLLM's CPU worker runs a dummy forward of that many tokens before it serves (vLLM 0.23:
``determine_available_memory`` -> ``warming_up_model`` -> ``profile_run``; 0.11: ``max(16, max_num_seqs)`` tokens). On
a CPU that forward is seconds of the RL stage's start-up. The ``cpu`` platform hands vLLM its own CPU defaults
instead (``platforms/cpu.py``: ``VLLM_CPU_BATCH_LIMITS``); this bench measures both, alternating, each in a fresh
process: the engine's construction, then one generation of the learning check's validation prompts.

    python scripts/bench_vllm_cpu.py --model DIR --prompts learn_val.parquet [--repeats 2] [--out FILE.json]

Run it with the stack's venv (``.venv/bin/python`` or ``.venv-0.9.1/bin/python``), nothing else running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT))

from platforms import stacks  # noqa: E402
from platforms.cpu import VLLM_CPU_BATCH_LIMITS  # noqa: E402
from platforms.cpu_info import cpu_info  # noqa: E402
from recipes.retool.schema import TOOL_SCHEMA  # noqa: E402

VARIANTS = ("verl", "kit")
#: What starts the engine run's result line (vLLM prints to stdout too).
RESULT = "bench_vllm_cpu result:"


def verl_limits() -> dict[str, int]:
    """What every server got before: the installed verl's rollout defaults for the same keys
    (verl/workers/config/rollout.py ``RolloutConfig``), read, not copied."""
    import dataclasses

    from verl.workers.config.rollout import RolloutConfig

    defaults = {f.name: f.default for f in dataclasses.fields(RolloutConfig)}
    return {key: int(defaults[key]) for key in VLLM_CPU_BATCH_LIMITS}


def child(args: argparse.Namespace) -> None:
    """One engine: construct it, generate once, print one JSON line (the parent reads the line after RESULT)."""
    import pandas as pd
    from vllm import LLM, SamplingParams

    limits = json.loads(args.limits)
    t0 = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype="float32",
        enforce_eager=True,
        seed=args.seed,
        enable_prefix_caching=False,
        max_model_len=args.max_model_len,
        **limits,
    )
    start_s = time.perf_counter() - t0
    tokenizer = llm.get_tokenizer()
    rows = pd.read_parquet(args.prompts)["prompt"].tolist()
    prompts = [
        tokenizer.apply_chat_template(list(r), tools=[TOOL_SCHEMA], tokenize=False, add_generation_prompt=True)
        for r in rows
    ]  # as verl's tool agent loop renders them, the code tool's schema in each
    # No per-request seed, as verl sends none (vllm_async_server.py:635-637, full_determinism off); the engine's seed
    # is --seed. A seeded request crashes vLLM 0.23's CPU worker when its prefill is chunked ("CPU Generator does not
    # use offset", gpu_model_runner.py:3589).
    params = SamplingParams(temperature=1.0, max_tokens=args.max_tokens)
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    gen_s = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(RESULT, json.dumps({"start_s": start_s, "gen_s": gen_s, "tokens": tokens, "prompts": len(prompts)}))


def run_one(args: argparse.Namespace, limits: dict[str, int]) -> dict[str, float]:
    """A fresh interpreter per engine: vLLM's start-up is per process, and nothing warm carries over."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--limits",
        json.dumps(limits),
        "--model",
        args.model,
        "--prompts",
        args.prompts,
        "--max-tokens",
        str(args.max_tokens),
        "--seed",
        str(args.seed),
        "--max-model-len",
        str(args.max_model_len),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench_vllm_cpu: the engine run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if not lines:
        sys.exit(f"bench_vllm_cpu: the engine run printed no result:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    """Medians over a variant's engines; the generation per token too, as sampled answers differ in length."""
    return {
        "start_s": statistics.median(r["start_s"] for r in runs),
        "gen_s": statistics.median(r["gen_s"] for r in runs),
        "ms_per_token": statistics.median(1000 * r["gen_s"] / r["tokens"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", help="an HF model folder (the learning check's SFT model, or SmolLM2)")
    parser.add_argument("--prompts", help="a parquet with a chat 'prompt' column (the check's learn_val.parquet)")
    parser.add_argument("--repeats", type=int, default=2, help="engines per variant, alternating (default 2)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per answer (the check's: 96)")
    parser.add_argument("--max-model-len", type=int, default=1024, help="the engine's context (default 1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the results here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--limits", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if not (args.model and args.prompts):
        parser.error("--model and --prompts are required")
    stack = stacks.resolve()
    limits = {"verl": verl_limits(), "kit": dict(VLLM_CPU_BATCH_LIMITS)}
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for i in range(args.repeats):
        for variant in VARIANTS:
            print(f"[bench] engine {i + 1}/{args.repeats}, {variant} limits {limits[variant]} ...", flush=True)
            results[variant].append(run_one(args, limits[variant]))
            print(f"[bench]   {results[variant][-1]}", flush=True)
    table = {v: summary(results[v]) for v in VARIANTS}
    machine = cpu_info()
    print(f"stack {stack.name}, CPU {machine['model']}, {machine['cores']} cores, flags {machine['flags']}")
    print("| limits | start-up (s) | generation (s) | per generated token (ms) |\n|---|---|---|---|")
    for v in VARIANTS:
        row = table[v]
        print(f"| {v} {limits[v]} | {row['start_s']:.1f} | {row['gen_s']:.1f} | {row['ms_per_token']:.2f} |")
    ratio = {k: table["kit"][k] / table["verl"][k] for k in ("start_s", "ms_per_token")}
    print(f"kit / verl: start-up x{ratio['start_s']:.2f}, per generated token x{ratio['ms_per_token']:.2f}")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "stack": stack.name,
                    "machine": machine,
                    "limits": limits,
                    "runs": results,
                    "median": table,
                    "ratio": ratio,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
