"""CUDA backend: liger-kernel's Triton ops, imported lazily so the kit never requires liger (or triton).

Uses ``liger_kernel.transformers.functional`` (``liger_rms_norm``, ``liger_swiglu``, ``liger_rope``, stable since
liger-kernel 0.5), not liger's own monkey patching: the kit's patcher decides what is replaced, once, for every device.
Where liger's semantics differ from transformers' (mixed input/weight dtypes: liger returns the input dtype, HF
promotes; liger's RoPE only knows the (B, N, S, D) layout) the reference op is used instead.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch
from torch import Tensor

from npu_kernels.ops import reference
from npu_kernels.ops.base import KernelOps, TensorPair

FUNCTIONAL_MODULE = "liger_kernel.transformers.functional"


def import_liger() -> tuple[ModuleType | None, str]:
    """(liger's functional module or None, status). Any Exception counts as absent: liger imports triton eagerly."""
    try:
        functional = importlib.import_module(FUNCTIONAL_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "liger_kernel" or exc.name.startswith("liger_kernel.")):
            return None, "not installed"
        return None, f"import failed: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001  (a broken triton/CUDA stack must degrade to the reference)
        return None, f"import failed: {type(exc).__name__}: {exc}"
    try:
        version = importlib.import_module("liger_kernel").__dict__.get("__version__")
        if version is None:
            from importlib.metadata import version as dist_version

            version = dist_version("liger-kernel")
    except Exception:  # noqa: BLE001  (a stub or a source checkout has no metadata)
        version = "unknown version"
    return functional, f"ok {version}"


def make_ops(functional: ModuleType, detail: str = "") -> KernelOps:
    """Bind the ops to liger's functional module (the real one, or the tests' stub)."""

    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if x.dtype != weight.dtype:
            return reference.rms_norm(x, weight, eps)
        # casting_mode="llama" is HF's Qwen/Llama rounding; in_place=False because the in-place backward overwrites
        # dY, which is only safe when no other node reads that gradient (liger itself turns it off for several models).
        return functional.liger_rms_norm(x, weight, eps, offset=0.0, casting_mode="llama", in_place=False)

    def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return functional.liger_swiglu(gate, up)

    def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> TensorPair:
        if unsqueeze_dim != 1 or q.dim() != 4 or cos.dim() != 3 or not (q.dtype == k.dtype == cos.dtype == sin.dtype):
            return reference.rope(q, k, cos, sin, unsqueeze_dim)
        return functional.liger_rope(q, k, cos, sin, None, 1)

    return KernelOps(name="liger", rms_norm=rms_norm, swiglu=swiglu, rope=rope, detail=detail or "liger-kernel")
