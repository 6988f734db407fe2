"""Patch: verl's vLLM server passes a boolean rollout option set to False to vLLM as ``--no-<flag>``.

Unpatched 0.6.1 ``vLLMHttpServerBase.launch_server`` turns its argument dict into vLLM's command line and appends a
boolean only when it is True, so ``rollout.enable_prefix_caching=False`` (and ``enable_chunked_prefill=False``)
never reach vLLM, whose V1 engine turns prefix caching on when the flag is absent
(vllm/engine/arg_utils.py, ``EngineArgs._set_default_args``). The check starts verl's real server on vLLM 0.11.0's
CPU build with the tiny Qwen3 and ``enable_prefix_caching=False`` and asks the running engine what it uses; it also
reads the parsed command line for ``enable_chunked_prefill`` (vLLM 0.11's V1 engine then turns chunked prefill on for
every generation model regardless, arg_utils.py ``_set_default_args``; the patch can only make the False arrive).
"""

from __future__ import annotations

from kit_testing import interpreter_stack, require_vllm, tiny_model_dir, vllm_server, vllm_server_args

from platforms import CPU

OVERRIDES = [
    *CPU.rollout_overrides(interpreter_stack()),
    "data.max_prompt_length=64",
    "data.max_response_length=8",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.enable_prefix_caching=False",
    "actor_rollout_ref.rollout.enable_chunked_prefill=False",
]


def check_false_reaches_the_engine() -> None:
    args = vllm_server_args(tiny_model_dir(), OVERRIDES)
    parsed = {key: getattr(args, key) for key in ("enable_prefix_caching", "enable_chunked_prefill")}
    print(f"vLLM's parsed command line: {parsed}")
    assert parsed == {"enable_prefix_caching": False, "enable_chunked_prefill": False}, (
        f"rollout.enable_prefix_caching=False and enable_chunked_prefill=False were not passed to vLLM: its command "
        f"line parsed to {parsed} (None: the flag was left out, so vLLM's default applies)"
    )
    with vllm_server(tiny_model_dir(), OVERRIDES) as server:
        engine_says = server.engine.vllm_config.cache_config.enable_prefix_caching
    print(f"the running engine's cache_config.enable_prefix_caching = {engine_says}")
    assert engine_says is False, f"rollout.enable_prefix_caching=False, but the engine runs with {engine_says}"


def test_patched() -> None:
    require_vllm()
    check_false_reaches_the_engine()


def test_unpatched_fails(unpatched_verl) -> None:
    require_vllm()
    unpatched_verl.expect_failure(
        __file__,
        "check_false_reaches_the_engine",
        match="parsed to {'enable_prefix_caching': None, 'enable_chunked_prefill': None}",
    )
