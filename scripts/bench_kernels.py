#!/usr/bin/env python3
"""Benchmark the kit's fused Qwen kernels on one decoder layer: forward+backward, fused vs unfused, on this device.

What an NPU (or GPU) owner runs to see the gain before a long job, and what CI runs on CPU to keep the script alive.
For each layer shape it builds one transformers decoder layer (Qwen3-4B: Qwen3DecoderLayer; Qwen2.5-32B:
Qwen2DecoderLayer), then:

* accuracy: output, input gradient and weight gradients of the unfused and of the fused layer, each against the same
  layer computed unfused in float32 (error = max|x - ref| / max|ref|, per tensor, the worst weight gradient shown);
* speed: median wall time of forward+backward per iteration, unfused and fused alternating iteration by iteration in
  one process (so clock or load drift hits both), and their ratio (< 1 means the fusion is faster).

Fused means ``npu_kernels.patcher.apply`` with the device's backend (npu: torch_npu ops; cuda: liger-kernel if
installed, else the reference; cpu: the reference, so the CPU ratio is ~1 by construction). On CPU the shapes are
reduced (hidden, heads and intermediate / 8, seq 256; head_dim stays 128) and the header says so.

    python scripts/bench_kernels.py                       # both layers, sizes for the detected device
    python scripts/bench_kernels.py --model qwen3-4b --seq 8192 --iters 20
    KIT_DEVICE=cpu python scripts/bench_kernels.py --json  # machine-readable rows
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

import platforms as kit_platform  # noqa: E402
from npu_kernels import ops as kernel_ops  # noqa: E402
from npu_kernels import patcher  # noqa: E402
from platforms.cli_errors import entry_point  # noqa: E402


@dataclass(frozen=True)
class LayerShape:
    name: str
    model_type: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_norm_eps: float = 1e-6

    def reduced(self, factor: int) -> LayerShape:
        """The same layer with hidden/heads/intermediate divided by ``factor`` (head_dim kept: kernels care)."""
        heads = max(1, self.heads // factor)
        hidden = self.hidden // factor if self.model_type == "qwen3" else heads * self.head_dim
        return LayerShape(
            self.name,
            self.model_type,
            hidden,
            heads,
            max(1, self.kv_heads // factor),
            self.head_dim,
            self.intermediate // factor,
            self.rms_norm_eps,
        )

    def describe(self) -> str:
        return f"h{self.hidden} q{self.heads}/kv{self.kv_heads}x{self.head_dim} i{self.intermediate}"


SHAPES: dict[str, LayerShape] = {
    "qwen3-4b": LayerShape("qwen3-4b", "qwen3", 2560, 32, 8, 128, 9728),
    "qwen2.5-32b": LayerShape("qwen2.5-32b", "qwen2", 5120, 40, 8, 128, 27648),
}
FULL_SEQ = 4096
CPU_FACTOR = 8
CPU_SEQ = 256
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class Row:
    layer: str
    shape: str
    seq: int
    dtype: str
    backend: str
    unfused_ms: float
    fused_ms: float
    ratio: float
    err_unfused: dict[str, float]
    err_fused: dict[str, float]


def _layer_and_inputs(shape: LayerShape, seq: int, batch: int, dtype: torch.dtype, dev: str, attn: str, seed: int):
    from transformers import Qwen2Config, Qwen3Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RotaryEmbedding

    common: dict[str, Any] = dict(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        num_hidden_layers=1,
        max_position_embeddings=max(seq, FULL_SEQ),
        rope_theta=1_000_000.0,
        rms_norm_eps=shape.rms_norm_eps,
        vocab_size=1024,
        attn_implementation=attn,
    )
    if shape.model_type == "qwen3":
        config, layer_cls, rope_cls = (
            Qwen3Config(head_dim=shape.head_dim, **common),
            Qwen3DecoderLayer,
            Qwen3RotaryEmbedding,
        )
    else:
        config, layer_cls, rope_cls = Qwen2Config(**common), Qwen2DecoderLayer, Qwen2RotaryEmbedding
    torch.manual_seed(seed)
    layer = layer_cls(config, layer_idx=0)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            elif param.dim() == 2:
                param.normal_(0.0, 0.02)
    layer = layer.to(device=dev, dtype=dtype).train()
    position_ids = torch.arange(seq, device=dev).unsqueeze(0).expand(batch, -1)
    hidden = torch.randn(batch, seq, shape.hidden, device=dev, dtype=dtype)
    cos, sin = rope_cls(config, device=dev)(hidden, position_ids)
    grad_out = torch.randn_like(hidden)
    return layer, hidden, (cos, sin), grad_out


def _fwd_bwd(layer: torch.nn.Module, hidden: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], grad_out):
    layer.zero_grad(set_to_none=True)
    x = hidden.detach().requires_grad_()
    out = layer(x, position_embeddings=rope)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(grad_out)
    return out, x


def _results(layer: torch.nn.Module, out: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
    found = {"out": out.detach().float(), "dx": x.grad.detach().float()}
    found.update({f"d{name}": p.grad.detach().float() for name, p in layer.named_parameters() if p.grad is not None})
    return found


def _errors(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, float]:
    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))

    per = {key: rel(got[key], ref[key]) for key in ref}
    return {
        "out": per["out"],
        "dx": per["dx"],
        "dW": max(v for k, v in per.items() if k not in ("out", "dx")),
    }


def bench_layer(
    shape: LayerShape,
    seq: int,
    batch: int,
    dtype: torch.dtype,
    platform: kit_platform.Platform,
    ops: kernel_ops.KernelOps,
    enabled_ops: Sequence[str],
    attn: str,
    warmup: int,
    iters: int,
) -> Row:
    dev = platform.verl_device
    sync = platform.torch_module().synchronize
    layer, hidden, rope, grad_out = _layer_and_inputs(shape, seq, batch, dtype, dev, attn, seed=0)
    model_types = [shape.model_type]

    def unfused() -> None:
        patcher.revert(model_types)

    def fused() -> None:
        patcher.apply(ops, model_types=model_types, enabled_ops=enabled_ops)

    # Accuracy: ground truth is the unfused layer in fp32 (same weights, same inputs).
    unfused()
    ref_layer = copy.deepcopy(layer).float()
    ref_rope = (rope[0].float(), rope[1].float())
    ref = _results(ref_layer, *_fwd_bwd(ref_layer, hidden.float(), ref_rope, grad_out.float()))
    del ref_layer
    err: dict[str, dict[str, float]] = {}
    for label, toggle in (("unfused", unfused), ("fused", fused)):
        toggle()
        err[label] = _errors(_results(layer, *_fwd_bwd(layer, hidden, rope, grad_out)), ref)
    del ref

    # Speed: alternate so that drift (clocks, other tenants) lands on both variants alike.
    times: dict[str, list[float]] = {"unfused": [], "fused": []}
    for step in range(warmup + iters):
        for label, toggle in (("unfused", unfused), ("fused", fused)):
            toggle()
            sync()
            start = time.perf_counter()
            _fwd_bwd(layer, hidden, rope, grad_out)
            sync()
            if step >= warmup:
                times[label].append((time.perf_counter() - start) * 1e3)
    unfused()
    unfused_ms, fused_ms = statistics.median(times["unfused"]), statistics.median(times["fused"])
    return Row(
        layer=shape.name,
        shape=shape.describe(),
        seq=seq,
        dtype=str(dtype).removeprefix("torch."),
        backend=ops.name,
        unfused_ms=unfused_ms,
        fused_ms=fused_ms,
        ratio=fused_ms / unfused_ms,
        err_unfused=err["unfused"],
        err_fused=err["fused"],
    )


def format_table(rows: Sequence[Row]) -> str:
    head = (
        "| layer | shape | seq | dtype | backend | unfused ms | fused ms | fused/unfused "
        "| rel err out unf/fused | rel err dx unf/fused | rel err dW unf/fused |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        errs = " | ".join(f"{r.err_unfused[k]:.2e} / {r.err_fused[k]:.2e}" for k in ("out", "dx", "dW"))
        lines.append(
            f"| {r.layer} | {r.shape} | {r.seq} | {r.dtype} | {r.backend} | {r.unfused_ms:.2f} | {r.fused_ms:.2f} "
            f"| {r.ratio:.3f} | {errs} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/bench_kernels.py",
        description="Forward+backward of one Qwen3-4B / Qwen2.5-32B decoder layer with and without the kit's fused "
        "ops on the detected device (KIT_DEVICE overrides): time per iteration and error vs an fp32 reference.",
    )
    parser.add_argument("--model", choices=[*SHAPES, "all"], default="all", help="layer shape (default: all)")
    parser.add_argument("--seq", type=int, help=f"sequence length (default {FULL_SEQ}; {CPU_SEQ} on CPU)")
    parser.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    parser.add_argument(
        "--dtype", choices=[*DTYPES, "auto"], default="auto", help="auto: bf16 (fp16 on GPUs without bf16)"
    )
    parser.add_argument(
        "--backend", choices=[*kernel_ops.BACKENDS, "auto"], default="auto", help="fused backend (default: device's)"
    )
    parser.add_argument("--ops", default=",".join(kernel_ops.OP_NAMES), help="ops to fuse (default: all)")
    parser.add_argument("--attn", default="sdpa", help="attention implementation, same for both (default sdpa)")
    parser.add_argument("--warmup", type=int, help="warm-up iterations per variant (default 3; 1 on CPU)")
    parser.add_argument("--iters", type=int, help="timed iterations per variant (default 20; 5 on CPU)")
    parser.add_argument("--full-size", action="store_true", help="on CPU too, use the real shapes (slow)")
    parser.add_argument("--reduce", type=int, help=argparse.SUPPRESS)  # tests: shrink further
    parser.add_argument("--json", action="store_true", help="print one JSON object per row instead of the table")
    return parser


def _dtype_for(name: str, platform: kit_platform.Platform) -> torch.dtype:
    if name != "auto":
        return DTYPES[name]
    if not platform.bf16_supported():  # older GPUs (kit_platform.CudaPlatform.bf16_supported)
        return torch.float16
    return torch.bfloat16


@entry_point("scripts/bench_kernels.py")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    platform = kit_platform.current_platform()
    if args.backend == "auto":
        ops, notes = kernel_ops.select(platform)
    else:
        ops, notes = kernel_ops.load(args.backend), []
    on_cpu = not platform.has_devices  # ranks are processes: shrink the shapes (kit_platform.CpuPlatform)
    reduce = args.reduce or (CPU_FACTOR if on_cpu and not args.full_size else 1)
    seq = args.seq or (CPU_SEQ if reduce > 1 else FULL_SEQ)
    warmup = args.warmup if args.warmup is not None else (1 if on_cpu else 3)
    iters = args.iters or (5 if on_cpu else 20)
    dtype = _dtype_for(args.dtype, platform)
    enabled = [op.strip() for op in args.ops.split(",") if op.strip()]
    names = list(SHAPES) if args.model == "all" else [args.model]

    header = (
        f"bench_kernels: device {platform.name}, backend {ops.describe()}, dtype {str(dtype).removeprefix('torch.')}, "
        f"attn {args.attn}, ops {','.join(enabled)}, batch {args.batch}, {iters} timed iters (+{warmup} warm-up)"
    )
    if reduce > 1:
        header += (
            f"\nREDUCED SIZE on {platform.name}: hidden/heads/intermediate divided by {reduce}, seq {seq} "
            f"(real: seq {FULL_SEQ}); timings here say nothing about NPU/GPU gains"
        )
    if ops.name == "reference":
        header += "\nbackend is the pure-torch reference: 'fused' runs the same math, expect a ratio of ~1"
    for note in notes:
        header += f"\nnote: {note}"
    if not args.json:
        print(header, flush=True)

    rows = []
    for name in names:
        shape = SHAPES[name].reduced(reduce) if reduce > 1 else SHAPES[name]
        row = bench_layer(shape, seq, args.batch, dtype, platform, ops, enabled, args.attn, warmup, iters)
        rows.append(row)
        if args.json:
            print(json.dumps(asdict(row)), flush=True)
    if not args.json:
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
