"""The contract every kernel backend fulfils: three functions with transformers' Qwen2/Qwen3 semantics.

Why a bundle of plain callables instead of a class hierarchy: the patcher closes over one bundle when it builds the
replacement forwards, so the per-call cost is one attribute lookup, and tests can build a bundle from stubs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

#: Names of the fusable ops, in the order a decoder layer meets them; ``KIT_FUSED_OPS`` selects among these.
OP_NAMES: tuple[str, ...] = ("rms_norm", "rope", "swiglu")

RmsNormFn = Callable[[Tensor, Tensor, float], Tensor]
SwigluFn = Callable[[Tensor, Tensor], Tensor]
#: What a rope returns: (q, k) rotated.
TensorPair = tuple[Tensor, Tensor]


class RopeFn(Protocol):
    """The rope signature every backend implements, stated once: transformers' ``apply_rotary_pos_emb``.

    ``unsqueeze_dim`` 1 means q/k are (B, N, S, D), 2 means (B, S, N, D); ``cos``/``sin`` are (B, S, D).
    """

    def __call__(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> TensorPair: ...


@dataclass(frozen=True)
class KernelOps:
    """One backend's implementations of the fusable ops.

    * ``rms_norm(x, weight, eps)`` -> transformers' ``Qwen*RMSNorm.forward`` (statistics in fp32).
    * ``swiglu(gate, up)`` -> ``silu(gate) * up``, the activation part of ``Qwen*MLP.forward``.
    * ``rope(q, k, cos, sin, unsqueeze_dim=1)`` -> transformers' ``apply_rotary_pos_emb`` (rotate_half convention);
      ``cos``/``sin`` are (batch, seq, head_dim) as the rotary embedding module returns them (:class:`RopeFn`).
    """

    name: str
    rms_norm: RmsNormFn
    swiglu: SwigluFn
    rope: RopeFn
    #: Human-readable provenance for log lines, e.g. the torch_npu or liger-kernel version.
    detail: str = ""
    #: verl's own npu_patch replaces the same forwards in every process that sees an NPU; a backend that does must
    #: have it imported first, or verl undoes the kit's patch a moment later (npu_kernels.patcher).
    after_verl_npu_patch: bool = False

    def describe(self) -> str:
        return f"{self.name} ({self.detail})" if self.detail else self.name
