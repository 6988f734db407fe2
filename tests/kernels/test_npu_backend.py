"""The torch_npu backend, driven through the stub torch_npu that enforces the documented op contracts."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from npu_kernels import ops as kernel_ops
from npu_kernels.ops import npu as npu_ops
from npu_kernels.ops import reference

TOL = {torch.float32: dict(atol=1e-6, rtol=1e-6), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _cos_sin(batch: int, seq: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = (torch.arange(seq).float()[None, :, None] + torch.arange(batch)[:, None, None]) * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _hf_qk(batch: int, seq: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
    """q/k as transformers builds them: ``proj(h).view(B, S, N, D).transpose(1, 2)`` (BNSD view of BSND memory)."""
    q = _rand(batch, seq, heads, head_dim, dtype=dtype).transpose(1, 2).requires_grad_()
    k = _rand(batch, seq, kv_heads, head_dim, dtype=dtype, seed=1).transpose(1, 2).requires_grad_()
    return q, k


def _grads(outputs: tuple[torch.Tensor, ...], inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    upstream = [_rand(*o.shape, seed=7 + i).to(o.dtype) for i, o in enumerate(outputs)]
    return torch.autograd.grad(outputs, inputs, upstream)


@pytest.fixture
def npu(stub_torch_npu: ModuleType) -> kernel_ops.KernelOps:
    ops = kernel_ops.load("npu")
    assert ops.detail == "torch_npu 0.0.0+kit.stub"
    return ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_forward_backward(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType, dtype: torch.dtype) -> None:
    x = (_rand(2, 7, 64, dtype=dtype) * 2).requires_grad_()
    w = (_rand(64, dtype=dtype, seed=1).abs() + 0.5).requires_grad_()
    out, ref = npu.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    for got, want in zip(_grads((out,), (x, w)), _grads((ref,), (x, w)), strict=True):
        torch.testing.assert_close(got, want, **TOL[dtype])
    assert [c["op"] for c in stub_torch_npu.CALLS] == ["npu_rms_norm"]


def test_rms_norm_casts_input_to_weight_dtype(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType) -> None:
    """Gap 2: npu_rms_norm needs gamma.dtype == x.dtype; the kit casts, a direct call (verl 0.6.1) is rejected."""
    x, w = _rand(2, 7, 64), torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(AssertionError, match="gamma dtype torch.bfloat16 must equal self dtype torch.float32"):
        stub_torch_npu.npu_rms_norm(x, w, epsilon=1e-6)
    out = npu.rms_norm(x, w, 1e-6)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, reference.rms_norm(x.bfloat16(), w, 1e-6), **TOL[torch.bfloat16])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_forward_backward(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType, dtype: torch.dtype) -> None:
    # Non-contiguous halves on purpose: the backend must still hand the kernel one contiguous tensor.
    gate = _rand(2, 32, 7, dtype=dtype).transpose(1, 2).requires_grad_()
    up = _rand(2, 7, 32, dtype=dtype, seed=1).requires_grad_()
    out, ref = npu.swiglu(gate, up), reference.swiglu(gate, up)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    for got, want in zip(_grads((out,), (gate, up)), _grads((ref,), (gate, up)), strict=True):
        torch.testing.assert_close(got, want, **TOL[dtype])
    assert stub_torch_npu.CALLS[0]["shape"] == (2, 7, 64)


def test_stub_swiglu_rejects_non_contiguous(stub_torch_npu: ModuleType) -> None:
    with pytest.raises(AssertionError, match="non-contiguous"):
        stub_torch_npu.npu_swiglu(_rand(4, 8).t(), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_hf_layout_uses_contiguous_bsnd(
    npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType, dtype: torch.dtype
) -> None:
    q, k = _hf_qk(2, 7, 4, 2, 16, dtype)
    cos, sin = _cos_sin(2, 7, 16, dtype)
    out, ref = npu.rope(q, k, cos, sin), reference.rope(q, k, cos, sin)
    for got, want in zip(out, ref, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, **TOL[dtype])
    for got, want in zip(_grads(out, (q, k)), _grads(ref, (q, k)), strict=True):
        torch.testing.assert_close(got, want, **TOL[dtype])
    calls = [c for c in stub_torch_npu.CALLS if c["op"] == "npu_rotary_mul"]
    assert [(c["shape"], c["r_shape"]) for c in calls] == [
        ((2, 7, 4, 16), (2, 7, 1, 16)),
        ((2, 7, 2, 16), (2, 7, 1, 16)),
    ]
    assert all(c["contiguous"] and c["rotary_mode"] == "half" and "BSND" in c["layouts"] for c in calls)


def test_rope_contiguous_bnsd_input_stays_bnsd(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType) -> None:
    q, k = _rand(2, 4, 7, 16), _rand(2, 2, 7, 16, seed=1)
    cos, sin = _cos_sin(2, 7, 16, torch.float32)
    for got, want in zip(npu.rope(q, k, cos, sin), reference.rope(q, k, cos, sin), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert [c["layouts"] for c in stub_torch_npu.CALLS] == [["BNSD"], ["BNSD"]]
    assert [c["r_shape"] for c in stub_torch_npu.CALLS] == [(2, 1, 7, 16), (2, 1, 7, 16)]


def test_rope_bsnd_caller_layout(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType) -> None:
    """``unsqueeze_dim=2`` means q/k are (B, S, N, D): contiguous ones go to the kernel as BSND."""
    q, k = _rand(2, 7, 4, 16), _rand(2, 7, 2, 16, seed=1)
    cos, sin = _cos_sin(2, 7, 16, torch.float32)
    out = npu.rope(q, k, cos, sin, unsqueeze_dim=2)
    for got, want in zip(out, reference.rope(q, k, cos, sin, unsqueeze_dim=2), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert all("BSND" in c["layouts"] for c in stub_torch_npu.CALLS)


def test_rope_falls_back_outside_documented_limits(npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType) -> None:
    cos, sin = _cos_sin(1, 3, 16, torch.float32)
    q, k = _rand(1, 1000, 3, 16), _rand(1, 2, 3, 16)  # N >= 1000
    torch.testing.assert_close(npu.rope(q, k, cos, sin)[0], reference.rope(q, k, cos, sin)[0])
    q = _rand(1, 4, 3, 16)
    npu.rope(q, k, cos, sin, unsqueeze_dim=0)  # neither BNSD nor BSND: the reference handles it
    assert stub_torch_npu.CALLS == []


def test_wrong_layout_is_caught_by_the_stub(
    npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BNSD/BSND mix-up (cos/sin given the other layout's singleton axis) must fail, not silently broadcast."""
    monkeypatch.setattr(npu_ops, "COS_UNSQUEEZE_DIM", {"BNSD": 2, "BSND": 1})
    q, k = _hf_qk(2, 7, 4, 2, 16, torch.float32)
    cos, sin = _cos_sin(2, 7, 16, torch.float32)
    with pytest.raises(AssertionError, match=r"r1/r2 shape \(2, 1, 7, 16\) is not a documented broadcast"):
        npu.rope(q, k, cos, sin)


