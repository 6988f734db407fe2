"""Kernels: fused Qwen2/Qwen3 ops (RMSNorm, RoPE, SwiGLU), one backend per device, in the platform's preference order.

* ``npu``: torch_npu's ``npu_rms_norm`` / ``npu_rotary_mul`` / ``npu_swiglu`` (:mod:`npu_kernels.ops.npu`);
* ``liger``: liger-kernel's Triton ops on CUDA when liger is installed (:mod:`npu_kernels.ops.liger`);
* ``reference``: pure torch, identical to transformers (:mod:`npu_kernels.ops.reference`); the ground truth, the CPU
  backend, and the fallback wherever a fused library is missing.

Importing this package imports torch but neither torch_npu nor liger: those load only when their backend is built.
"""

from __future__ import annotations

from collections.abc import Callable

import platforms as kit_platform
from npu_kernels.ops import liger, npu, reference
from npu_kernels.ops.base import OP_NAMES, KernelOps

__all__ = ["BACKENDS", "OP_NAMES", "BackendUnavailable", "KernelOps", "load", "select"]


class BackendUnavailable(RuntimeError):
    """The backend's library (torch_npu, liger-kernel) cannot be imported here."""


def _load_npu() -> KernelOps:
    torch_npu, status = kit_platform.import_torch_npu()
    if torch_npu is None:
        raise BackendUnavailable(f"npu backend needs torch_npu: {status}")
    return npu.make_ops(torch_npu)


def _load_liger() -> KernelOps:
    functional, status = liger.import_liger()
    if functional is None:
        raise BackendUnavailable(f"liger backend needs liger-kernel: {status}")
    return liger.make_ops(functional, detail=f"liger-kernel {status.removeprefix('ok ')}")


#: The registry: backend name -> loader (the names platforms list in ``kernel_backends``).
_LOADERS: dict[str, Callable[[], KernelOps]] = {"npu": _load_npu, "liger": _load_liger, "reference": reference.make_ops}
BACKENDS: tuple[str, ...] = tuple(_LOADERS)


def load(name: str) -> KernelOps:
    """Build the named backend, or raise :class:`BackendUnavailable` (ValueError for an unknown name)."""
    if name not in _LOADERS:
        raise ValueError(f"unknown kernel backend {name!r}; known: {', '.join(BACKENDS)}")
    return _LOADERS[name]()


def select(platform: kit_platform.Platform | None = None) -> tuple[KernelOps, list[str]]:
    """The best loadable backend for ``platform`` (default: the detected one; its ``kernel_backends``, best first),
    and why better ones were skipped."""
    platform = platform or kit_platform.current_platform()
    notes: list[str] = []
    for name in platform.kernel_backends:
        try:
            return load(name), notes
        except BackendUnavailable as exc:
            notes.append(str(exc))
    raise AssertionError("unreachable: the reference backend always loads")
