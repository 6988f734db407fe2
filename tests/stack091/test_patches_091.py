"""The kit's verl 0.9.1 patch series (patches/0.9.1/) and CPU platform plugin, one test per fix.

Why here and not in tests/patches/: these run under the 0.9.1 stack's python (``.venv-0.9.1``) and import verl 0.9.1
directly; under any other verl they skip, so the main ``.venv`` (verl 0.6.1) collects them harmlessly. Each test fails
on the unpatched PyPI 0.9.1 and passes with the series applied (``pip install --no-deps build/verl-0.9.1``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kit_testing import installed_verl, needs_verl_09

VERL_VERSION = installed_verl()
pytestmark = needs_verl_09()


@pytest.fixture
def cpu_platform(monkeypatch: pytest.MonkeyPatch) -> Any:
    """verl's platform singleton set to the kit's CPU platform for one test, then restored."""
    from verl.plugin.platform import platform_manager

    from platforms import verl_platform

    cls = verl_platform.register()
    assert cls is not None
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(platform_manager, "_current_platform", cls())
    return platform_manager._current_platform


# ----------------------------------------------------------------------------------------------------- the plugin


def test_plugin_registers_cpu_platform(cpu_platform: Any) -> None:
    """VERL_PLATFORM=cpu resolves to the kit's platform: gloo, "cpu", Ray CPUs, a torch.cpu module with RNG calls."""
    import torch
    from verl.utils import device

    assert device.get_device_name() == "cpu"
    assert device.get_nccl_backend() == "gloo"
    assert device.get_resource_name() == "CPU"
    assert cpu_platform.ray_resource_options(0.5) == {"num_cpus": 0.5}
    module = device.get_torch_device()
    assert module == torch.cpu
    state = module.get_rng_state()
    first = torch.rand(3)
    module.set_rng_state(state)
    assert torch.equal(first, torch.rand(3))
    assert module.memory_allocated() == 0 and module.get_device_name() == "CPU"
    # kit: auto_set_device (verl/utils/device.py:157-166) must leave trainer.device=cpu alone.
    from omegaconf import OmegaConf

    config = OmegaConf.create({"trainer": {"device": "cpu"}})
    device.auto_set_device(config)
    assert config.trainer.device == "cpu"


def test_plugin_never_autodetected() -> None:
    """Without VERL_PLATFORM the CPU platform is never picked by detection (a GPU host stays on CUDA)."""
    from platforms import verl_platform

    cls = verl_platform.register()
    assert cls is not None and cls().is_platform_available(use_smi_check=True) is False


def test_plugin_env_per_stack() -> None:
    """The env and module list the cpu platform adds: the selectors on 0.9.1, nothing on the 0.6.1 reference."""
    from platforms import stacks, verl_platform

    reference, current = (stacks.get(name).verl.has_platform_registry for name in ("0.6.1", "0.9.1"))
    assert verl_platform.verl_env(reference) == {} and verl_platform.external_modules(reference) == []
    assert verl_platform.verl_env(current) == {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}
    assert verl_platform.external_modules(current) == ["platforms.verl_platform"]


