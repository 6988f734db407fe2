"""Tiny random-weight Qwen2/Qwen3 checkpoints with the REAL Qwen tokenizer, built fully offline.

Why: the ReTool smoke runs need a model directory that verl 0.6.1 loads exactly like a Qwen2.5/Qwen3 checkpoint
(the real tokenizer, :mod:`recipes.smoke.offline_tokenizer`, so ``ToolAgentLoop`` and ``HermesToolParser`` see what
they see in production) while being small enough to train on one device in seconds, and without any model-hub
access.

Both builds are cached (:mod:`recipes.smoke.build_cache`): the output directory holds a small fingerprint file
(inputs + sha256 of every file written), and a second call with the same inputs only verifies it.

CLI: ``python -m recipes.smoke.tiny_model --out DIR [--arch qwen3|qwen2]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from platforms.cli_errors import entry_point
from recipes.smoke.build_cache import (
    BUILD_REVISION,
    digest,
    is_cached,
    locked,
    log,
    move_into,
    version,
    write_fingerprint,
)
from recipes.smoke.offline_tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    build_qwen_tokenizer,
    build_tokenizer_locked,
    qwen_tiktoken_path,
    tokenizer_inputs,
)

VOCAB_SIZE = 151936
"""Embedding rows of the real Qwen2.5/Qwen3 models (the tokenizer's 151669 entries padded up)."""

MODEL_FINGERPRINT = "tiny_model_fingerprint.json"

# Weight files that, if left over from something else in out_dir, transformers would load in preference to (or
# alongside) what we write; removed before a rebuild.
_STALE_WEIGHT_GLOBS = ("model*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin*")

ARCHS = ("qwen3", "qwen2")
NUM_HEADS = 4
NUM_KV_HEADS = 2


def tiny_qwen_config_kwargs(
    arch: str = "qwen3", hidden_size: int = 64, num_layers: int = 2, init_range: float = 0.02
) -> dict[str, Any]:
    """Keyword arguments of the tiny Qwen3Config/Qwen2Config: real vocabulary width and special ids, toy size.

    Heads stay at 4 (2 KV heads, so GQA paths are exercised) and head_dim = hidden_size / 4, i.e. 16 at the default
    64; pass hidden_size=128 for head_dim 32 where an attention kernel rejects 16. Plain data, so the cache check
    can fingerprint it without importing transformers. ``init_range`` is the weights' std: at transformers' 0.02
    the model's next-token distribution is near-uniform (entropy ~ln 151,936) and barely moves when weights do; a
    test that must see weights move (the rollout's weight sync) uses a larger one.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if hidden_size % NUM_HEADS or (hidden_size // NUM_HEADS) % 2:
        raise ValueError(f"hidden_size must be a multiple of {2 * NUM_HEADS}, got {hidden_size}")
    common: dict[str, Any] = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        hidden_act="silu",
        max_position_embeddings=4096,
        initializer_range=init_range,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        use_sliding_window=False,
        max_window_layers=num_layers,
        attention_dropout=0.0,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    if arch == "qwen3":
        common.update(head_dim=hidden_size // NUM_HEADS, attention_bias=False)
    return common


def tiny_qwen_config(arch: str = "qwen3", hidden_size: int = 64, num_layers: int = 2, init_range: float = 0.02):
    """The tiny ``Qwen3Config`` (or ``Qwen2Config``) described by :func:`tiny_qwen_config_kwargs`."""
    from transformers import Qwen2Config, Qwen3Config

    kwargs = tiny_qwen_config_kwargs(arch, hidden_size, num_layers, init_range)
    return Qwen3Config(**kwargs) if arch == "qwen3" else Qwen2Config(**kwargs)


def _model_inputs(
    arch: str, hidden_size: int, num_layers: int, seed: int, config_kwargs: dict[str, Any], tiktoken_file: Path
) -> dict[str, Any]:
    """What the model build depends on: its fingerprint records these, and a change to any rebuilds it."""
    return {
        "kind": "tiny-qwen",
        "revision": BUILD_REVISION,
        "arch": arch,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "seed": seed,
        "dtype": "bfloat16",
        "config_sha256": digest(config_kwargs),
        "tokenizer_sha256": digest(tokenizer_inputs(tiktoken_file)),
        "torch": version("torch"),
        "transformers": version("transformers"),
    }


def _write_random_model(out_dir: Path, config: Any, seed: int, inputs: dict[str, Any]) -> None:
    """Initialise ``config``'s model from ``seed``, save it as bf16 safetensors into ``out_dir``, fingerprint it."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    t0 = time.perf_counter()
    shape = f"hidden {config.hidden_size}, {config.num_hidden_layers} layers"
    log(f"model: initialising random {config.model_type} ({shape}, seed {seed}) ...")
    (out_dir / MODEL_FINGERPRINT).unlink(missing_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)  # fp32 init (torch's default dtype)
    model = model.to(torch.bfloat16)  # save_pretrained records "dtype": "bfloat16" in config.json
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=[EOS_ID, BOS_ID], pad_token_id=PAD_ID)
    for pattern in _STALE_WEIGHT_GLOBS:
        for stale in out_dir.glob(pattern):
            stale.unlink()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-model-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        files = move_into(Path(tmp), out_dir)
    write_fingerprint(out_dir, MODEL_FINGERPRINT, inputs, files)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: built {', '.join(files)} ({n_params / 1e6:.1f}M params) in {time.perf_counter() - t0:.1f}s")


