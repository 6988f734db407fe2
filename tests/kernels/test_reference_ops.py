"""The reference ops against independent float64 formulas, and against transformers' own code (bit for bit)."""

from __future__ import annotations

import math

import pytest
import torch

from npu_kernels.ops import reference

TOL = {torch.float32: dict(atol=2e-6, rtol=2e-6), torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _rope_tables(batch: int, seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Angles (B, S, D/2) for non-contiguous positions, and HF-style cos/sin (B, S, D): the halves repeated."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    positions = torch.stack([torch.arange(seq) * (b + 1) + 3 * b for b in range(batch)]).to(torch.float64)
    angles = positions[..., None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    return angles, emb.cos(), emb.sin()


def _rope_float64(x: torch.Tensor, angles: torch.Tensor, head_axis: int) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+D/2}) by its angle, written as explicit 2x2 rotations (no rotate_half)."""
    x = x.double()
    half = x.shape[-1] // 2
    theta = angles.unsqueeze(head_axis)
    c, s = theta.cos(), theta.sin()
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat((lo * c - hi * s, hi * c + lo * s), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_float64(dtype: torch.dtype) -> None:
    x = _rand(3, 5, 64, dtype=dtype) * 3
    w = _rand(64, dtype=dtype, seed=1)
    eps = 1e-6
    x64, w64 = x.double(), w.double()
    expected = x64 / torch.sqrt((x64 * x64).sum(-1, keepdim=True) / x.shape[-1] + eps) * w64
    out = reference.rms_norm(x, w, eps)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_matches_float64(dtype: torch.dtype) -> None:
    gate, up = _rand(4, 6, 32, dtype=dtype) * 4, _rand(4, 6, 32, dtype=dtype, seed=1)
    g64, u64 = gate.double(), up.double()
    expected = g64 / (1 + torch.exp(-g64)) * u64
    torch.testing.assert_close(reference.swiglu(gate, up).double(), expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_matches_float64(dtype: torch.dtype, unsqueeze_dim: int) -> None:
    batch, heads, kv_heads, seq, head_dim = 2, 4, 2, 7, 16
    angles, cos, sin = _rope_tables(batch, seq, head_dim)
    if unsqueeze_dim == 1:
        q, k = _rand(batch, heads, seq, head_dim, dtype=dtype), _rand(batch, kv_heads, seq, head_dim, dtype=dtype)
    else:
        q, k = _rand(batch, seq, heads, head_dim, dtype=dtype), _rand(batch, seq, kv_heads, head_dim, dtype=dtype)
    q_out, k_out = reference.rope(q, k, cos.to(dtype), sin.to(dtype), unsqueeze_dim=unsqueeze_dim)
    torch.testing.assert_close(q_out.double(), _rope_float64(q, angles, unsqueeze_dim), **TOL[dtype])
    torch.testing.assert_close(k_out.double(), _rope_float64(k, angles, unsqueeze_dim), **TOL[dtype])
    # A rotation keeps each pair's norm: a cheap second witness that the convention is rotate_half's.
    pair_norm = q.double()[..., :8].hypot(q.double()[..., 8:])
    out_norm = q_out.double()[..., :8].hypot(q_out.double()[..., 8:])
    torch.testing.assert_close(out_norm, pair_norm, **TOL[dtype])
    assert not math.isclose(float((q_out.double() - q.double()).abs().max()), 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_transformers_bit_for_bit(dtype: torch.dtype) -> None:
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3

    norm = modeling_qwen3.Qwen3RMSNorm(64, eps=1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = _rand(2, 7, 64, dtype=dtype)
    assert torch.equal(reference.rms_norm(x, norm.weight, norm.variance_epsilon), norm(x))

    _, cos, sin = _rope_tables(2, 7, 16)
    q, k = _rand(2, 4, 7, 16, dtype=dtype), _rand(2, 2, 7, 16, dtype=dtype, seed=1)
    cos, sin = cos.to(dtype), sin.to(dtype)
    for module in (modeling_qwen2, modeling_qwen3):
        expected = module.apply_rotary_pos_emb(q, k, cos, sin)
        actual = reference.rope(q, k, cos, sin)
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    from transformers.activations import ACT2FN

    gate, up = _rand(2, 7, 32, dtype=dtype), _rand(2, 7, 32, dtype=dtype, seed=1)
    assert torch.equal(reference.swiglu(gate, up), ACT2FN["silu"](gate) * up)
