"""Server settings: one dataclass, filled by the CLI, read by every component."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

#: Modules the warm workers import before serving: what model-written math code reaches for. Missing ones are
#: skipped, so the list can name optional packages.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "math",
    "cmath",
    "itertools",
    "functools",
    "fractions",
    "decimal",
    "collections",
    "statistics",
    "random",
    "re",
    "json",
    "heapq",
    "bisect",
    "operator",
    "string",
    "datetime",
    "typing",
    "numpy",
    "sympy",
    "mpmath",
    "scipy",
    "scipy.special",
    "scipy.optimize",
    "scipy.integrate",
    "scipy.linalg",
)

#: Environment of the workers and of every request child. Single-threaded BLAS/OpenMP: threads would multiply
#: the address space a memory limit has to cover (SandboxFusion's RLIMIT_AS breaks ``import numpy`` that way),
#: and a sandbox gets one core's worth of work anyway.
CHILD_ENV_BASE: dict[str, str] = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "BLIS_NUM_THREADS": "1",
    "GOTO_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}


def child_env(python: str) -> dict[str, str]:
    env = {k: v for k, v in CHILD_ENV_BASE.items() if v}
    env["PATH"] = os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"])
    return env


@dataclass
class SandboxSettings:
    """Everything the server needs to know; defaults suit a training container."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    # kit: 1,024 = the recipes' in-flight tool calls on one node (agent.num_workers 16 x the tool's max_concurrency
    # 64, recipes/config/retool_qwen3_4b_dapo.yaml and recipes/retool/code_interpreter.yaml): they queue, not 503.
    # Measured: 1,024 simultaneous clients against 2 workers on a 2-core host, none refused (issue 14 item 2).
    max_queue: int = 1024
    output_limit_kb: int = 64
    isolation: str = "auto"  # auto | bwrap | none
    cold: bool = False
    recycle_after: int = 1000
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    default_memory_mb: int = 4096  # used when a request sends memory_limit_MB <= 0; 0 = unlimited
    max_run_timeout: float = 300.0
    nproc: int = 256
    fsize_mb: int = 64
    nofile: int = 1024
    # Slot i runs as uid/gid sandbox_uid - i: 65534 is nobody, 65000-65533 are reserved by Debian policy and never
    # given to real accounts, so slots do not share RLIMIT_NPROC budgets or signal each other's processes.
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    max_fetch_mb: int = 16
    max_body_mb: int = 64
    overload_status: int = 503
    python: str = sys.executable
    bwrap_path: str | None = field(default_factory=lambda: shutil.which("bwrap"))
    allow_paths: tuple[str, ...] = ()  # extra host paths request code may read (added to the filesystem allowlist)

    @property
    def output_limit_bytes(self) -> int:
        return self.output_limit_kb * 1024
