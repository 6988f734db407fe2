"""Pure-torch reference ops: the ground truth the fused backends are tested against, and the CPU backend.

Written to be bit-for-bit what transformers 4.5x computes in ``Qwen2RMSNorm``/``Qwen3RMSNorm``, ``Qwen*MLP`` and
``apply_rotary_pos_emb``, so patching a model with this backend changes nothing numerically (the tests check exact
equality). The fused backends also fall back here for shapes their kernels do not support.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from npu_kernels.ops.base import KernelOps, TensorPair


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm with statistics in fp32, cast back to the input dtype before the weight (HF/Llama casting)."""
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(input_dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``: the SwiGLU activation of Qwen's MLP (gate_proj and up_proj outputs)."""
    return F.silu(gate) * up


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: the Llama/Qwen ('half') RoPE convention."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> TensorPair:
    """Rotary embedding of q and k, as :class:`~npu_kernels.ops.base.RopeFn` states it (layouts included)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def make_ops() -> KernelOps:
    return KernelOps(name="reference", rms_norm=rms_norm, swiglu=swiglu, rope=rope, detail="pure torch")
