"""Fused Qwen2/Qwen3 ops (RMSNorm, RoPE, SwiGLU) with one backend per device, chosen through the device abstraction.

* ``npu``: torch_npu's ``npu_rms_norm`` / ``npu_rotary_mul`` / ``npu_swiglu`` (:mod:`npu_kernels.ops.npu`);
* ``liger``: liger-kernel's Triton ops on CUDA when liger is installed (:mod:`npu_kernels.ops.liger`);
* ``reference``: pure torch, identical to transformers (:mod:`npu_kernels.ops.reference`); the ground truth, the CPU
  backend, and the fallback wherever a fused library is missing.

Importing this package imports torch but neither torch_npu nor liger: those load only when their backend is built.
"""

from __future__ import annotations

from npu_kernels import device
from npu_kernels.ops import liger, npu, reference
from npu_kernels.ops.base import OP_NAMES, KernelOps

__all__ = ["BACKENDS", "OP_NAMES", "BackendUnavailable", "KernelOps", "load", "preferred", "select"]

BACKENDS: tuple[str, ...] = ("npu", "liger", "reference")

#: Best first; the last entry always loads.
_PREFERENCE: dict[str, tuple[str, ...]] = {
    "npu": ("npu", "reference"),
    "cuda": ("liger", "reference"),
    "cpu": ("reference",),
}


class BackendUnavailable(RuntimeError):
    """The backend's library (torch_npu, liger-kernel) cannot be imported here."""


def load(name: str) -> KernelOps:
    """Build the named backend, or raise :class:`BackendUnavailable` (ValueError for an unknown name)."""
    if name == "reference":
        return reference.make_ops()
    if name == "npu":
        torch_npu, status = device.import_torch_npu()
        if torch_npu is None:
            raise BackendUnavailable(f"npu backend needs torch_npu: {status}")
        return npu.make_ops(torch_npu)
    if name == "liger":
        functional, status = liger.import_liger()
        if functional is None:
            raise BackendUnavailable(f"liger backend needs liger-kernel: {status}")
        return liger.make_ops(functional, detail=f"liger-kernel {status.removeprefix('ok ')}")
    raise ValueError(f"unknown kernel backend {name!r}; known: {', '.join(BACKENDS)}")


def preferred(platform_name: str) -> tuple[str, ...]:
    """Backends worth trying on a platform, best first."""
    return _PREFERENCE[platform_name]


def select(platform: device.Platform | None = None) -> tuple[KernelOps, list[str]]:
    """The best loadable backend for ``platform`` (default: the detected one), and why better ones were skipped."""
    platform = platform or device.current_platform()
    notes: list[str] = []
    for name in preferred(platform.name):
        try:
            return load(name), notes
        except BackendUnavailable as exc:
            notes.append(str(exc))
    raise AssertionError("unreachable: the reference backend always loads")
