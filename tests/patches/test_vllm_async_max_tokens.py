"""Patch: the vLLM async server caps a turn's ``max_tokens`` at ``response_length`` (verl PR 4703).

Unpatched 0.6.1 ``vLLMHttpServerBase.generate`` asks vLLM for ``max_model_len - len(prompt_ids)`` new tokens, and
``max_model_len`` is ``prompt_length + response_length`` (the server's ``__init__``). With the ReTool recipes' 2,048 +
16,384 a first turn with a 300-token prompt may decode 18,132 tokens; ``ToolAgentLoop`` then keeps only the first
16,384 (``tool_agent_loop.py``: ``response_ids[: self.response_length]``), so the rest was decoded for nothing.

The check runs verl's real server on vLLM 0.11.0 (the CPU build) with the tiny Qwen3, at the same proportions
scaled down (prompt 64 + response 8 tokens), and records the ``SamplingParams`` vLLM's engine receives. The request
asks vLLM to ignore EOS, so the engine decodes exactly what it was allowed: 8 tokens patched, 62 unpatched.
"""

from __future__ import annotations

from kit_testing import interpreter_stack, require_vllm, tiny_model_dir, vllm_server

from platforms import CPU

PROMPT_LENGTH, RESPONSE_LENGTH = 64, 8
FIRST_TURN = 10  # prompt tokens of the first turn: max_model_len - 10 = 62 > 8


def check_vllm_max_tokens_capped() -> None:
    overrides = [
        *CPU.rollout_overrides(interpreter_stack()),  # what the cpu platform runs vLLM with (no sleep mode, eager)
        f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={RESPONSE_LENGTH}",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
    ]
    with vllm_server(tiny_model_dir(), overrides) as server:
        received = []
        generate = server.engine.generate

        def spy(*args, **kwargs):  # the real AsyncLLM.generate, after noting what it was asked for
            received.append(kwargs["sampling_params"].max_tokens)
            return generate(*args, **kwargs)

        server.engine.generate = spy
        # what ToolAgentLoop sends (agent_loop.py, AgentLoopWorker.generate_sequences), plus ignore_eos: the tiny
        # random model would otherwise stop at a random EOS and hide how many tokens it was allowed
        sampling = {"temperature": 1.0, "top_p": 1.0, "logprobs": False, "ignore_eos": True}
        output = server.loop.run_until_complete(server.generate(list(range(100, 100 + FIRST_TURN)), sampling, "r0"))
    decoded = len(output.token_ids)
    print(f"vLLM received max_tokens={received}, decoded {decoded} tokens")
    assert received and received[0] <= RESPONSE_LENGTH, (
        f"vLLM was asked for max_tokens={received} on a first turn, more than response_length {RESPONSE_LENGTH}; "
        f"it decoded {decoded} tokens and ToolAgentLoop keeps only {RESPONSE_LENGTH}"
    )
    assert decoded == RESPONSE_LENGTH, decoded


def test_patched() -> None:
    require_vllm()
    check_vllm_max_tokens_capped()


def test_unpatched_fails(unpatched_verl) -> None:
    require_vllm()
    unpatched_verl.expect_failure(
        __file__,
        "check_vllm_max_tokens_capped",
        match=f"vLLM was asked for max_tokens=[{PROMPT_LENGTH + RESPONSE_LENGTH - FIRST_TURN}]",
    )
