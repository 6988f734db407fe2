"""The CUDA backend's dispatch: liger-kernel when importable (a stub here), the reference otherwise."""

from __future__ import annotations

import inspect
import sys
from types import ModuleType

import pytest
import torch

import platforms as kit_platform
from npu_kernels import ops as kernel_ops
from npu_kernels.ops import reference
from npu_kernels.ops.base import RopeFn


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_cuda_without_liger_selects_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "liger_kernel", None)
    ops, notes = kernel_ops.select(kit_platform.CUDA)
    assert ops.name == "reference"
    assert notes == ["liger backend needs liger-kernel: not installed"]


def test_cpu_and_npu_preferences() -> None:
    assert kernel_ops.select(kit_platform.CPU)[0].name == "reference"
    assert kit_platform.NPU.kernel_backends == ("npu", "reference")


def test_cuda_with_liger_dispatches_to_it(stub_liger: ModuleType) -> None:
    ops, notes = kernel_ops.select(kit_platform.CUDA)
    assert (ops.name, notes, ops.detail) == ("liger", [], "liger-kernel 0.0.0+kit.stub")
    x, w = _rand(2, 7, 64), _rand(64, seed=1)
    torch.testing.assert_close(ops.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6))
    gate, up = _rand(2, 7, 32), _rand(2, 7, 32, seed=1)
    torch.testing.assert_close(ops.swiglu(gate, up), reference.swiglu(gate, up))
    q, k = _rand(2, 7, 4, 16).transpose(1, 2), _rand(2, 7, 2, 16, seed=1).transpose(1, 2)
    cos, sin = _rand(2, 7, 16, seed=2).tanh(), _rand(2, 7, 16, seed=3).tanh()
    for got, want in zip(ops.rope(q, k, cos, sin), reference.rope(q, k, cos, sin), strict=True):
        torch.testing.assert_close(got, want)
    assert [c["op"] for c in stub_liger.CALLS] == ["liger_rms_norm", "liger_swiglu", "liger_rope"]
    assert stub_liger.CALLS[0]["casting_mode"] == "llama" and stub_liger.CALLS[0]["in_place"] is False


def test_liger_leaves_unsupported_cases_to_the_reference(stub_liger: ModuleType) -> None:
    ops = kernel_ops.load("liger")
    x, w = _rand(2, 7, 64), _rand(64, seed=1).bfloat16()  # HF promotes mixed dtypes, liger would not
    assert ops.rms_norm(x, w, 1e-6).dtype == torch.float32
    q, k = _rand(2, 7, 4, 16), _rand(2, 7, 2, 16, seed=1)
    cos, sin = _rand(2, 7, 16, seed=2).tanh(), _rand(2, 7, 16, seed=3).tanh()
    ops.rope(q, k, cos, sin, unsqueeze_dim=2)  # liger's RoPE only knows (B, N, S, D)
    assert stub_liger.CALLS == []


def test_every_backend_implements_the_one_rope_signature(stub_torch_npu: ModuleType, stub_liger: ModuleType) -> None:
    """npu_kernels/ops/base.py:RopeFn states the rope signature once; each backend's rope takes exactly it."""

    def params(fn: object) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]

    want = params(RopeFn.__call__)[1:]  # without self
    assert [name for name, _, _ in want] == ["q", "k", "cos", "sin", "unsqueeze_dim"]
    for backend in kernel_ops.BACKENDS:
        assert params(kernel_ops.load(backend).rope) == want, backend
