"""Plain CPU: CI, laptops and the smoke run. Ranks are processes, not devices; every role computes in fp32.

Why fp32: PyTorch's CPU bf16 GEMM without AVX512-BF16/AMX falls back to a slow reference path (one smoke SFT
micro-batch: 3.4 s fp32 vs 39 s bf16 on a 2-core AVX2 EPYC; ``scripts/bench_cpu_step.py`` measures both trainers).
Why an allocator: the 151,936-row vocabulary makes a logits tensor of hundreds of MB per micro-batch, which glibc
returns to the kernel when freed, so every step page-faults it back in.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from platforms import verl_selectors, vllm_cpu
from platforms.base import (
    HYDRA_FULL_ERROR,
    RL_EXTERNAL_LIB_KEY,
    RL_PREFIX_CACHING_KEY,
    RL_ROLLOUT_NAME_KEY,
    RL_VLLM_BLOCK_SIZE_KEY,
    DeviceAccess,
    PinnedPackage,
    Platform,
    RolloutEngine,
)
from platforms.env import BOTH, RL, EnvTable, EnvVar, select

if TYPE_CHECKING:
    from platforms.stacks import Stack

#: Imported by verl's FSDP workers (``actor_rollout_ref.model.external_lib``): undoes vLLM's thread pinning there.
VLLM_UNPIN_MODULE = "platforms.vllm_cpu_threads"

#: Imported by every verl process (``VERL_USE_EXTERNAL_MODULES``): vLLM's platform probe without the IPEX import.
VLLM_PROBE_MODULE = "platforms.vllm_cpu_probe"
#: The attention the CPU trainers compute with: sdpa per packed sequence, registered by its module on import in every
#: verl process (``VERL_USE_EXTERNAL_MODULES``, both phases). sdpa's own block-diagonal mask over a packed row costs
#: the square of the row: an RL update of SmolLM2 on 16 packed sequences of 150 tokens took 34.7 s with it and 23.7 s
#: with this, the same numbers to 7e-5 in the logits (1 core; platforms/cpu_attention.py, tests/test_cpu_attention.py,
#: scripts/bench_learn_speed.py).
PACKED_ATTENTION = "kit_packed_sdpa"
PACKED_ATTENTION_MODULE = "platforms.cpu_attention"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"

#: Ray's CPU count is only a scheduling label: on CPU each FSDP worker's bundle, the TaskRunner and each vLLM server
#: actor hold one CPU (agent-loop and reward-manager workers hold none), so a 2-core box must advertise more than it
#: has or the job waits forever. The smoke layout needs 5 (2 workers + TaskRunner + 2 vLLM servers); the dry run
#: counts a plan's demand against this (recipes/launch/sizing/ray_cpus.py).
CPU_RAY_NUM_CPUS = 8
#: GiB of KV cache per vLLM server when the user sets none (vLLM's own default is 4 GiB per server,
#: vllm/platforms/cpu.py:114-123; 1 GiB held the smoke's tiny model: shared/notes). Raise it for real models.
VLLM_KVCACHE_GIB = "1"
VLLM_KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
#: vLLM's defaults for an OpenAI API server on a CPU at tensor parallel 1 (see CpuPlatform.vllm_batch_limits).
VLLM_CPU_BATCH_LIMITS = {"max_num_batched_tokens": 2048, "max_num_seqs": 128}

#: Where Debian/Ubuntu (libtcmalloc-minimal4) and RHEL-likes (gperftools-libs) put tcmalloc.
TCMALLOC_CANDIDATES: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
    "/usr/lib/libtcmalloc_minimal.so.4",
)
#: The threads of each rank process (OpenMP, and so torch's intra-op pool).
THREADS_ENV = "OMP_NUM_THREADS"
#: Set to 0 to keep glibc's allocator in the CPU runs (to compare, or if tcmalloc misbehaves somewhere).
TCMALLOC_SWITCH = "KIT_CPU_TCMALLOC"


def find_tcmalloc(candidates: Iterable[str] | None = None) -> str | None:
    """The first tcmalloc library present, or None (the venv setup installs it where it can: root with apt)."""
    return next((path for path in candidates or TCMALLOC_CANDIDATES if os.path.isfile(path)), None)


#: The process environment per phase (platforms.env), in the order it is rendered. No reference run exists on
#: CPU: every value here is the kit's, with its evidence. TOKENIZERS_PARALLELISM is left out: verl sets it to true
#: itself (verl/trainer/fsdp_sft_trainer.py:24, verl/trainer/constants_ppo.py:22).
ENV_TABLE: EnvTable = (
    (BOTH, HYDRA_FULL_ERROR),
    (
        BOTH,
        EnvVar(
            "TORCH_DEVICE_BACKEND_AUTOLOAD",
            "0",
            "`import torch` loads every installed device extension and raises if one fails (torch 2.8 "
            "torch/__init__.py:2805-2845: 'disable ... with TORCH_DEVICE_BACKEND_AUTOLOAD=0'), e.g. torch_npu w/o CANN",
        ),
    ),
    (
        BOTH,
        EnvVar(
            THREADS_ENV,
            "1",
            "one thread per rank process, torchrun's own default for nproc_per_node > 1 (torch/distributed/"
            "run.py:772-784, torch 2.8); set here for the Ray workers too, which get no such default",
        ),
    ),
    (
        BOTH,
        EnvVar(
            "TORCHDYNAMO_DISABLE",
            "1",
            "verl compiles entropy_from_logits unless use_torch_compile is off (verl/workers/actor/dp_actor.py:"
            "80-83); its first compiled call took 19 s vs 0.4 s eager on a 2-core x86 box (256 x 151,936 logits)",
        ),
    ),
    (
        BOTH,
        EnvVar(
            "THP_MEM_ALLOC_ENABLE",
            "1",
            "PyTorch's CPU allocator puts tensors >= 2 MB on huge pages: far fewer page faults on the 151,936-row "
            "logits (scripts/bench_cpu_step.py, variant fp32-glibc-no-thp)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_CPU_OMP_THREADS_BIND",
            "auto",
            "vLLM's default, explicit: its CPU worker runs inside each trainer rank (verl vllm_rollout_spmd.py:"
            "581-597) and 'auto' binds that process's OpenMP threads to the cores of NUMA node 0 (vllm/v1/worker/"
            "cpu_worker.py:38-66), which the cpu platform then undoes in the ranks (platforms/"
            "vllm_cpu_threads.py: both ranks' threads were pinned to core 0). An explicit list cannot work with 2+ "
            "ranks: vLLM slices it to the local DP group, then indexes it by global rank (:54-61, IndexError on "
            "rank 1)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_CPU_NUM_OF_RESERVED_CPU",
            "0",
            "vLLM 0.23 keeps a core off its CPU worker's thread list for the scheduler process (vllm/utils/"
            "ompmultiprocessing.py:43-50, 'TODO: make scheduler proc sleep when idle'); verl 0.9.1 runs that worker "
            "in a process of its own (vllm_async_server.py:339, mp), so on 2 cores it generated on one while the "
            "trainer waited: the learning check's generation took 33.6 s a step with it and 26.6 s without, RL "
            "550.1 s -> 484.3 s (docs/measurements/learn_reserved_cpu.yaml). vLLM 0.11's default when TP is 1 (vllm/v1/"
            "worker/cpu_worker.py:143-147)",
        ),
    ),
)


class CpuPlatform(Platform):
    name = "cpu"
    verl_device = "cpu"
    torch_module_name = "cpu"
    dist_backend = "gloo"
    visible_devices_env = None
    ray_resource = "CPU"
    attn_implementation = PACKED_ATTENTION
    # Inductor's first compile of verl's entropy_from_logits alone took 19 s on a 2-core box (0.4 s eager).
    use_torch_compile = False
    fsdp_strategy = "fsdp2"
    ray_num_cpus = CPU_RAY_NUM_CPUS
    # The local Ray verl starts for a CPU run serves no one its dashboard, and starting it costs the run's start:
    # ray.init 6.1 s with it vs 3.6 s without, 18 vs 9 Ray processes competing for the cores (measured on 2 cores,
    # ray 2.48; tests/test_cpu_startup.py checks the override reaches verl's ray.init).
    ray_include_dashboard = False
    compute_dtype = "fp32"
    # Ranks are processes, not devices: planning from a CPU machine plans the reference profile, and benchmarks
    # shrink their shapes (scripts/bench_kernels.py).
    has_devices = False
    pinned_stack = (PinnedPackage("torch", "CPU_TORCH_VERSION", "venv"),)
    env_table = ENV_TABLE
    # "Sleep mode is not supported on current platform" (vllm/config/model.py:433-435); on CPU verl's sleep/wake_up
    # only log a warning (vllm/v1/worker/cpu_worker.py:83-89), so the KV cache and vLLM's weights stay in memory.
    vllm_sleep_mode = False
    # The CPU image (docker/Dockerfile.cpu) needs no device. Ray's object store lives in /dev/shm,
    # which docker sizes at 64 MB unless told (Ray then warns and puts its object store in /tmp: ray 2.48
    # ray/_private/services.py:2117-2147).
    device_access = DeviceAccess(shm_size="8g")
    run_script = "docker/run_cpu.sh"
    # vLLM's CPU backend captures no graphs; verl's default is enforce_eager=False (rollout.yaml:38).
    vllm_enforce_eager = True
    # vLLM's own limits for a CPU API server (vllm/engine/arg_utils.py: 0.11.0 :1642-1651, 0.23.0 :2358-2366), not
    # verl's GPU-sized 8192 and 1024 (verl/workers/config/rollout.py:142,150 in 0.6.1). vLLM's CPU worker runs a dummy
    # forward of the batch limit before it serves (0.23: cpu_worker.py:170 -> profile_run, max_num_batched_tokens
    # tokens; 0.11: cpu_worker.py:98, max(16, max_num_seqs)); scripts/bench_vllm_cpu.py measures both.
    vllm_batch_limits = VLLM_CPU_BATCH_LIMITS

    def is_available(self) -> bool:
        return True

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        return os.cpu_count() or 1

    def ray_start_args(self, count: int) -> list[str]:
        return [f"--num-cpus={self.ray_num_cpus}"]

    def rollout_engine(self, stack: Stack) -> RolloutEngine:
        """vLLM's CPU build where the venv has it (x86_64), else the kit's hf rollout (:mod:`.vllm_cpu`)."""
        return vllm_cpu.engine()

    def rollout_overrides(self, stack: Stack) -> list[str]:
        """The engine by name (the recipes name vllm; hf where vllm-cpu is missing), vLLM's CPU limits, and the
        module that keeps vLLM from pinning the trainer ranks' threads (:mod:`.vllm_cpu_threads`)."""
        engine = self.rollout_engine(stack).name
        unpin = [f"{RL_EXTERNAL_LIB_KEY}={VLLM_UNPIN_MODULE}"] if engine == "vllm" else []
        registry = verl_selectors.rl_overrides(stack.verl.has_platform_registry)  # verl 0.9.1's TransferQueue on CPU
        return [f"{RL_ROLLOUT_NAME_KEY}={engine}", *super().rollout_overrides(stack), *unpin, *registry]

    def prefix_caching_overrides(self, stack: Stack) -> list[str]:
        """Prefix caching where the stack's vLLM CPU build serves it (:attr:`Stack.vllm_cpu_prefix_block`, at that
        block size), else off. Off on the reference: with it on, IPEX's decode kernel raises "Sliding window
        unsupported" (vllm/v1/attention/backends/cpu_attn.py:909, intel_extension_for_pytorch mha_fusion.py:424) and
        the engine dies when a decode batch's sequences share cached prompt blocks in groups, as GRPO groups do on
        every turn after the first (tests/cpu/test_cpu_grpo_prefix_groups.py: dies in step 1 with it on, 2 of 2)."""
        block = stack.vllm_cpu_prefix_block
        if block is None:
            return [f"{RL_PREFIX_CACHING_KEY}=False"]
        return [f"{RL_PREFIX_CACHING_KEY}=True", f"{RL_VLLM_BLOCK_SIZE_KEY}={block}"]

    def platform_env(self, phase: str, stack: Stack, environ: Mapping[str, str]) -> list[EnvVar]:
        """The table, then the KV cache (RL) and this machine's allocator: the result can differ between machines."""
        rl = [self.kv_cache_space(environ)] if phase == "rl" else []
        return (
            [
                self.rl_threads(stack, e) if phase == "rl" and e.name == THREADS_ENV else e
                for e in select(self.env_table, phase)
            ]
            + rl
            + self.stack_env(stack)
            + [self.external_modules(phase, stack, environ)]
            + self.allocator(environ)
        )

    @staticmethod
    def rl_threads(stack: Stack, entry: EnvVar) -> EnvVar:
        """OMP_NUM_THREADS for RL: the table's ``entry`` (one per process), or, on a stack that trains RL on fewer
        ranks than this machine's cores, the cores over those ranks (verl_selectors.rl_threads)."""
        threads = verl_selectors.rl_threads(stack.verl.has_platform_registry, len(os.sched_getaffinity(0)))
        if threads is None:
            return entry
        reason = (
            f"kit: stack {stack.name}'s verl trains RL on {verl_selectors.CPU_RL_RANKS} rank(s) per node on CPU "
            f"(platforms/verl_selectors.py): this machine's {threads} core(s) per rank; one thread left a core idle "
            "in the update (85 s of a 128 s learning-check step on 2 cores, issue 51)"
        )
        return EnvVar(THREADS_ENV, str(threads), reason)

    @staticmethod
    def stack_env(stack: Stack) -> list[EnvVar]:
        """The stack's own selectors: verl >= 0.9 picks its platform from a registry (platforms/verl_platform.py),
        which has no CPU platform of verl's; the reference stack needs none (its patches carry the CPU path)."""
        reason = (
            "kit: verl 0.9.1 resolves its platform from VERL_PLATFORM (verl/plugin/platform/platform_manager.py:92-96) "
            "and its training engine from VERL_ENGINE_DEVICE (verl/workers/engine/base.py:404-408): the kit's CPU "
            "platform, and verl's device-agnostic FSDP engine (platforms/verl_platform.py)"
        )
        return [EnvVar(k, v, reason) for k, v in verl_selectors.verl_env(stack.verl.has_platform_registry).items()]

    @staticmethod
    def external_modules(phase: str, stack: Stack, environ: Mapping[str, str]) -> EnvVar:
        """VERL_USE_EXTERNAL_MODULES with the kit's modules first and the modules already named kept (the learning
        check's sabotage hooks, a user's own): the one list verl reads, so replacing it would drop theirs."""
        given = [module.strip() for module in environ.get(EXTERNAL_MODULES_ENV, "").split(",") if module.strip()]
        ours = [VLLM_PROBE_MODULE, PACKED_ATTENTION_MODULE] if phase == "rl" else [PACKED_ATTENTION_MODULE]
        ours = [
            *verl_selectors.external_modules(stack.verl.has_platform_registry),
            *ours,
        ]  # registered before any verl use
        reason = (
            f"kit: verl imports these first in every process (verl/__init__.py:40-43); {PACKED_ATTENTION_MODULE} "
            f"registers the trainers' attention, {PACKED_ATTENTION} (see PACKED_ATTENTION, platforms/cpu.py)"
        )
        if phase == "rl":
            reason += (
                "; vllm_cpu_probe skips vLLM's XPU probe, which imports IPEX (4.4 s of CPU) in each process that reads "
                "vLLM's config, on a torch without XPU (platforms/vllm_cpu_probe.py; tests/test_cpu_startup.py)"
            )
        return EnvVar(EXTERNAL_MODULES_ENV, ",".join(dict.fromkeys([*ours, *given])), reason)

    @staticmethod
    def kv_cache_space(environ: Mapping[str, str]) -> EnvVar:
        """VLLM_CPU_KVCACHE_SPACE: the user's value when set, else the kit's small default (the smoke's model)."""
        given = environ.get(VLLM_KVCACHE_ENV, "").strip()
        if given:
            return EnvVar(VLLM_KVCACHE_ENV, given, "GiB of KV cache per vLLM server: set by the user, kept")
        reason = (
            "GiB of KV cache per vLLM server, allocated up front (vLLM's default, 4 GiB per server: vllm/platforms/"
            "cpu.py:114-123); 1 GiB holds the smoke's tiny model many times over. Export a larger value for real models"
        )
        return EnvVar(VLLM_KVCACHE_ENV, VLLM_KVCACHE_GIB, reason)

    @staticmethod
    def allocator(environ: Mapping[str, str]) -> list[EnvVar]:
        """LD_PRELOAD of tcmalloc for the CPU runs, when installed and not switched off (``KIT_CPU_TCMALLOC=0``).

        Adopted because scripts/bench_cpu_step.py measured it above the kit's 15% bar on top of huge pages (see the
        reason string); an existing LD_PRELOAD is kept after it.
        """
        if environ.get(TCMALLOC_SWITCH, "1").strip() == "0":
            return []
        library = find_tcmalloc()
        if library is None:
            return []
        existing = [item for item in re.split(r"[:\s]+", environ.get("LD_PRELOAD", "")) if item and item != library]
        reason = "tcmalloc keeps freed logits buffers instead of page-faulting them back: SFT step -26%, GRPO -29% "
        reason += f"(scripts/bench_cpu_step.py; {TCMALLOC_SWITCH}=0 turns it off)"
        return [EnvVar("LD_PRELOAD", ":".join([library, *existing]), reason)]