def test_wrong_rotary_mode_changes_the_result(
    npu: kernel_ops.KernelOps, stub_torch_npu: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'interleave' is a valid mode, so the kernel accepts it; the parity check is what must catch it."""
    monkeypatch.setattr(npu_ops, "ROTARY_MODE", "interleave")
    q, k = _hf_qk(2, 7, 4, 2, 16, torch.float32)
    cos, sin = _cos_sin(2, 7, 16, torch.float32)
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        torch.testing.assert_close(npu.rope(q, k, cos, sin)[0], reference.rope(q, k, cos, sin)[0])
    assert stub_torch_npu.CALLS[0]["rotary_mode"] == "interleave"


def test_stub_rejects_non_4d_and_unknown_mode(stub_torch_npu: ModuleType) -> None:
    x, r = _rand(7, 4, 16), _rand(7, 1, 16)
    with pytest.raises(AssertionError, match="must be 4-D"):
        stub_torch_npu.npu_rotary_mul(x, r, r)
    with pytest.raises(AssertionError, match="rotary_mode 'gptj'"):
        stub_torch_npu.npu_rotary_mul(x[None], r[None], r[None], rotary_mode="gptj")


def test_npu_backend_unavailable_without_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch_npu", None)  # import torch_npu -> ImportError
    with pytest.raises(kernel_ops.BackendUnavailable, match="torch_npu"):
        kernel_ops.load("npu")
