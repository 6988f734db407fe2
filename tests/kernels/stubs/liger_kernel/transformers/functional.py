"""liger-kernel's functional API as the kit calls it, with reference math and argument checks.

Signatures follow liger_kernel/transformers/functional.py (0.5 - 0.8): ``liger_rms_norm(X, W, eps, offset=0.0,
casting_mode="llama", in_place=True)``, ``liger_swiglu(a, b)``, ``liger_rope(q, k, cos, sin, position_ids=None,
unsqueeze_dim=1)`` (q/k (B, N, S, D); cos/sin (1 or B, S, D)). Calls are appended to :data:`CALLS`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

CALLS: list[dict[str, Any]] = []


def liger_rms_norm(X, W, eps, offset: float = 0.0, casting_mode: str = "llama", in_place: bool = True):  # noqa: N803
    assert casting_mode in ("llama", "gemma", "none"), f"liger_rms_norm: unknown casting_mode {casting_mode!r}"
    CALLS.append({"op": "liger_rms_norm", "casting_mode": casting_mode, "offset": offset, "in_place": in_place})
    x32 = X.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(X.dtype)
    return normed * (offset + W)


def liger_swiglu(a, b):
    CALLS.append({"op": "liger_swiglu"})
    return F.silu(a) * b


def liger_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    assert q.dim() == 4 and k.dim() == 4, "liger_rope: q/k must be (B, N, S, D)"
    assert cos.dim() == 3 and cos.shape[0] in (1, q.shape[0]) and cos.shape[1] == q.shape[2], (
        f"liger_rope: cos {tuple(cos.shape)} must be (1 or B, S, D) for q {tuple(q.shape)}"
    )
    CALLS.append({"op": "liger_rope", "unsqueeze_dim": unsqueeze_dim})
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
