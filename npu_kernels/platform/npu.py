"""Ascend NPUs through torch_npu (Atlas A2 and A3 share this platform; their profiles differ in node shape).

The environment table holds the values of the Ascend ReTool sample, verl's and vllm-ascend's docs, each with its
reason. Deliberately absent: ``ASCEND_RT_VISIBLE_DEVICES``. The sample hard-codes ``0..15``, but the device mask is
a per-job decision (and Ray rewrites it per actor); exporting it here would silently widen a mask the user narrowed
on purpose.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from npu_kernels.platform.base import (
    HYDRA_FULL_ERROR,
    TOKENIZERS_PARALLELISM,
    PinnedPackage,
    Platform,
    count_visible,
)
from npu_kernels.platform.env import BOTH, RL, SFT, EnvTable, EnvVar, check_phase

_DAVINCI_RE = re.compile(r"^davinci\d+$")

#: verl imports these modules in every process it starts (driver, TaskRunner, Ray workers), before any model is
#: built: the one hook that reaches Ray workers without patching verl. npu_kernels.auto applies the fused kernels.
FUSED_KERNELS = EnvVar(
    "VERL_USE_EXTERNAL_MODULES",
    "npu_kernels.auto",
    "fused RMSNorm/RoPE/SwiGLU for Qwen2/Qwen3 in every verl process (KIT_FUSED_KERNELS=off disables)",
)


def count_davinci(dev_root: str | os.PathLike[str] = "/dev") -> int:
    """NPU device nodes under ``dev_root``.

    Why not Ray's ``glob('/dev/davinci?')``: one character matches davinci0..9 only, so an A3 node (davinci0..15)
    reports 10. The full-digit regex also skips the control nodes davinci_manager and friends.
    """
    try:
        names = os.listdir(dev_root)
    except OSError:
        return 0
    return sum(1 for name in names if _DAVINCI_RE.match(name))


def import_torch_npu() -> tuple[ModuleType | None, str]:
    """Import torch_npu explicitly; return (module or None, human-readable status).

    Explicit because ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (which the kit sets on CPU) stops torch from importing it.
    Catches every Exception: a torch_npu installed without CANN raises OSError/RuntimeError from its C extension, and a
    broken accelerator stack must degrade detection, not crash it.
    """
    try:
        import torch_npu  # noqa: F401  (registers torch.npu, like the real package)
    except ModuleNotFoundError as exc:
        if exc.name == "torch_npu":
            return None, "not installed"
        return None, f"import failed: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001  (see docstring)
        return None, f"import failed: {type(exc).__name__}: {exc}"
    return torch_npu, f"ok {getattr(torch_npu, '__version__', 'unknown version')}"


def npu_namespace(torch_npu: ModuleType) -> Any:
    """``torch.npu`` when torch_npu registered it (the real one does), else ``torch_npu.npu``."""
    import torch

    return getattr(torch, "npu", None) or torch_npu.npu


def soc_name() -> str:
    """The SoC name torch_npu reports for device 0 (``Ascend910B...`` on A2, ``Ascend910_93...`` on A3), or ''."""
    torch_npu, _ = import_torch_npu()
    if torch_npu is None:
        return ""
    try:
        return str(npu_namespace(torch_npu).get_device_name(0))
    except Exception:  # noqa: BLE001  (driver/CANN errors surface here at first use)
        return ""


#: The process environment per phase (npu_kernels.platform.env), in the order it is rendered.
ENV_TABLE: EnvTable = (
    (BOTH, FUSED_KERNELS),
    (BOTH, HYDRA_FULL_ERROR),
    (
        BOTH,
        EnvVar("ASCEND_GLOBAL_LOG_LEVEL", "3", "CANN logs at ERROR only; INFO/WARN floods disk and slows the host"),
    ),
    (BOTH, EnvVar("ASCEND_SLOG_PRINT_TO_STDOUT", "0", "keep CANN device logs out of the trainer's stdout")),
    (BOTH, EnvVar("ASCEND_GLOBAL_EVENT_ENABLE", "0", "CANN event logging off, as in the sample scripts")),
    (
        BOTH,
        EnvVar("ASCEND_LAUNCH_BLOCKING", "0", "asynchronous op launch; 1 is a debug aid that serialises every op"),
    ),
    (SFT, EnvVar("HCCL_CONNECT_TIMEOUT", "360", "sample SFT value: torchrun ranks start together, 6 min is ample")),
    (SFT, EnvVar("HCCL_EXEC_TIMEOUT", "360", "sample SFT value: a collective stuck 6 min in SFT is a real hang")),
    (
        RL,
        EnvVar(
            "HCCL_CONNECT_TIMEOUT",
            "1800",
            "RL ranks reach group setup at different times (model + vLLM loading); MindSpeed-RL value",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_EXEC_TIMEOUT",
            "3600",
            "RL ranks wait in collectives across long multi-turn rollouts and weight sync (MindSpeed-RL value)",
        ),
    ),
    (BOTH, EnvVar("HCCL_IF_BASE_PORT", "64033", "sample value: keeps HCCL host ports clear of Ray/vLLM/torchrun")),
    (
        RL,
        EnvVar(
            "HCCL_HOST_SOCKET_PORT_RANGE",
            "auto",
            "trainer and vLLM share an NPU: each process needs its own HCCL host ports (verl sets it since PR #4280)",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_NPU_SOCKET_PORT_RANGE",
            "auto",
            "trainer and vLLM share an NPU: each process needs its own HCCL device ports (verl sets it since PR #4280)",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_OP_EXPANSION_MODE",
            "AIV",
            "collectives on vector cores; sample RL script; fixes all-gather timeouts with many process groups (32B)",
        ),
    ),
    (
        SFT,
        EnvVar("TASK_QUEUE_ENABLE", "2", "level-2 op-dispatch pipeline: fastest for eager training (may add memory)"),
    ),
    (
        RL,
        EnvVar(
            "TASK_QUEUE_ENABLE",
            "2",
            "level-2 dispatch pipeline; allowed because the kit's vLLM rollout runs eager (2 breaks ACL graph mode)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_ENABLE_GRAPH_MODE",
            None,
            "rollout runs eager here; graph mode would conflict with TASK_QUEUE_ENABLE=2",
        ),
    ),
    (BOTH, EnvVar("CPU_AFFINITY_CONF", "1", "bind host threads to the NPU's NUMA cores (verl Ascend examples)")),
    (BOTH, EnvVar("TORCHDYNAMO_DISABLE", "1", "torch.compile is disabled in every Ascend recipe; make it global")),
    (
        SFT,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            "expandable_segments:True",
            "less fragmentation with variable-length packed batches; safe in SFT because no vLLM runs",
        ),
    ),
    (
        RL,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            None,
            "expandable_segments conflicts with vLLM sleep mode (ms-swift #6636; vllm-ascend rl_config strips it)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_ASCEND_ENABLE_NZ",
            "0",
            "FRACTAL_NZ weight layout corrupts RL weight sync: garbled rollouts (vllm-ascend #5747)",
        ),
    ),
    (RL, EnvVar("VLLM_USE_V1", "1", "verl's async agent-loop server needs the vLLM V1 engine (sample RL script)")),
    (
        RL,
        EnvVar(
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
            "1",
            "keep all NPUs visible in Ray actors; verl then pins LOCAL_RANK itself (verl Ascend FAQ Q1)",
        ),
    ),
    (SFT, TOKENIZERS_PARALLELISM),
)


class NpuPlatform(Platform):
    name = "npu"
    verl_device = "npu"
    torch_module_name = "npu"
    dist_backend = "hccl"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
    ray_resource = "NPU"
    # transformers routes flash_attention_2 to its NPU integration (npu_fusion_attention); flash_attn itself is absent.
    attn_implementation = "flash_attention_2"
    # Every Ascend recipe disables torch.compile; dynamo on torch_npu is not worth the risk.
    use_torch_compile = False
    # CANN before anything imports torch_npu (Ray counts NPUs with pyACL; without it it globs /dev/davinci?), ATB for
    # vllm-ascend (libatb.so).
    setup_scripts = ("ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh")
    setup_root = ("KIT_ASCEND_ROOT", "/usr/local/Ascend")
    socket_ifname_vars = ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    kernel_backends = ("npu", "reference")
    pinned_stack = (
        PinnedPackage("torch", "NPU_TORCH_VERSION", "image"),
        PinnedPackage("torch-npu", "TORCH_NPU_VERSION", "image"),
        PinnedPackage("vllm", "VLLM_VERSION", "image"),
        PinnedPackage("vllm-ascend", "VLLM_ASCEND_VERSION", "image"),
    )
    # The community triton replaces the package dir triton-ascend needs; flash-attn and liger are CUDA-only (verl's
    # NPU path goes through transformers' npu_flash_attention instead).
    forbidden_packages = ("triton", "flash-attn", "liger-kernel")
    env_table = ENV_TABLE

    def torch_module(self) -> ModuleType:
        torch_npu, status = import_torch_npu()
        if torch_npu is None:
            raise RuntimeError(f"torch_npu unavailable: {status}")
        return npu_namespace(torch_npu)

    def _torch_count(self) -> int | None:
        """Devices torch_npu reports, or None when torch_npu is unusable (so callers can fall back)."""
        torch_npu, _ = import_torch_npu()
        if torch_npu is None:
            return None
        try:
            npu = npu_namespace(torch_npu)
            return int(npu.device_count()) if npu.is_available() else 0
        except Exception:  # noqa: BLE001  (driver/CANN errors surface here at first use)
            return None

    def is_available(self) -> bool:
        return bool(self._torch_count())

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        """Visible-devices mask first (it is what processes will see), then torch_npu, then /dev nodes."""
        assert self.visible_devices_env is not None
        mask = os.environ.get(self.visible_devices_env)
        if mask is not None:
            return count_visible(mask)
        counted = self._torch_count()
        if counted is not None:
            return counted
        return count_davinci(dev_root)

    def status_note(self) -> str:
        torch_npu, status = import_torch_npu()
        return f"torch_npu {status}" if torch_npu is None else f"torch_npu {getattr(torch_npu, '__version__', '?')}"

    def env_problems(self, env: Mapping[str, str], phase: str) -> list[str]:
        check_phase(phase)
        problems = []
        if phase == "rl":
            nz = env.get("VLLM_ASCEND_ENABLE_NZ")
            if nz != "0":
                shown = "unset (vllm-ascend defaults to on)" if nz is None else repr(nz)
                problems.append(
                    f"VLLM_ASCEND_ENABLE_NZ is {shown}: RL needs 0, the NZ weight layout corrupts weight sync"
                )
            if _expandable_segments(env.get("PYTORCH_NPU_ALLOC_CONF")):
                problems.append(
                    "PYTORCH_NPU_ALLOC_CONF enables expandable_segments, which breaks vLLM sleep mode in RL: unset it"
                )
        if env.get("TASK_QUEUE_ENABLE") == "2" and env.get("VLLM_ENABLE_GRAPH_MODE") == "1":
            problems.append("TASK_QUEUE_ENABLE=2 is incompatible with ACL graph mode (VLLM_ENABLE_GRAPH_MODE=1): use 1")
        if env.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
            problems.append(
                "TORCH_DEVICE_BACKEND_AUTOLOAD=0 on an NPU host: verl 0.6.1 only sees torch.npu if torch_npu is "
                "auto-loaded, so it would silently fall back to CPU/CUDA"
            )
        return problems


def _expandable_segments(value: str | None) -> bool:
    return "expandable_segments:true" in (value or "").replace(" ", "").lower()