def test_plugin_engine_selection(cpu_platform: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """VERL_ENGINE_DEVICE=cuda gives the CPU platform verl's FSDP engine; without it verl has none for "cpu"."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    monkeypatch.delenv("VERL_ENGINE_DEVICE", raising=False)
    with pytest.raises(ValueError, match="No engine registered for device='cpu'"):
        EngineRegistry.get_engine_cls("language_model", "fsdp2")
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cuda")
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead


def test_plugin_keeps_vllm_linear_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU linear keeps ``layer.weight`` after loading, so verl's weight sync has somewhere to load into."""
    import torch

    pytest.importorskip("vllm")
    from platforms import verl_platform

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert verl_platform.keep_vllm_weights_loadable()
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(64, 64), requires_grad=False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert layer.weight.shape == (64, 64)
    layer.weight.data.copy_(torch.eye(64))  # what verl's load_weights does
    x = torch.randn(2, 64)
    assert torch.allclose(layer.cpu_linear(x, layer.weight, None), x)


# ------------------------------------------------------------------------------------------ 0001 reward extra_info


def test_0001_naive_reward_does_not_share_extra_info() -> None:
    """The n samples of a prompt share one extra_info dict; each must reach compute_score with its own num_turns."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    class _Tok:
        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return "x"

    seen: list[int] = []

    def score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict) -> float:
        seen.append(extra_info["num_turns"])
        return 0.0

    shared = {"index": 0}
    n = 4
    batch = TensorDict(
        {"responses": torch.ones(n, 2, dtype=torch.long), "attention_mask": torch.ones(n, 4, dtype=torch.long)},
        batch_size=n,
    )
    non_tensor = {
        "data_source": np.array(["d"] * n, dtype=object),
        "reward_model": np.array([{"ground_truth": "1"}] * n, dtype=object),
        "extra_info": np.array([shared] * n, dtype=object),
        "__num_turns__": np.array([2, 4, 6, 8]),
    }
    data = DataProto(batch=batch, non_tensor_batch=non_tensor)
    manager = NaiveRewardManager.__new__(NaiveRewardManager)
    manager.tokenizer, manager.compute_score = _Tok(), score
    manager.is_async_reward_score, manager.reward_router_address, manager.reward_model_tokenizer = False, None, None

    async def run() -> None:
        manager.loop = asyncio.get_running_loop()
        await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(n)))

    asyncio.run(run())
    assert sorted(seen) == [2, 4, 6, 8]
    assert shared == {"index": 0}, f"the batch's shared extra_info was written to: {shared}"


# ------------------------------------------------------------------------------------ 0002 Ray resource pool check


def test_0002_resource_check_counts_platform_resource(cpu_platform: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU node with 8 Ray CPUs satisfies a 2-worker pool; unpatched, the check counts GPUs only and raises."""
    import ray
    from verl.single_controller.ray.base import ResourcePoolManager

    monkeypatch.setattr(ray._private.state, "available_resources_per_node", lambda: {"node": {"CPU": 8.0}})
    manager = ResourcePoolManager(resource_pool_spec={"global_pool": [2]}, mapping={})
    manager._check_resource_available()
    too_many = ResourcePoolManager(resource_pool_spec={"global_pool": [9]}, mapping={})
    with pytest.raises(ValueError, match="less than total desired"):
        too_many._check_resource_available()


# ------------------------------------------------------------------------------------------- 0003 gloo on CPU


def test_0003_process_group_on_cpu_platform(cpu_platform: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A worker's process group starts on the CPU platform (unpatched: "cpu:gloo,cpu:gloo" is a duplicate)."""
    import torch
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("DIST_INIT_METHOD", f"file://{tmp_path / 'rendezvous'}")
    assert not dist.is_initialized()
    try:
        initialize_global_process_group_ray(timeout_second=60)
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        assert dist.get_backend() in ("gloo", "cpu:gloo") and tensor.tolist() == [1.0, 1.0]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# -------------------------------------------------------------------------- 0004 vLLM replica worker device ids


def test_0004_vllm_replica_worker_device_id_on_cpu(cpu_platform: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU worker has no Ray accelerator ids: its device id is its LOCAL_RANK (unpatched: KeyError 'CPU')."""
    import ray
    from verl.workers.rollout.vllm_rollout import vllm_async_server

    class _Context:
        def get_accelerator_ids(self) -> dict[str, list[str]]:
            return {"GPU": [], "neuron_cores": []}  # what Ray 2.48 answers in a CPU-only actor

    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context())
    monkeypatch.setenv("LOCAL_RANK", "1")
    helper = getattr(vllm_async_server, "_worker_device_id", None)
    assert helper is not None, "unpatched: launch_servers indexes get_accelerator_ids()['CPU'] (KeyError: 'CPU')"
    assert helper() == "1"


# ------------------------------------------------------------------------------- 0005 FSDP2 offload policy on CPU


def test_0005_fsdp2_forward_only_engine_on_cpu(
    cpu_platform: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The reference model (forward_only) shards on CPU (unpatched: CPUOffloadPolicy pins memory, needs CUDA)."""
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from verl.workers.config import FSDPEngineConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        precision = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
        engine = SimpleNamespace(
            engine_config=FSDPEngineConfig(strategy="fsdp2", forward_only=True, mixed_precision=precision),
            model_config=SimpleNamespace(lora_rank=0, enable_activation_offload=False),
            device_mesh=init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",)),
        )
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config = Qwen3Config(
            vocab_size=32,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        )
        module = Qwen3ForCausalLM(config)
        sharded = FSDPEngine._build_fsdp_module(engine, module)
        assert sharded(input_ids=torch.ones(1, 4, dtype=torch.long)).logits.shape == (1, 4, 32)
    finally:
        dist.destroy_process_group()
