#!/usr/bin/env python3
"""The learning check's actor update on this CPU: activation checkpointing in one big micro-batch (its settings
before) against no checkpointing in micro-batches of at most 1,024 tokens (its settings now), in one run.

Why: the learning check's RL step spends most of its time in the actor's update (verl's ``timing_s/update_actor``,
~55 s of an 83 s step on 2 AVX2 cores). It ran with the recipe's activation checkpointing and one micro-batch of up to
8,192 tokens a rank (``recipes/smoke/learn.py``); a step's 8 x 4 trajectories are ~5,600 tokens. Checkpointing
recomputes every layer's forward in the backward pass, and the one big micro-batch holds all of its activations and
its 49,152-wide logits at once. This bench runs the same arithmetic as the update - SmolLM2 in fp32, forward, the
tokens' log-probabilities and entropy, backward - over the same number of tokens, each variant in a fresh process
(alternating, so load and clock drift hit both alike), and prints each variant's seconds and peak memory and their
ratio. It is a proxy of verl's update (no FSDP, no optimizer step); the learning check's own per-token update time
(``timing_per_token_ms/update_actor``) is the measurement of record (docs/measurements/learn_update_micro_batches.yaml).

    python scripts/bench_update_micro_batches.py --model build/models/smollm2-135m-instruct [--repeats 2]

Run it with the stack's venv, nothing else running: ~5 minutes on 2 AVX2 cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT))

from platforms.cpu_info import cpu_info  # noqa: E402

#: variant -> (activation checkpointing, the micro-batch's token budget): the learning check's before and now
VARIANTS = {"before": (True, 8192), "now": (False, 1024)}
RESULT = "bench_update_micro_batches result:"


def child(args: argparse.Namespace) -> None:
    """One variant: build the model, run the update's arithmetic ``--passes`` times, print one JSON line."""
    import torch
    from transformers import AutoModelForCausalLM

    checkpointing, budget = VARIANTS[args.variant]
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    model.config.use_cache = False
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rows = args.tokens // args.seq_len
    per_micro = max(1, budget // args.seq_len)
    vocab = model.config.vocab_size
    times = []
    for _ in range(args.passes):
        t0 = time.perf_counter()
        for start in range(0, rows, per_micro):
            ids = torch.randint(0, vocab, (min(per_micro, rows - start), args.seq_len))
            logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits.float(), -1)
            entropy = -(logp.exp() * logp).sum(-1).mean()
            (logp.gather(-1, ids.unsqueeze(-1)).mean() + 0.01 * entropy).backward()
            del logp, entropy
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB
    print(RESULT, json.dumps({"pass_s": times, "peak_gb": peak_gb, "micro_batches": -(-rows // per_micro)}))


def run_one(args: argparse.Namespace, variant: str) -> dict:
    """A fresh interpreter per variant: nothing cached or allocated carries over."""
    cmd = [sys.executable, __file__, "--child", "--variant", variant, "--model", args.model]
    cmd += ["--tokens", str(args.tokens), "--seq-len", str(args.seq_len), "--passes", str(args.passes)]
    cmd += ["--seed", str(args.seed)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        sys.exit(
            f"bench_update_micro_batches: the {variant} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT) :])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", help="an HF model folder (SmolLM2: build/models/smollm2-135m-instruct)")
    parser.add_argument("--tokens", type=int, default=5600, help="tokens an update (the check's step: ~5,600)")
    parser.add_argument("--seq-len", type=int, default=180, help="tokens a trajectory (the check's: ~180)")
    parser.add_argument("--passes", type=int, default=2, help="updates per process; the first is warm-up")
    parser.add_argument("--repeats", type=int, default=2, help="processes per variant, alternating (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the results here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if not args.model:
        parser.error("--model is required")
    if args.passes < 2:
        parser.error("--passes must be at least 2: the first pass is warm-up and is left out")
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for i in range(args.repeats):
        for variant, (checkpointing, budget) in VARIANTS.items():
            print(
                f"[bench] process {i + 1}/{args.repeats}: {variant} (checkpointing {checkpointing}, "
                f"micro-batches of <= {budget} tokens) ...",
                flush=True,
            )
            runs[variant].append(run_one(args, variant))
            print(f"[bench]   {runs[variant][-1]}", flush=True)
    table = {
        v: {
            "update_s": statistics.median(s for r in runs[v] for s in r["pass_s"][1:]),
            "peak_gb": max(r["peak_gb"] for r in runs[v]),
        }
        for v in VARIANTS
    }
    machine = cpu_info()
    print(f"CPU {machine['model']}, {machine['cores']} cores, flags {machine['flags']}; {args.tokens} tokens an update")
    print("| variant | checkpointing | micro-batch tokens | update (s) | peak memory (GB) |\n|---|---|---|---|---|")
    for v, (checkpointing, budget) in VARIANTS.items():
        print(f"| {v} | {checkpointing} | {budget} | {table[v]['update_s']:.1f} | {table[v]['peak_gb']:.1f} |")
    ratio = {k: table["now"][k] / table["before"][k] for k in ("update_s", "peak_gb")}
    print(f"now / before: update x{ratio['update_s']:.2f}, peak memory x{ratio['peak_gb']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine, "runs": runs, "median": table, "ratio": ratio}))


if __name__ == "__main__":
    main()
