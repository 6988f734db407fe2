"""What both bench modes send and how they summarize it: the snippets with their expected stdout, the request
body, and the percentile.

Why a module of its own: ``sandbox/bench.py`` (steady load) dispatches to ``sandbox/bench_burst.py`` (burst mode),
and both need these; kept in either one, the two modules imported each other (issue 22 item 5).
"""

from __future__ import annotations

#: name → (code, expected stdout)
SNIPPETS: dict[str, tuple[str, str]] = {
    "print": ("print(1 + 1)", "2"),
    "numpy": ("import numpy as np; print(np.arange(10).sum())", "45"),
    "sympy": (
        "import sympy; print(sympy.factorint(2**64 - 1))",
        "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}",
    ),
    "sum": ("print(sum(range(10**5)))", "4999950000"),
    "loop": (
        "s = 0\nfor i in range(3 * 10**5):\n    s += i * i % 7\nprint(s)",
        str(sum(i * i % 7 for i in range(3 * 10**5))),
    ),
}


def run_code_payload(code: str) -> dict[str, object]:
    """The ``/run_code`` body of every bench request: fixed limits (30 s, 1 GiB), so runs of both modes compare."""
    return {"code": code, "language": "python", "run_timeout": 30, "memory_limit_MB": 1024}


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
