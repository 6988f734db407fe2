"""A stand-in for torch_npu in CPU tests: the three fused ops' documented signatures, with reference math, asserting
the documented argument conventions.

The point is not the arithmetic (it is the same formula the reference uses) but the contract: a caller that hands
``npu_rotary_mul`` a cos/sin shaped for the wrong layout, a non-4-D tensor, mixed dtypes, or ``npu_rms_norm`` a gamma
of another dtype, or ``npu_swiglu`` a non-contiguous tensor, fails here exactly where the real kernel would reject it
(or, for ``rotary_mode``, computes what the real kernel would compute, so the parity tests catch the wrong mode).

Sources: hiascend PyTorch API list (npu_rms_norm, npu_swiglu, npu_rotary_mul pages, 6.0/7.0) and Ascend/op-plugin
``docs/context/torch_npu-npu_rotary_mul.md``. Every call is appended to :data:`CALLS` for tests to inspect.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__version__ = "0.0.0+kit.stub"

#: One dict per op call: op name, shapes, dtype, layout(s), contiguity, mode.
CALLS: list[dict[str, Any]] = []

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class _NpuNamespace:
    """What ``torch.npu`` offers the code under test (device queries only; tensors stay on the CPU)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_name(index: int = 0) -> str:
        return "Ascend910B-stub"

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None


npu = _NpuNamespace()


def register_device() -> None:
    """Expose ``torch.npu`` as importing the real torch_npu does (subprocess tests only: it changes global torch)."""
    torch.npu = npu  # type: ignore[attr-defined]


def npu_fusion_attention(*args: Any, **kwargs: Any) -> Any:
    """Imported by transformers' integrations/npu_flash_attention.py once torch.npu exists; the tests use eager."""
    raise NotImplementedError("stub torch_npu: npu_fusion_attention is not simulated; use attn_implementation='eager'")


def _check_dtype(name: str, tensor: torch.Tensor) -> None:
    assert tensor.dtype in _DTYPES, f"{name}: dtype {tensor.dtype} not in float16/bfloat16/float32"


def npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x * rsqrt(mean(x^2) + eps) * gamma, rstd)``; gamma must match x's dtype and trailing shape."""
    _check_dtype("npu_rms_norm self", self)
    assert gamma.dtype == self.dtype, f"npu_rms_norm: gamma dtype {gamma.dtype} must equal self dtype {self.dtype}"
    assert 1 <= self.dim() <= 8, f"npu_rms_norm: self must be 1-8 D, got {self.dim()}-D"
    g = gamma.dim()
    assert tuple(self.shape[-g:]) == tuple(gamma.shape), (
        f"npu_rms_norm: gamma shape {tuple(gamma.shape)} must equal the trailing dims of self {tuple(self.shape)}"
    )
    CALLS.append({"op": "npu_rms_norm", "shape": tuple(self.shape), "dtype": self.dtype, "epsilon": epsilon})
    dims = tuple(range(-g, 0))
    x32 = self.float()
    rstd = torch.rsqrt(x32.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (x32 * rstd * gamma.float()).to(self.dtype), rstd


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:  # noqa: A002  (the documented name)
    """``silu(A) * B`` for the halves A|B of ``input`` along ``dim``; contiguous, non-empty input only."""
    _check_dtype("npu_swiglu input", input)
    assert -input.dim() <= dim < input.dim(), f"npu_swiglu: dim {dim} out of range for {input.dim()}-D input"
    assert input.is_contiguous(), "npu_swiglu: non-contiguous input is not supported"
    assert input.numel() > 0, "npu_swiglu: empty input is not supported"
    assert input.shape[dim] % 2 == 0, f"npu_swiglu: size {input.shape[dim]} along dim {dim} must be even"
    CALLS.append({"op": "npu_swiglu", "shape": tuple(input.shape), "dtype": input.dtype, "dim": dim})
    a, b = input.float().chunk(2, dim=dim)
    return (F.silu(a) * b).to(input.dtype)


def rotary_layouts(x_shape: tuple[int, ...], r_shape: tuple[int, ...]) -> list[str]:
    """Layouts under which ``r_shape`` is a documented broadcast of ``x_shape`` (BS1D and SB1D look alike)."""
    a, b, c, d = x_shape
    patterns = {
        "BNSD": [(1, 1, c, d), (a, 1, c, d), (a, b, c, d)],  # 11SD, B1SD, BNSD
        "BSND": [(1, b, 1, d), (a, b, 1, d), (a, b, c, d)],  # 1S1D, BS1D, BSND
        "SBND": [(a, 1, 1, d), (a, b, 1, d), (a, b, c, d)],  # S11D, SB1D, SBND
    }
    return [layout for layout, shapes in patterns.items() if tuple(r_shape) in shapes]


def _batch_heads(shape: tuple[int, ...], layout: str) -> tuple[int, int]:
    return {"BNSD": (shape[0], shape[1]), "BSND": (shape[0], shape[2]), "SBND": (shape[1], shape[2])}[layout]


def _rotate(x: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    if rotary_mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).reshape(x.shape)


def npu_rotary_mul(
    input: torch.Tensor,  # noqa: A002  (the documented name)
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
) -> torch.Tensor:
    """``r1 * x + r2 * rotate(x)`` on 4-D BNSD / BSND / SBND tensors with documented r1/r2 broadcasts."""
    assert rotary_mode in ("half", "interleave"), f"npu_rotary_mul: rotary_mode {rotary_mode!r} is not half|interleave"
    for name, tensor in (("input", input), ("r1", r1), ("r2", r2)):
        assert tensor.dim() == 4, f"npu_rotary_mul: {name} must be 4-D, got shape {tuple(tensor.shape)}"
        _check_dtype(f"npu_rotary_mul {name}", tensor)
    assert r1.dtype == r2.dtype == input.dtype, (
        f"npu_rotary_mul: dtypes differ (input {input.dtype}, r1 {r1.dtype}, r2 {r2.dtype})"
    )
    assert r1.shape == r2.shape, f"npu_rotary_mul: r1 {tuple(r1.shape)} and r2 {tuple(r2.shape)} differ"
    x_shape, r_shape = tuple(input.shape), tuple(r1.shape)
    head_dim = x_shape[-1]
    assert head_dim % 2 == 0 and head_dim < 896, f"npu_rotary_mul: D={head_dim} must be even and < 896"
    layouts = rotary_layouts(x_shape, r_shape)
    assert layouts, (
        f"npu_rotary_mul: r1/r2 shape {r_shape} is not a documented broadcast of input {x_shape} "
        "(BNSD takes 11SD/B1SD/BNSD, BSND takes 1S1D/BS1D/BSND, SBND takes S11D/SB1D/SBND)"
    )
    fits = [
        layout
        for layout in layouts
        if max(_batch_heads(x_shape, layout)) < 1000
        and not (r1.requires_grad and _batch_heads(x_shape, layout)[0] * _batch_heads(x_shape, layout)[1] > 1024)
    ]
    assert fits, f"npu_rotary_mul: B/N limits exceeded for {x_shape} in layouts {layouts}"
    with torch.no_grad():
        bound = max(r1.abs().max().item(), r2.abs().max().item())
    assert bound <= 1.0 + 1e-3, f"npu_rotary_mul: r1/r2 must lie in [-1, 1], got max |value| {bound}"
    CALLS.append(
        {
            "op": "npu_rotary_mul",
            "shape": x_shape,
            "r_shape": r_shape,
            "layouts": layouts,
            "contiguous": input.is_contiguous(),
            "rotary_mode": rotary_mode,
            "dtype": input.dtype,
        }
    )
    x32 = input.float()
    return (r1.float() * x32 + r2.float() * _rotate(x32, rotary_mode)).to(input.dtype)
