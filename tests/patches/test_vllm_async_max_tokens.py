"""Patch: the vLLM async server caps a turn's ``max_tokens`` at ``response_length`` (verl PR 4703).

Unpatched 0.6.1 ``vLLMHttpServerBase.generate`` asks vLLM for ``max_model_len - len(prompt_ids)`` new tokens, and
``max_model_len`` is ``prompt_length + response_length`` (the server's ``__init__``). With the ReTool recipes' 2,048 +
16,384 a first turn with a 300-token prompt may decode 18,132 tokens; ``ToolAgentLoop`` then keeps only the first
16,384 (``tool_agent_loop.py``: ``response_ids[: self.response_length]``), so the rest was decoded for nothing.

vLLM is not installed on CPU machines, so the check imports the real ``vllm_async_server`` module with a fake
``vllm`` package (every name it imports is a stand-in that keeps its keyword arguments), builds the server through
its own ``__init__`` from verl's composed rollout config, and replaces only the engine: a model that never emits EOS
and so decodes until ``max_tokens`` or the end of the context, as vLLM's length stop does.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from pathlib import Path

from kit_testing import ppo_config

PROMPT_LENGTH = 2048  # data.max_prompt_length of recipes/config/retool_qwen*_dapo.yaml
RESPONSE_LENGTH = 16384  # data.max_response_length of the same recipes
SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"


class _Recorded:
    """Stand-in for any vllm class: accepts anything and keeps keyword arguments as attributes."""

    def __init__(self, *args, **kwargs) -> None:
        self.args = args
        self.__dict__.update(kwargs)


class _FakeVllmModule(types.ModuleType):
    """A vllm (sub)module whose every attribute is a ``_Recorded`` subclass of that name (made once, then kept)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        fake = type(name, (_Recorded,), {"__module__": self.__name__})
        setattr(self, name, fake)
        return fake


class _FakeVllmFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "vllm" or fullname.startswith("vllm."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _FakeVllmModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


@contextlib.contextmanager
def _server_module_with_fake_vllm() -> Iterator[types.ModuleType]:
    """The real vllm_async_server module, imported against a fake vllm; sys.modules is restored afterwards.

    The ``vllm_rollout`` package's ``__init__`` (the sync rollout, torch/vllm internals, a vllm version check) is
    replaced by a bare package over the same folder, so only the server module itself and its own imports run.
    """
    import verl

    def ours(name: str) -> bool:
        return name == "vllm" or name.startswith(("vllm.", "verl.workers.rollout.vllm_rollout"))

    saved = {name: mod for name, mod in sys.modules.items() if ours(name)}
    finder = _FakeVllmFinder()
    sys.meta_path.insert(0, finder)
    package = types.ModuleType("verl.workers.rollout.vllm_rollout")
    package.__path__ = [str(Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout")]
    package.vLLMAsyncRollout = type("vLLMAsyncRollout", (), {})
    sys.modules[package.__name__] = package
    try:
        yield importlib.import_module(SERVER_MODULE)
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


class _NoEosEngine:
    """vLLM's AsyncLLM for a policy that never stops on its own: it decodes until max_tokens or max_model_len."""

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self.max_tokens: list[int] = []

    async def generate(self, prompt, sampling_params, request_id, lora_request=None):
        self.max_tokens.append(sampling_params.max_tokens)
        n = min(sampling_params.max_tokens, self.max_model_len - len(prompt.prompt_token_ids))
        completion = types.SimpleNamespace(token_ids=[7] * n, logprobs=None)
        yield types.SimpleNamespace(outputs=[completion])


def check_vllm_max_tokens_capped() -> None:
    from verl.workers.rollout.replica import RolloutMode

    config = ppo_config(
        [
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
        ]
    ).actor_rollout_ref.rollout
    with _server_module_with_fake_vllm() as server_module:
        server = server_module.vLLMHttpServerBase(
            config,
            types.SimpleNamespace(processor=None, lora_rank=0),  # the HFModelConfig fields generate reads
            RolloutMode.HYBRID,
            workers=[],
            replica_rank=0,
            node_rank=1,  # not the master node: no ports to open for a server that is never launched
            gpus_per_node=1,
            nnodes=1,
        )
        assert server.config.max_model_len == PROMPT_LENGTH + RESPONSE_LENGTH, server.config.max_model_len
        server.engine = _NoEosEngine(server.config.max_model_len)
        # what ToolAgentLoop sends (agent_loop.py, AgentLoopWorker.generate_sequences)
        sampling = {"temperature": 1.0, "top_p": 1.0, "repetition_penalty": 1.0, "logprobs": False}

        def turn(prompt_len: int) -> int:
            output = asyncio.run(server.generate(list(range(prompt_len)), dict(sampling), request_id=f"r{prompt_len}"))
            return len(output.token_ids)

        first = turn(300)  # the first turn: system prompt + question
        assert first <= RESPONSE_LENGTH, (
            f"first turn decoded {first} tokens, more than response_length {RESPONSE_LENGTH} "
            f"(max_tokens={server.engine.max_tokens[-1]}); ToolAgentLoop drops the {first - RESPONSE_LENGTH} extra"
        )
        assert server.engine.max_tokens[-1] == RESPONSE_LENGTH, server.engine.max_tokens

        # a late turn whose context (prompt, earlier turns, tool outputs) is nearly full: the context still bounds it
        late_prompt = PROMPT_LENGTH + RESPONSE_LENGTH - 1000
        assert turn(late_prompt) == 1000, server.engine.max_tokens
        assert server.engine.max_tokens[-1] == 1000, server.engine.max_tokens


def test_patched() -> None:
    check_vllm_max_tokens_capped()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_vllm_max_tokens_capped", match="first turn decoded 18132 tokens, more than response_length"
    )
