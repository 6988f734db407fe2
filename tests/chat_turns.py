"""Run verl's real ``ToolAgentLoop`` on a scripted conversation and compare its tokens with the chat template's.

Importable as ``chat_turns`` (tests/ is on sys.path under pytest and, through ``kit_env``, in the subprocess that
runs a patch check against unpatched verl). Shared by tests/patches/test_tool_turn_separator.py (patch 0023) and
tests/retool/test_real_chat_templates.py (the published Qwen templates).

The invariant: what the rollout trains on is the chat template's rendering of the same conversation, which is what
SFT (verl's ``MultiTurnSFTDataset``) trained on. Checked at every ``generate`` call (the prompt the server gets is
the template's render of the conversation so far plus the generation prompt) and for the whole rollout (prompt +
response ids are the full conversation's render up to the last close token, where generation stops).

``ToolAgentLoop`` is driven through its own ``init_class`` (tools and interactions from config files, as in a run)
and ``run``; only the LLM server is a stand-in that returns fixed assistant token ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kit_testing import REPO_ROOT, tiny_model_dir

from recipes.retool.schema import TOOL_NAME, TOOL_SCHEMA

TEMPLATES_DIR = REPO_ROOT / "tests" / "fixtures" / "templates"
_HEADER = re.compile(r"\A\{#-(?P<text>.*?)-#\}\n", re.DOTALL)

QUESTION = "What is 6 * 7?"
TOOL_OUTPUT = "42"
CALL = {"name": TOOL_NAME, "arguments": {"code": "print(6 * 7)"}}
FINAL = "The answer is \\boxed{42}."

# A template with no system prompt at all (synthetic). Like Qwen3's, it renders a message only for a role it knows,
# so verl 0.6.1's probe apply_chat_template([{}]) renders nothing (a role-less message).
NO_SYSTEM_TEMPLATE = r"""{%- for message in messages %}
    {%- if message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- elif message.role in ["system", "user", "assistant"] %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.role == "assistant" and enable_thinking is defined and enable_thinking is false %}
            {{- '<think>\n\n</think>\n\n' }}
        {%- endif %}
        {{- message.content }}
        {%- for call in message.tool_calls or [] %}
            {%- if message.content or not loop.first %}{{- '\n' }}{%- endif %}
            {{- '<tool_call>\n' + ({"name": call.function.name, "arguments": call.function.arguments} | tojson) }}
            {{- '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""


def published_template(file_name: str) -> str:
    """A published chat template from tests/fixtures/templates, its provenance comment removed, sha256-checked.

    The fixture's first comment records the source and the sha256 of the exact published text below it; a fixture
    edited by hand (or re-saved with other line ends) fails here instead of testing something unpublished.
    """
    raw = (TEMPLATES_DIR / file_name).read_text(encoding="utf-8")
    header = _HEADER.match(raw)
    assert header, f"{file_name}: no provenance comment ({{#- ... -#}}) at the top"
    recorded = re.search(r"sha256: ([0-9a-f]{64})", header["text"])
    assert recorded, f"{file_name}: the provenance comment records no sha256"
    text = raw[header.end() :]
    actual = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert actual == recorded[1], f"{file_name}: sha256 {actual} is not the published text's {recorded[1]}"
    return text


def tokenizer_with(template: str | None) -> Any:
    """The kit's offline Qwen tokenizer (tiny model folder) with ``template`` as its chat template (None: its own)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    if template is not None:
        tok.chat_template = template
    return tok


def tool_conversation() -> list[dict[str, Any]]:
    """user -> assistant tool call -> tool output -> final assistant answer (what SFT rows look like)."""
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": CALL}]},
        {"role": "tool", "content": TOOL_OUTPUT},
        {"role": "assistant", "content": FINAL},
    ]


def generated_ids(tok: Any, text: str) -> list[int]:
    """What the model emits for an assistant turn whose text is ``text``: the tokens, then the close token (eos)."""
    return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


class ScriptedServer:
    """Stands in for ``AsyncLLMServerManager``: returns the given assistant turns in order, records the prompts."""

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns, self.prompts = list(turns), []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        self.prompts.append(list(prompt_ids))
        return SimpleNamespace(token_ids=self.turns.pop(0), log_probs=None)


def _base_tool() -> type:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    class FixedOutputTool(BaseTool):
        """The code tool's schema (recipes/retool/schema.py); every call prints :data:`TOOL_OUTPUT`."""

        def __init__(self, config: dict, tool_schema: Any = None) -> None:
            super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(TOOL_SCHEMA))

        async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple:
            return ToolResponse(text=TOOL_OUTPUT), 0.0, {}

    return FixedOutputTool


class ScriptedInteraction:
    """A user that answers each assistant turn with the next line; the last one ends the conversation."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.replies = list(config["replies"])

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return instance_id or "0"

    async def generate_response(self, instance_id: str, messages: list, **kwargs: Any) -> tuple:
        answered = sum(m["role"] == "assistant" for m in messages)
        return answered == len(self.replies), self.replies[answered - 1], 0.0, {}


def __getattr__(name: str) -> Any:  # verl imports the tool class by name; build it lazily (verl is heavy)
    if name == "FixedOutputTool":
        return _base_tool()
    raise AttributeError(name)


@dataclass
class Rollout:
    """One ``ToolAgentLoop.run``: its output and what the stand-in server was asked for."""

    output: Any
    prompts: list[list[int]]
    messages: list[dict[str, Any]] = field(default_factory=list)


def _config(workdir: Path, chat_kwargs: dict[str, Any], replies: list[str] | None) -> Any:
    from omegaconf import OmegaConf

    tools = workdir / "tools.yaml"
    tools.write_text(f"tools:\n  - class_name: {__name__}.FixedOutputTool\n    config:\n      type: native\n")
    interactions = None
    if replies is not None:
        interactions = workdir / "interaction.yaml"
        spec = {"interaction": [{"name": "user", "class_name": f"{__name__}.ScriptedInteraction"}]}
        spec["interaction"][0]["config"] = {"replies": replies}
        OmegaConf.save(OmegaConf.create(spec), interactions)
    multi_turn = {
        "max_user_turns": 8,
        "max_assistant_turns": 8,
        "max_parallel_calls": 1,
        "max_tool_response_length": 256,
        "tool_response_truncate_side": "middle",
        "tool_config_path": None if replies is not None else str(tools),
        "format": "hermes",
        "interaction_config_path": str(interactions) if interactions else None,
    }
    rollout = {"prompt_length": 2048, "response_length": 2048, "multi_turn": multi_turn}
    return OmegaConf.create(
        {"data": {"apply_chat_template_kwargs": chat_kwargs}, "actor_rollout_ref": {"rollout": rollout}}
    )


def run_tool_agent_loop(
    tok: Any,
    turns: list[str],
    chat_kwargs: dict[str, Any] | None = None,
    replies: list[str] | None = None,
    base: type | None = None,
) -> Rollout:
    """``ToolAgentLoop.run`` (a fresh subclass: its own class-level state) on :data:`QUESTION`.

    ``turns`` are the assistant texts the stand-in model generates, each ending at the close token. With ``replies``
    the loop runs the interaction path (a scripted user answers each turn) instead of the tool. ``base``: a subclass
    of verl's loop to run instead (the kit's, recipes/retool/agent_loop.py).
    """
    from verl.experimental.agent_loop.agent_loop import _DummyConfig
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    loop_cls = type("ScriptedToolAgentLoop", (base or ToolAgentLoop,), {"_class_initialized": False})
    server = ScriptedServer([generated_ids(tok, text) for text in turns])
    messages = [{"role": "user", "content": QUESTION}]
    extra = {"extra_info": {"interaction_kwargs": {"name": "user"}}} if replies is not None else {}
    with tempfile.TemporaryDirectory() as workdir:
        config = _config(Path(workdir), dict(chat_kwargs or {}), replies)

        async def go() -> Any:
            loop = loop_cls(_DummyConfig(config), server_manager=server, tokenizer=tok, processor=None)
            return await loop.run({"temperature": 1.0}, raw_prompt=messages, **extra)

        output = asyncio.run(go())
    return Rollout(output, server.prompts, messages)


def first_difference(tok: Any, got: list[int], want: list[int]) -> str:
    """Where ``got`` leaves ``want``: the index and the decoded tokens around it (special tokens shown)."""
    index = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))

    def text(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=False)

    return (
        f"at token {index} of {len(got)} (template: {len(want)}): after {text(got[max(0, index - 8) : index])!r} "
        f"the rollout has {text(got[index : index + 3])!r} where the template has {text(want[index : index + 3])!r}"
    )


def assert_same_tokens(name: str, what: str, tok: Any, got: list[int], want: list[int]) -> None:
    assert got == want, f"[{name}] {what} differs from the chat template's rendering {first_difference(tok, got, want)}"


def check_tool_turns(name: str, tok: Any, chat_kwargs: dict[str, Any] | None = None) -> Rollout:
    """The tool path: every prompt, the whole rollout and its response mask against the template (``name`` is
    the template's, for the messages)."""
    kwargs = dict(chat_kwargs or {})
    conversation = tool_conversation()
    assistant_calls = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'
    rollout = run_tool_agent_loop(tok, [assistant_calls, FINAL], kwargs)
    tools = [TOOL_SCHEMA]
    for call, upto in enumerate((1, 3)):
        want = tok.apply_chat_template(conversation[:upto], tools=tools, add_generation_prompt=True, **kwargs)
        assert_same_tokens(name, f"prompt of generate call {call + 1}", tok, rollout.prompts[call], want)
    full = tok.apply_chat_template(conversation, tools=tools, add_generation_prompt=False, **kwargs)
    last_close = len(full) - 1 - full[::-1].index(tok.eos_token_id)
    out = rollout.output
    assert_same_tokens(
        name, "prompt_ids + response_ids", tok, out.prompt_ids + out.response_ids, full[: last_close + 1]
    )
    check_mask(name, tok, out, [generated_ids(tok, assistant_calls), generated_ids(tok, FINAL)])
    return rollout


def check_mask(name: str, tok: Any, out: Any, generated: list[list[int]]) -> None:
    """The response mask is 1 on exactly the generated tokens; the separator and the tool turn are context (0)."""
    first, last = generated
    context = len(out.response_ids) - len(first) - len(last)
    want = [1] * len(first) + [0] * context + [1] * len(last)
    after_close = tok.decode(out.response_ids[len(first) : len(first) + 1], skip_special_tokens=False)
    assert out.response_mask == want, (
        f"[{name}] response_mask is not 1 on the {len(first)} + {len(last)} generated tokens and 0 on the "
        f"{context} between (the token after the first close token is {after_close!r})"
    )


def check_interaction_turns(name: str, tok: Any) -> Rollout:
    """The interaction path: a scripted user answers; the rollout must be the template's render of the dialogue."""
    replies = ["Check it again.", "Correct."]
    rollout = run_tool_agent_loop(tok, ["It is 41.", "It is 42."], replies=replies)
    dialogue = [{"role": "user", "content": QUESTION}]
    for answer, reply in zip(["It is 41.", "It is 42."], replies, strict=True):
        dialogue += [{"role": "assistant", "content": answer}, {"role": "user", "content": reply}]
    for call, upto in enumerate((1, 3)):
        want = tok.apply_chat_template(dialogue[:upto], add_generation_prompt=True)
        assert_same_tokens(name, f"interaction prompt of generate call {call + 1}", tok, rollout.prompts[call], want)
    want = tok.apply_chat_template(dialogue, add_generation_prompt=True)
    out = rollout.output
    assert_same_tokens(name, "interaction prompt_ids + response_ids", tok, out.prompt_ids + out.response_ids, want)
    return rollout
