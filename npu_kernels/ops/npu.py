"""Ascend backend: the documented torch_npu fused operators, behind the reference ops' signatures.

A thin shim in the spirit of transformers' ``integrations/npu_flash_attention.py``: each function translates HF's
calling convention into the kernel's documented one and falls back to the reference where the kernel's documented
constraints are not met, so the patched model never hits an unsupported-shape error at step 1000.

Documented APIs (torch_npu / op-plugin ``docs/context``, hiascend PyTorch API list):

* ``npu_rms_norm(self, gamma, epsilon=1e-6) -> (y, rstd)``: ``gamma`` must have the dtype of ``self``.
* ``npu_swiglu(input, dim=-1)``: ``silu(A) * B`` for the halves A|B of ``input`` along ``dim``; contiguous input only.
* ``npu_rotary_mul(input, r1, r2, rotary_mode='half')``: ``r1 * x + r2 * rotate(x)``, 4-D only, layouts BNSD / BSND /
  SBND with r1/r2 broadcast as 11SD|B1SD|BNSD, 1S1D|BS1D|BSND, S11D|SB1D|SBND; D even and < 896, B and N < 1000,
  B*N <= 1024 when cos/sin need gradients. ``'half'`` is rotate_half (HF Llama/Qwen); ``'interleave'`` is GPT-J.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor

from npu_kernels.ops import reference
from npu_kernels.ops.base import KernelOps, TensorPair

#: HF Llama/Qwen rotate the two halves of head_dim; 'interleave' (GPT-J pairs) would silently compute another RoPE.
ROTARY_MODE = "half"

#: Where cos/sin (B, S, D) get their singleton head axis, per layout of the tensor handed to npu_rotary_mul:
#: BNSD takes B1SD, BSND takes BS1D.
COS_UNSQUEEZE_DIM: dict[str, int] = {"BNSD": 1, "BSND": 2}

#: HF's ``unsqueeze_dim`` names the logical layout of q/k: 1 -> (B, N, S, D), 2 -> (B, S, N, D).
_LOGICAL_LAYOUT: dict[int, str] = {1: "BNSD", 2: "BSND"}
_SWAPPED: dict[str, str] = {"BNSD": "BSND", "BSND": "BNSD"}

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 896
_MAX_BATCH_OR_HEADS = 1000
_MAX_BN_WITH_COS_GRAD = 1024


def _batch_heads(shape: torch.Size, layout: str) -> tuple[int, int]:
    return (shape[0], shape[1]) if layout == "BNSD" else (shape[0], shape[2])


def rotary_supported(x: torch.Tensor, cos: torch.Tensor, layout: str) -> bool:
    """Whether ``x`` in ``layout`` meets npu_rotary_mul's documented A2/A3 constraints."""
    if x.dim() != 4 or cos.dim() != 3 or x.dtype not in _KERNEL_DTYPES:
        return False
    head_dim = x.shape[-1]
    if head_dim % 2 or head_dim >= _MAX_HEAD_DIM:
        return False
    batch, heads = _batch_heads(x.shape, layout)
    if batch >= _MAX_BATCH_OR_HEADS or heads >= _MAX_BATCH_OR_HEADS:
        return False
    return not (cos.requires_grad and batch * heads > _MAX_BN_WITH_COS_GRAD)


def choose_layout(x: torch.Tensor, logical: str) -> tuple[str, torch.Tensor]:
    """Pick the layout whose view of ``x`` is contiguous, so the kernel reads memory as it lies.

    HF builds q/k as ``proj(h).view(B, S, N, D).transpose(1, 2)``: logically BNSD, physically BSND. Handing the kernel
    the BNSD view makes it (or us) copy q/k first; handing it the untransposed BSND view (with cos/sin as BS1D) costs
    nothing, and the result transposed back is exactly the BNSD view HF expects (and what attention transposes again).
    """
    if x.is_contiguous():
        return logical, x
    swapped = x.transpose(1, 2)
    if swapped.is_contiguous():
        return _SWAPPED[logical], swapped
    return logical, x.contiguous()


def make_ops(torch_npu: ModuleType) -> KernelOps:
    """Bind the ops to an imported torch_npu (the real one, or the tests' stub with the same signatures)."""

    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # npu_rms_norm requires gamma.dtype == x.dtype; verl 0.6.1's npu_patch passes x as is and fails (or, under
        # autocast, mixes dtypes) when the residual stream and the weight differ. Upstream verl later cast x to the
        # weight dtype the same way.
        if x.dtype != weight.dtype:
            x = x.to(weight.dtype)
        return torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]

    def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        # One concat (contiguous, as the kernel requires) buys a single fused activation + its fused backward.
        return torch_npu.npu_swiglu(torch.cat((gate, up), dim=-1), dim=-1)

    def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, logical: str) -> torch.Tensor:
        layout, view = choose_layout(x, logical)
        dim = COS_UNSQUEEZE_DIM[layout]
        r1 = cos.to(view.dtype).unsqueeze(dim).contiguous()
        r2 = sin.to(view.dtype).unsqueeze(dim).contiguous()
        out = torch_npu.npu_rotary_mul(view, r1, r2, rotary_mode=ROTARY_MODE)
        return out if layout == logical else out.transpose(1, 2)

    def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> TensorPair:
        logical = _LOGICAL_LAYOUT.get(unsqueeze_dim)
        if logical is None or not (rotary_supported(q, cos, logical) and rotary_supported(k, cos, logical)):
            return reference.rope(q, k, cos, sin, unsqueeze_dim)
        return rotary(q, cos, sin, logical), rotary(k, cos, sin, logical)

    version = getattr(torch_npu, "__version__", "unknown version")
    return KernelOps(
        name="npu",
        rms_norm=rms_norm,
        swiglu=swiglu,
        rope=rope,
        detail=f"torch_npu {version}",
        after_verl_npu_patch=True,  # verl 0.6.1's npu_patch replaces RMSNorm/SwiGLU forwards on NPU too
    )
