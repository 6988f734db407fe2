"""Recommended process environment per phase (sft, rl) and hardware (a2, a3, cuda, cpu), as data.

Why data and not a shell script: the same table feeds the launch scripts (``python -m npu_kernels.device env``),
the tests and the later "doctor", and each entry carries its reason so a reviewer can judge it without digging
through commit history. Values come from the research notes (shared/notes/ascend.md §1.3-1.4, §2.1, §2.4), i.e.
the cann-recipes-train ReTool sample, verl's Ascend docs and vllm-ascend issues.

An entry whose value is ``None`` must be UNSET: a leftover value from a user's shell or an image is actively harmful
(e.g. ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`` breaks vLLM sleep mode), so "not mentioning it" is not
enough.

Deliberately absent: ``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES``. The sample hard-codes ``0..15``, but
the device mask is a per-job decision (and Ray rewrites it per actor); exporting it here would silently widen a mask
the user narrowed on purpose.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PHASES: tuple[str, ...] = ("sft", "rl")
HARDWARE: tuple[str, ...] = ("a2", "a3", "cuda", "cpu")
ASCEND_HARDWARE: frozenset[str] = frozenset({"a2", "a3"})

_BOTH = ("sft", "rl")
_SFT = ("sft",)
_RL = ("rl",)


@dataclass(frozen=True)
class EnvVar:
    """One recommendation. ``value=None`` means the variable must be unset."""

    name: str
    value: str | None
    reason: str

    def shell_line(self) -> str:
        """One bash line; the reason goes into a trailing comment so ``source`` output stays self-documenting."""
        if self.value is None:
            return f"unset {self.name}  # {self.reason}"
        return f"export {self.name}={shlex.quote(self.value)}  # {self.reason}"


# (phases, entry). A2 and A3 share one table: nothing in the sample or verl's docs differs between them except the
# device count, which the kit counts itself (npu_kernels.device) instead of exporting a mask.
#: verl imports these modules in every process it starts (driver, TaskRunner, Ray workers), before any model is
#: built: the one hook that reaches Ray workers without patching verl. npu_kernels.auto applies the fused kernels.
_FUSED_KERNELS = EnvVar(
    "VERL_USE_EXTERNAL_MODULES",
    "npu_kernels.auto",
    "fused RMSNorm/RoPE/SwiGLU for Qwen2/Qwen3 in every verl process (KIT_FUSED_KERNELS=off disables)",
)

_ASCEND: tuple[tuple[tuple[str, ...], EnvVar], ...] = (
    (_BOTH, _FUSED_KERNELS),
    (_BOTH, EnvVar("HYDRA_FULL_ERROR", "1", "verl entry points are Hydra apps; without it a crash is one line")),
    (
        _BOTH,
        EnvVar("ASCEND_GLOBAL_LOG_LEVEL", "3", "CANN logs at ERROR only; INFO/WARN floods disk and slows the host"),
    ),
    (_BOTH, EnvVar("ASCEND_SLOG_PRINT_TO_STDOUT", "0", "keep CANN device logs out of the trainer's stdout")),
    (_BOTH, EnvVar("ASCEND_GLOBAL_EVENT_ENABLE", "0", "CANN event logging off, as in the sample scripts")),
    (_BOTH, EnvVar("ASCEND_LAUNCH_BLOCKING", "0", "asynchronous op launch; 1 is a debug aid that serialises every op")),
    (_SFT, EnvVar("HCCL_CONNECT_TIMEOUT", "360", "sample SFT value: torchrun ranks start together, 6 min is ample")),
    (_SFT, EnvVar("HCCL_EXEC_TIMEOUT", "360", "sample SFT value: a collective stuck 6 min in SFT is a real hang")),
    (
        _RL,
        EnvVar(
            "HCCL_CONNECT_TIMEOUT",
            "1800",
            "RL ranks reach group setup at different times (model + vLLM loading); MindSpeed-RL value",
        ),
    ),
    (
        _RL,
        EnvVar(
            "HCCL_EXEC_TIMEOUT",
            "3600",
            "RL ranks wait in collectives across long multi-turn rollouts and weight sync (MindSpeed-RL value)",
        ),
    ),
    (_BOTH, EnvVar("HCCL_IF_BASE_PORT", "64033", "sample value: keeps HCCL host ports clear of Ray/vLLM/torchrun")),
    (
        _RL,
        EnvVar(
            "HCCL_HOST_SOCKET_PORT_RANGE",
            "auto",
            "trainer and vLLM share an NPU: each process needs its own HCCL host ports (verl sets it since PR #4280)",
        ),
    ),
    (
        _RL,
        EnvVar(
            "HCCL_NPU_SOCKET_PORT_RANGE",
            "auto",
            "trainer and vLLM share an NPU: each process needs its own HCCL device ports (verl sets it since PR #4280)",
        ),
    ),
    (
        _RL,
        EnvVar(
            "HCCL_OP_EXPANSION_MODE",
            "AIV",
            "collectives on vector cores; sample RL script; fixes all-gather timeouts with many process groups (32B)",
        ),
    ),
    (
        _SFT,
        EnvVar("TASK_QUEUE_ENABLE", "2", "level-2 op-dispatch pipeline: fastest for eager training (may add memory)"),
    ),
    (
        _RL,
        EnvVar(
            "TASK_QUEUE_ENABLE",
            "2",
            "level-2 dispatch pipeline; allowed because the kit's vLLM rollout runs eager (2 breaks ACL graph mode)",
        ),
    ),
    (
        _RL,
        EnvVar(
            "VLLM_ENABLE_GRAPH_MODE",
            None,
            "rollout runs eager here; graph mode would conflict with TASK_QUEUE_ENABLE=2",
        ),
    ),
    (_BOTH, EnvVar("CPU_AFFINITY_CONF", "1", "bind host threads to the NPU's NUMA cores (verl Ascend examples)")),
    (_BOTH, EnvVar("TORCHDYNAMO_DISABLE", "1", "torch.compile is disabled in every Ascend recipe; make it global")),
    (
        _SFT,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            "expandable_segments:True",
            "less fragmentation with variable-length packed batches; safe in SFT because no vLLM runs",
        ),
    ),
    (
        _RL,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            None,
            "expandable_segments conflicts with vLLM sleep mode (ms-swift #6636; vllm-ascend rl_config strips it)",
        ),
    ),
    (
        _RL,
        EnvVar(
            "VLLM_ASCEND_ENABLE_NZ",
            "0",
            "FRACTAL_NZ weight layout corrupts RL weight sync: garbled rollouts (vllm-ascend #5747)",
        ),
    ),
    (_RL, EnvVar("VLLM_USE_V1", "1", "verl's async agent-loop server needs the vLLM V1 engine (sample RL script)")),
    (
        _RL,
        EnvVar(
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
            "1",
            "keep all NPUs visible in Ray actors; verl then pins LOCAL_RANK itself (verl Ascend FAQ Q1)",
        ),
    ),
    (_SFT, EnvVar("TOKENIZERS_PARALLELISM", "false", "SFT forks DataLoader workers; HF tokenizers' pool then warns")),
)

_CUDA: tuple[tuple[tuple[str, ...], EnvVar], ...] = (
    (_BOTH, _FUSED_KERNELS),
    (_BOTH, EnvVar("HYDRA_FULL_ERROR", "1", "verl entry points are Hydra apps; without it a crash is one line")),
    (
        _SFT,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "less fragmentation with variable-length packed batches; safe in SFT because no vLLM runs",
        ),
    ),
    (
        _RL,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            None,
            "vLLM's sleep-mode CuMemAllocator asserts expandable_segments is off",
        ),
    ),
    (_RL, EnvVar("VLLM_USE_V1", "1", "verl's async agent-loop server needs the vLLM V1 engine")),
    (
        _RL,
        EnvVar(
            "NCCL_CUMEM_ENABLE",
            "0",
            "avoids hangs in actor-to-rollout weight sync (verl's PPO runtime env sets it only inside Ray workers)",
        ),
    ),
    (_SFT, EnvVar("TOKENIZERS_PARALLELISM", "false", "SFT forks DataLoader workers; HF tokenizers' pool then warns")),
)

_CPU: tuple[tuple[tuple[str, ...], EnvVar], ...] = (
    (_BOTH, EnvVar("HYDRA_FULL_ERROR", "1", "verl entry points are Hydra apps; without it a crash is one line")),
    (
        _BOTH,
        EnvVar(
            "TORCH_DEVICE_BACKEND_AUTOLOAD",
            "0",
            "never auto-import a torch_npu that happens to be installed: without CANN it breaks `import torch`",
        ),
    ),
    (
        _BOTH,
        EnvVar(
            "OMP_NUM_THREADS",
            "1",
            "every rank is its own process (torchrun/Ray); more threads per rank oversubscribe the cores",
        ),
    ),
    (_BOTH, EnvVar("TORCHDYNAMO_DISABLE", "1", "inductor costs ~35 s on the first step on CPU for no gain")),
    (_SFT, EnvVar("TOKENIZERS_PARALLELISM", "false", "SFT forks DataLoader workers; HF tokenizers' pool then warns")),
)

_TABLES = {"a2": _ASCEND, "a3": _ASCEND, "cuda": _CUDA, "cpu": _CPU}


def _check(phase: str, hw: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    if hw not in HARDWARE:
        raise ValueError(f"hw must be one of {', '.join(HARDWARE)}, got {hw!r}")


def preset(phase: str, hw: str) -> list[EnvVar]:
    """The recommended environment for ``phase`` on ``hw``, in a stable order (the order of the table)."""
    _check(phase, hw)
    return [entry for phases, entry in _TABLES[hw] if phase in phases]


def render_shell(entries: Iterable[EnvVar], header: str | None = None) -> str:
    """Bash text for ``source <(...)`` / ``eval``: values are shlex-quoted, reasons become comments."""
    lines = [f"# {header}"] if header else []
    lines.extend(entry.shell_line() for entry in entries)
    return "\n".join(lines) + "\n"


def known_bad_combinations(env: Mapping[str, str], phase: str = "rl", hw: str | None = None) -> list[str]:
    """Problems in ``env`` that are known to break a run; empty list when none.

    Each rule is a failure that is silent or far from its cause (garbled rollouts, an assert deep inside vLLM, an
    NPU that verl does not see), which is why a doctor should check them up front. ``hw=None`` applies the rules
    for every platform.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    ascend = hw is None or hw in ASCEND_HARDWARE
    cuda = hw is None or hw == "cuda"
    problems: list[str] = []
    if phase == "rl" and ascend:
        nz = env.get("VLLM_ASCEND_ENABLE_NZ")
        if nz != "0":
            shown = "unset (vllm-ascend defaults to on)" if nz is None else repr(nz)
            problems.append(f"VLLM_ASCEND_ENABLE_NZ is {shown}: RL needs 0, the NZ weight layout corrupts weight sync")
    alloc_vars = [("PYTORCH_NPU_ALLOC_CONF", ascend), ("PYTORCH_CUDA_ALLOC_CONF", cuda)]
    for var, relevant in alloc_vars:
        if phase == "rl" and relevant and "expandable_segments:true" in env.get(var, "").replace(" ", "").lower():
            problems.append(f"{var} enables expandable_segments, which breaks vLLM sleep mode in RL: unset it")
    if ascend and env.get("TASK_QUEUE_ENABLE") == "2" and env.get("VLLM_ENABLE_GRAPH_MODE") == "1":
        problems.append("TASK_QUEUE_ENABLE=2 is incompatible with ACL graph mode (VLLM_ENABLE_GRAPH_MODE=1): use 1")
    if hw in ASCEND_HARDWARE and env.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
        problems.append(
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 on an NPU host: verl 0.6.1 only sees torch.npu if torch_npu is "
            "auto-loaded, so it would silently fall back to CPU/CUDA"
        )
    return problems