def build_tiny_qwen(
    out_dir: Path,
    arch: str = "qwen3",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    init_range: float = 0.02,
) -> Path:
    """Write a random-weight tiny Qwen3 (or Qwen2) causal LM plus the real Qwen tokenizer into ``out_dir``.

    Weights are drawn with ``torch.manual_seed(seed)`` (inside ``fork_rng``, so the caller's RNG is untouched) in
    fp32 and saved as bf16 safetensors: bf16 is what real Qwen checkpoints ship (``torch_dtype`` "auto" in vLLM/SGLang
    then picks a dtype their NPU/flash attention kernels support), verl's FSDP actor upcasts to its own param dtype
    anyway, and it halves the file (~39 MB instead of ~78 MB: two untied 151936x64 matrices dominate), keeping the
    directory under the device runner's 64 MiB carry limit. Same seed and library versions give byte-identical
    weights. Cached like :func:`~recipes.smoke.offline_tokenizer.build_qwen_tokenizer`. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    config_kwargs = tiny_qwen_config_kwargs(arch, hidden_size, num_layers, init_range)
    tiktoken_file = qwen_tiktoken_path()
    with locked(out_dir):
        build_tokenizer_locked(out_dir, tiktoken_file)
        inputs = _model_inputs(arch, hidden_size, num_layers, seed, config_kwargs, tiktoken_file)
        if is_cached(out_dir, MODEL_FINGERPRINT, inputs):
            log(f"model: reusing {out_dir}")
            return out_dir
        _write_random_model(out_dir, tiny_qwen_config(arch, hidden_size, num_layers, init_range), seed, inputs)
    return out_dir


@entry_point("python -m recipes.smoke.tiny_model")
def main(argv: list[str] | None = None) -> int:
    """CLI entry: build (or reuse) the tiny model directory and print its path as the last stdout line."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes.smoke.tiny_model",
        description="Build, offline, a tiny random-weight Qwen3/Qwen2 checkpoint with the real Qwen tokenizer "
        "(cached: rerunning with the same arguments reuses the directory).",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory (created if missing)")
    parser.add_argument("--arch", choices=ARCHS, default="qwen3", help="model architecture (default: qwen3)")
    parser.add_argument("--hidden-size", type=int, default=64, help="hidden size; head_dim = hidden/4 (default: 64)")
    parser.add_argument("--num-layers", type=int, default=2, help="decoder layers (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="weight-init seed (default: 0)")
    parser.add_argument("--init-range", type=float, default=0.02, help="weight-init std (default: 0.02)")
    parser.add_argument("--tokenizer-only", action="store_true", help="write only the tokenizer")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    if args.tokenizer_only:
        path = build_qwen_tokenizer(args.out)
    else:
        path = build_tiny_qwen(args.out, args.arch, args.hidden_size, args.num_layers, args.seed, args.init_range)
    log(f"done in {time.perf_counter() - t0:.1f}s")
    print(path.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
