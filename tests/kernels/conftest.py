"""Fixtures for the kernel tests: stub torch_npu / liger_kernel, tiny Qwen models, and isolation of the global
transformers patches (every test leaves transformers and sys.modules as it found them)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

STUBS = Path(__file__).resolve().parent / "stubs"

#: Modules whose functions verl's npu_patch or the kit reassign.
PATCHED_MODULES = (
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.qwen3.modeling_qwen3",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    "transformers.models.qwen3_moe.modeling_qwen3_moe",
)
VERL_NPU_PATCH = "verl.models.transformers.npu_patch"


def _snapshot() -> list[tuple[Any, str, Any]]:
    saved: list[tuple[Any, str, Any]] = []
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            saved.append((module, attr, value))
            if isinstance(value, type) and value.__module__ == name and "forward" in vars(value):
                saved.append((value, "forward", vars(value)["forward"]))
    return saved


@pytest.fixture(autouse=True)
def isolate_transformers() -> Iterator[None]:
    """Undo every class/module reassignment a test made (the kit's, verl's npu_patch's) and forget npu_patch."""
    saved = _snapshot()
    had_npu_patch = VERL_NPU_PATCH in sys.modules
    yield
    for holder, attr, value in saved:
        setattr(holder, attr, value)
    if not had_npu_patch:
        sys.modules.pop(VERL_NPU_PATCH, None)


def _import_stub(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    def forget() -> None:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]

    forget()
    monkeypatch.syspath_prepend(str(STUBS))
    try:
        yield importlib.import_module(name)
    finally:
        forget()


@pytest.fixture
def stub_torch_npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stub torch_npu, importable as ``torch_npu`` for the test; its CALLS log starts empty."""
    for module in _import_stub("torch_npu", monkeypatch):
        module.CALLS.clear()
        yield module


@pytest.fixture
def stub_liger(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stub ``liger_kernel.transformers.functional``; its CALLS log starts empty."""
    for _ in _import_stub("liger_kernel", monkeypatch):
        functional = importlib.import_module("liger_kernel.transformers.functional")
        functional.CALLS.clear()
        yield functional


@pytest.fixture
def tiny_model() -> Callable[..., torch.nn.Module]:
    """Factory: a tiny random Qwen2/Qwen3 causal LM (hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16)."""

    def build(model_type: str, dtype: torch.dtype = torch.float32, **overrides: Any) -> torch.nn.Module:
        from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

        common: dict[str, Any] = dict(
            vocab_size=96,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attn_implementation="eager",
        )
        common.update(overrides)
        if model_type == "qwen3":
            config, cls = Qwen3Config(head_dim=16, **common), Qwen3ForCausalLM
        else:
            config, cls = Qwen2Config(**common), Qwen2ForCausalLM
        torch.manual_seed(0)
        model = cls(config).to(dtype)
        with torch.no_grad():  # RMSNorm weights start at 1: randomise them so a dropped weight would show
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.uniform_(0.5, 1.5)
        return model

    return build


def forward_backward(model: torch.nn.Module, seed: int = 1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and every parameter's gradient for one fixed batch (B=2, S=7: S != heads, so layouts can't alias)."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=gen)
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids).logits
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), input_ids.flatten())
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach().clone(), grads


@pytest.fixture
def run_fwd_bwd() -> Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    return forward_backward


def assert_same_run(
    expected: tuple[torch.Tensor, dict[str, torch.Tensor]],
    actual: tuple[torch.Tensor, dict[str, torch.Tensor]],
    atol: float = 0.0,
    rtol: float = 0.0,
) -> None:
    """Logits and all gradients equal within tolerance (exactly, by default)."""
    torch.testing.assert_close(actual[0], expected[0], atol=atol, rtol=rtol, msg=lambda m: f"logits: {m}")
    assert actual[1].keys() == expected[1].keys()
    for name, grad in expected[1].items():
        torch.testing.assert_close(actual[1][name], grad, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture
def same_run() -> Callable[..., None]:
    return assert_same_run
