"""What this CPU is: its model, cores and the instruction-set flags that decide which dtype computes fast on it.

Why in the platform layer: the cpu platform's choice of compute dtype rests on these flags (without AVX512-BF16 or
AMX, PyTorch's bf16 GEMM takes a slow path), and every number the kit measures on a CPU is quoted with them
(``summary.json``'s ``machine``, ``scripts/bench_cpu_step.py``, ``scripts/bench_learn_speed.py``), so a user can
compare a run with theirs. Standard library only: read from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

#: The flags that decide whether bf16 matmuls are fast on a CPU (and whether fp32 has AVX-512).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_info(cpuinfo: str | None = None) -> dict[str, object]:
    """Model name, core count and which of :data:`CPU_FLAGS` this CPU has (``/proc/cpuinfo``)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = platform.processor() or platform.machine(), set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and value.strip():
            model = value.strip()
        elif key in ("flags", "features"):
            flags |= set(value.split())
    return {
        "model": model,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
        "transparent_hugepage": _thp_mode(),
    }


def _thp_mode(path: str = "/sys/kernel/mm/transparent_hugepage/enabled") -> str:
    """The kernel's THP mode (``always``, ``madvise`` or ``never``): THP_MEM_ALLOC_ENABLE needs one of the first two."""
    try:
        text = Path(path).read_text()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip()


def fast_bf16(info: dict[str, object]) -> bool:
    """Whether the CPU has the instructions PyTorch's bf16 kernels need to beat its slow reference path. Not
    whether bf16 beats fp32 at the kit's shapes: that is measured (scripts/bench_cpu_step.py), and on the 2-core
    Xeon with avx512_bf16 and no AMX that CI runs on it does not (docs/main-job.md)."""
    flags = info["flags"]
    assert isinstance(flags, dict)
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))
