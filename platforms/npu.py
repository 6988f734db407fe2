"""Ascend NPUs through torch_npu (Atlas A2 and A3 share this platform; their profiles differ in node shape).

The environment table holds the values of the Ascend ReTool sample (the reference run), MindSpeed-RL's runtime env
for verl RL and vllm-ascend v0.11.0's docs and code; each reason names its source (file:line or owner/repo#N), and
one starting with ``kit:`` marks a value the reference's scripts do not set.
Deliberately absent: ``ASCEND_RT_VISIBLE_DEVICES``. The sample hard-codes ``0..15``, but the device mask is
a per-job decision (and Ray rewrites it per actor); exporting it here would silently widen a mask the user narrowed
on purpose. ``RAY_DEDUP_LOGS=1`` (the sample's) is Ray's default (ray/_private/ray_constants.py:281, Ray 2.48).
Also absent: ``TOKENIZERS_PARALLELISM``; verl's SFT trainer sets it to true when imported
(verl/trainer/fsdp_sft_trainer.py:24) and its PPO runtime env does too (verl/trainer/constants_ppo.py:22).
And ``LD_PRELOAD`` of jemalloc, which verl's A2 ReTool doc sets (``DOC_A2`` below, :129): the vllm-ascend v0.11.0
images install no jemalloc (no Dockerfile of that tag mentions it), the doc's /usr/local/lib path is a hand install,
and vllm-ascend's own guide preloads the distro's /usr/lib/<arch>-linux-gnu copy (``VA_TUNING``:102-113); a preload of
a missing file only prints an ld.so error in every process. Install it and preload it yourself if wanted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from platforms.base import (
    HYDRA_FULL_ERROR,
    RL_ENFORCE_EAGER_KEY,
    RL_JOB_ENV_KEY,
    DeviceAccess,
    HostMount,
    PinnedPackage,
    Platform,
    RolloutEngine,
    count_visible,
    plugin_engine,
)
from platforms.env import BOTH, RL, SFT, EnvTable, EnvVar, check_phase

if TYPE_CHECKING:
    from platforms.stacks import Stack

_DAVINCI_RE = re.compile(r"^davinci\d+$")

#: verl imports these modules in every process it starts (driver, TaskRunner, Ray workers), before any model is
#: built: the one hook that reaches Ray workers without patching verl. npu_kernels.auto applies the fused kernels.
FUSED_KERNELS = EnvVar(
    "VERL_USE_EXTERNAL_MODULES",
    "npu_kernels.auto",
    "kit: fused RMSNorm/RoPE/SwiGLU for Qwen2/Qwen3 in every verl process (verl 0.6.1 imports these modules first: "
    "verl/__init__.py:40-43; tests/kernels/test_worker_hook.py). Numerically not the references' runs (verl's "
    "npu_patch on NPU, verl/models/transformers/npu_patch.py:198-208; plain transformers on CUDA); "
    "KIT_FUSED_KERNELS=off disables it",
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


#: Sources the reasons below cite, pinned to the commits read for them (issue 15: every value points to something real).
#: The Ascend ReTool sample, the reference run on one A3 (line numbers as of that commit).
_SAMPLE = "hicann/cann-recipes-train@93819a7 agent_rl/qwen3_tool_agent/run_qwen3_4b"
SAMPLE_SFT = f"{_SAMPLE}_sft_npu.sh"
SAMPLE_RL = f"{_SAMPLE}_dapo_npu.sh"
#: MindSpeed-RL's Ray runtime env for its verl-based RL on vLLM 0.11.0.
MSRL_ENV = "Ascend/MindSpeed-RL@5261416 configs/envs/runtime_env.yaml"
#: MindSpeed-RL's ReTool RL script for verl (Qwen2.5-7B on one 8-NPU node).
MSRL_RETOOL = "Ascend/MindSpeed-RL@679b564 tests/verl_examples/retool/run_qwen2_7b_dapo_npu.sh"
#: vllm-ascend v0.11.0's tuning guide.
VA_TUNING = "vllm-ascend v0.11.0 docs/source/developer_guide/performance/optimization_and_tuning.md"
#: verl's "Ascend Retool Best Practice": Qwen2.5-7B on one Atlas 900 A2 with verl 0.6.1 and vllm-ascend v0.11.0-dev,
#: the only published A2 ReTool configuration (configs, no results); its environment is lines 122-129. The same
#: environment block as MSRL_RETOOL:3-10.
DOC_A2 = "verl-project/verl@205b1f39 docs/ascend_tutorial/examples/ascend_retool_best_pratice.rst"

#: The process environment per phase (platforms.env), in the order it is rendered.
ENV_TABLE: EnvTable = (
    (BOTH, FUSED_KERNELS),
    (BOTH, HYDRA_FULL_ERROR),
    (BOTH, EnvVar("ASCEND_GLOBAL_LOG_LEVEL", "3", f"CANN logs at ERROR only: {SAMPLE_SFT}:30, {SAMPLE_RL}:28")),
    (
        BOTH,
        EnvVar("ASCEND_SLOG_PRINT_TO_STDOUT", "0", f"CANN logs to files, not stdout: {SAMPLE_SFT}:29, {SAMPLE_RL}:27"),
    ),
    (BOTH, EnvVar("ASCEND_GLOBAL_EVENT_ENABLE", "0", f"CANN event log off: {SAMPLE_SFT}:28, {SAMPLE_RL}:26")),
    (
        BOTH,
        EnvVar(
            "ASCEND_LAUNCH_BLOCKING",
            "0",
            f"asynchronous op launch (1 serialises every op, a debug aid): {SAMPLE_SFT}:24, {SAMPLE_RL}:22",
        ),
    ),
    (SFT, EnvVar("HCCL_CONNECT_TIMEOUT", "360", f"the reference's SFT value: {SAMPLE_SFT}:32")),
    (SFT, EnvVar("HCCL_EXEC_TIMEOUT", "360", f"the reference's SFT value: {SAMPLE_SFT}:33")),
    (
        RL,
        EnvVar(
            "HCCL_CONNECT_TIMEOUT",
            "1800",
            f"kit: MindSpeed-RL's value for verl RL ({MSRL_ENV}:11); the reference used 360 ({SAMPLE_RL}:30)",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_EXEC_TIMEOUT",
            "3600",
            f"kit: MindSpeed-RL's value for verl RL ({MSRL_ENV}:13); the reference used 360 ({SAMPLE_RL}:31)",
        ),
    ),
    (
        BOTH,
        EnvVar(
            "HCCL_IF_BASE_PORT",
            "64033",
            f"{SAMPLE_SFT}:34, {SAMPLE_RL}:32; HCCL's default base is 60000 (vllm-project/vllm-ascend#405)",
        ),
    ),
    (
        BOTH,
        EnvVar(
            "CUDA_DEVICE_MAX_CONNECTIONS",
            "1",
            f"{SAMPLE_SFT}:35, {SAMPLE_RL}:34; verl 0.6.1 sets the same for every PPO Ray worker "
            "(verl/trainer/constants_ppo.py:28)",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_HOST_SOCKET_PORT_RANGE",
            "auto",
            "kit: free HCCL host ports per process on a shared NPU: verl sets it for every Ray worker since "
            "volcengine/verl#4280 (after 0.6.1, which gave vLLM its own process; verl/trainer/constants_ppo.py:37-38); "
            "in 0.6.1 vLLM runs inside the training worker (vllm_rollout_spmd.py:581-590): a safeguard, not a fix",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_NPU_SOCKET_PORT_RANGE",
            "auto",
            "kit: free HCCL device ports per process on a shared NPU: as HCCL_HOST_SOCKET_PORT_RANGE "
            "(volcengine/verl#4280, verl/trainer/constants_ppo.py:37-38; alibaba/ROLL#421)",
        ),
    ),
    (
        RL,
        EnvVar(
            "HCCL_OP_EXPANSION_MODE",
            "AIV",
            f"collectives scheduled by the vector cores, not the AI CPU: {SAMPLE_RL}:33; {DOC_A2}:127 (A2); "
            f"{VA_TUNING}:171-175",
        ),
    ),
    (
        SFT,
        EnvVar(
            "TASK_QUEUE_ENABLE",
            "2",
            f"kit: level-2 op-dispatch queue ({VA_TUNING}:158-159, {MSRL_ENV}:37); not in the reference ({SAMPLE_SFT})",
        ),
    ),
    (
        RL,
        EnvVar(
            "TASK_QUEUE_ENABLE",
            "2",
            f"kit: level-2 op-dispatch queue ({VA_TUNING}:158-159, {MSRL_ENV}:37); needs eager vLLM ({MSRL_ENV}:36), "
            "hence rollout.enforce_eager=true (the dry run refuses graphs with it: rollout_env_problems); the "
            "reference left it unset and ran verl's default graph mode "
            f"(verl 0.6.1 verl/trainer/config/rollout/rollout.yaml:38); the A2 doc pairs graphs (enforce_eager=False, "
            f"{DOC_A2}:245) with level 1 ({DOC_A2}:125). Not taken: neither pair has a published timing or result on "
            "this stack, so the kit keeps the one NPU environment all its recipes plan with; the doctor does not "
            "flag the doc's pair",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_ENABLE_GRAPH_MODE",
            None,
            "read by no vllm-ascend release (v0.7.1rc1..v0.25.1rc1) but set by MindSpeed-RL scripts "
            f"({MSRL_RETOOL}:7) and the A2 doc ({DOC_A2}:126): unset, so a copied 1 cannot contradict eager mode; "
            "graph mode is rollout.enforce_eager=False",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_ASCEND_ENABLE_MLP_OPTIMIZE",
            None,
            f"the A2 doc sets 1 ({DOC_A2}:128). Not taken: in vllm-ascend v0.11.0 it splits the dense MLP's "
            "gate_up/down projections over an 'mlp_tp' group as large as vLLM's data-parallel size instead of the "
            "TP group (vllm_ascend/ops/linear_op.py:74-79, 472-473, 491-492; distributed/parallel_state.py:112-128), "
            "and verl 0.6.1's rollout servers run data-parallel 1 (rollout.yaml:53): every TP rank then holds the "
            "whole MLP, less room for KV cache, for a gain nobody has measured (the doc publishes no timing); unset",
        ),
    ),
    (
        BOTH,
        EnvVar(
            "CPU_AFFINITY_CONF", "1", f"kit: bind host threads to the NPU's cores: {VA_TUNING}:161-162, {MSRL_ENV}:39"
        ),
    ),
    (
        BOTH,
        EnvVar(
            "TORCHDYNAMO_DISABLE",
            "1",
            f"kit: the reference runs without torch.compile ({SAMPLE_RL}:111 use_torch_compile=False); MindSpeed-RL's "
            f"ReTool script sets this variable ({MSRL_RETOOL}:4)",
        ),
    ),
    (
        SFT,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            "expandable_segments:True",
            "kit: less fragmentation with variable-length batches: vllm-ascend v0.11.0 docs/source/faqs.md:144, "
            f"{MSRL_ENV}:9; safe in SFT (no vLLM sleep mode); not in the reference ({SAMPLE_SFT})",
        ),
    ),
    (
        RL,
        EnvVar(
            "PYTORCH_NPU_ALLOC_CONF",
            None,
            "verl 0.6.1 always runs vLLM in sleep mode (vllm_async_server.py:229), whose vllm-ascend v0.11.0 "
            "allocator asserts expandable_segments is off (vllm_ascend/device_allocator/camem.py:147-151; "
            "modelscope/ms-swift#6636)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_ASCEND_ENABLE_NZ",
            "0",
            "kit: vllm-ascend v0.11.0 defaults it to 1 (vllm_ascend/envs.py:168-169) and then raises in wake_up "
            "(vllm_ascend/worker/worker_v1.py:183-186), which verl's sleep mode calls every step; "
            f"vllm-project/vllm-ascend#5747; {MSRL_ENV}:35",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_USE_V1",
            "1",
            f"{SAMPLE_RL}:38; verl 0.6.1's async server is built on vLLM V1 (vllm_async_server.py:39-42)",
        ),
    ),
    (
        RL,
        EnvVar(
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
            "1",
            "kit: Ray leaves every NPU visible and verl 0.6.1 sets LOCAL_RANK and the device from Ray's NPU ids "
            "(verl/utils/ray_utils.py:26-46, single_controller/base/worker.py:248-256, vllm_rollout_spmd.py:587-590); "
            f"{MSRL_ENV}:3; not in the reference ({SAMPLE_RL})",
        ),
    ),
)


#: Where Ascend installs CANN, NNAL, the driver and firmware, on hosts and in the vllm-ascend images.
ASCEND_ROOT = "/usr/local/Ascend"

#: What a container needs to use the NPUs: every /dev/davinciN (counted, not assumed: A2 has 8, A3 16), the
#: davinci_manager / devmm_svm / hisi_hdc control devices and the host's driver, firmware, DCMI, npu-smi and
#: ascend_install.info; host networking (HCCL, Ray, the sandbox) and a large /dev/shm (Ray and DataLoader workers; 100g
#: as before in docker/run_npu.sh).
DEVICE_ACCESS = DeviceAccess(
    node_prefix="davinci",
    no_nodes_hint="not an Ascend host, or the NPU driver is not loaded",
    control_nodes=("davinci_manager", "devmm_svm", "hisi_hdc"),
    host_mounts=(
        HostMount(f"{ASCEND_ROOT}/driver", f"{ASCEND_ROOT}/driver"),
        HostMount("/usr/local/dcmi", "/usr/local/dcmi"),
        HostMount("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi"),
        HostMount("/etc/ascend_install.info", "/etc/ascend_install.info"),
    ),
    optional_mounts=(
        HostMount(f"{ASCEND_ROOT}/firmware", f"{ASCEND_ROOT}/firmware"),
        HostMount("/var/log/npu", "/usr/slog", mode=""),
    ),
    run_args=("--network=host",),
    shm_size="100g",
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
    install_root = ASCEND_ROOT
    install_root_env = "KIT_ASCEND_ROOT"
    device_access = DEVICE_ACCESS
    run_script = "docker/run_npu.sh"
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

    def rollout_engine(self, stack: Stack) -> RolloutEngine:
        """vllm-ascend, the NPU image's engine: not this host's vLLM (a CPU host has the CPU build, issue 44)."""
        return plugin_engine("vllm-ascend", "VLLM_ASCEND_VERSION", stack)

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
        if _queue_needs_eager(env) and env.get("VLLM_ENABLE_GRAPH_MODE") == "1":
            # The variable itself is read by no vllm-ascend, but whoever sets it means graphs (enforce_eager=False).
            problems.append("TASK_QUEUE_ENABLE=2 is incompatible with ACL graph mode (VLLM_ENABLE_GRAPH_MODE=1): use 1")
        if env.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
            problems.append(
                "TORCH_DEVICE_BACKEND_AUTOLOAD=0 on an NPU host: verl 0.6.1 only sees torch.npu if torch_npu is "
                "auto-loaded, so it would silently fall back to CPU/CUDA"
            )
        return problems

    def rollout_env_problems(self, env: Mapping[str, str], *, enforce_eager: bool) -> list[str]:
        """vLLM graphs (``rollout.enforce_eager=False``) under the level-2 task queue the NPU environment sets."""
        if enforce_eager or not _queue_needs_eager(env):
            return []
        return [
            f"{RL_ENFORCE_EAGER_KEY}=False (vLLM graphs) with TASK_QUEUE_ENABLE=2, which needs eager vLLM "
            f"({MSRL_ENV}:36): keep {RL_ENFORCE_EAGER_KEY}=True, or give the job TASK_QUEUE_ENABLE=1 (the A2 doc's "
            f"pair with graphs): '+{RL_JOB_ENV_KEY}.TASK_QUEUE_ENABLE=\"1\"'"
        ]


def _queue_needs_eager(env: Mapping[str, str]) -> bool:
    """The one rule on TASK_QUEUE_ENABLE and vLLM graphs: level 2 needs eager mode (MindSpeed-RL
    configs/envs/runtime_env.yaml:36); level 1 with graphs is the A2 doc's pair and passes. The doctor
    (:meth:`NpuPlatform.env_problems`) and the launcher (:meth:`NpuPlatform.rollout_env_problems`) both ask here."""
    return env.get("TASK_QUEUE_ENABLE") == "2"


def _expandable_segments(value: str | None) -> bool:
    return "expandable_segments:true" in (value or "").replace(" ", "").lower()
