"""The platform interface: everything that differs between npu, cuda and cpu, as values and a few probes.

Modelled on vLLM's ``vllm/platforms/interface.py`` and verl 0.9's ``verl/plugin/platform/`` (a base class, one
subclass per device kind, a registry): recipes, launchers, the doctor and the kernels ask the platform instead of
branching on its name. verl 0.6.1 has no such layer (``verl/utils/device.py`` only answers "which name") and
hard-codes CUDA choices that break NPU and CPU runs unless the launch passes the overrides produced here.

Import cost matters: launch wrappers call ``python -m platforms ...`` before every job, so torch is only
imported when a question needs it, and torch_npu only inside detection (without CANN it raises OSError/RuntimeError,
not ImportError).
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from platforms.env import EnvTable, EnvVar, check_phase, select

if TYPE_CHECKING:
    from platforms.stacks import Stack

# Hydra override keys, spelled once. The SFT keys differ between verl's SFT trainers (0.6.1's fsdp_sft_trainer, 0.9.1's
# engine-based sft_trainer): they are a stack fact (platforms/verl_facts.py), read from the stack each method is handed.
# RL keys belong to ppo_trainer.yaml.
RL_DEVICE_KEY = "trainer.device"
RL_STRATEGY_KEYS = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
# '+': override_config is an empty dict in verl's yaml, so the key has to be added, not overridden.
RL_ATTN_KEY = "+actor_rollout_ref.model.override_config.attn_implementation"
RL_TORCH_COMPILE_KEY = "actor_rollout_ref.actor.use_torch_compile"
RL_RAY_NUM_CPUS_KEY = "ray_kwargs.ray_init.num_cpus"
# '+': verl's ray_init has only num_cpus (ppo_trainer.yaml ray_kwargs); Ray reads it only when ray.init starts a local
# Ray, and ignores it when joining a running cluster (ray/_private/worker.py:1807 vs the connect branch at 1834).
RL_RAY_DASHBOARD_KEY = "+ray_kwargs.ray_init.include_dashboard"
RL_ROLLOUT_NAME_KEY = "actor_rollout_ref.rollout.name"
RL_ENFORCE_EAGER_KEY = "actor_rollout_ref.rollout.enforce_eager"
RL_ROLLOUT_PREFIX = "actor_rollout_ref.rollout."
RL_PREFIX_CACHING_KEY = "actor_rollout_ref.rollout.enable_prefix_caching"
# A module verl's FSDP workers import before they build anything (fsdp_workers.py import_external_libs).
RL_EXTERNAL_LIB_KEY = "actor_rollout_ref.model.external_lib"
# The job-wide environment of an RL run: Ray gives it to every worker on every node (the vLLM engines included).
RL_JOB_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"
# verl 0.6.1 hard-codes enable_sleep_mode=True in the vLLM server's engine arguments and merges
# rollout.engine_kwargs.vllm after them (verl/workers/rollout/vllm_rollout/vllm_async_server.py:229, 237); '++': the
# dict is empty in verl's yaml (verl/trainer/config/rollout/rollout.yaml), add or override.
RL_VLLM_SLEEP_MODE_KEY = "++actor_rollout_ref.rollout.engine_kwargs.vllm.enable_sleep_mode"
# vLLM's KV block size, an engine argument verl has no key of its own for (merged the same way; '++' likewise)
RL_VLLM_BLOCK_SIZE_KEY = "++actor_rollout_ref.rollout.engine_kwargs.vllm.block_size"
# Compute dtype. SFT: the stack's "mixed_precision" key (0.6.1: model.fsdp_config.mixed_precision, patch 0013).
# RL: the FSDP workers read
# <role>.fsdp_config.mixed_precision (not in verl's yaml, hence '++': add or override) for FSDP and
# <role>.fsdp_config.dtype for the forward's autocast (verl/workers/actor/dp_actor.py:86,109); the rollout reads
# rollout.dtype (the kit's hf rollout, like vLLM's engine dtype).
RL_FSDP_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref")
RL_ROLLOUT_DTYPE_KEY = "actor_rollout_ref.rollout.dtype"
MIXED_PRECISION_FIELDS = ("param_dtype", "reduce_dtype", "buffer_dtype")

#: verl's default attention everywhere; the kit only emits an attention override when a platform differs from it,
#: because a '+' key would clash with a recipe that already sets it.
VERL_DEFAULT_ATTN = "flash_attention_2"
#: verl's default compute dtype (FSDP param_dtype, autocast, rollout dtype); overrides only where a platform differs.
VERL_DEFAULT_DTYPE = "bf16"
#: verl spells dtypes both ways: the short name for FSDP mixed precision, torch's name for autocast/rollout.
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}

#: Variables every platform's process environment carries (the same reason everywhere).
HYDRA_FULL_ERROR = EnvVar(
    "HYDRA_FULL_ERROR",
    "1",
    "verl entry points are Hydra apps: the full stack trace instead of one line (hicann/cann-recipes-train@93819a7 "
    "agent_rl/qwen3_tool_agent/run_qwen3_4b_sft_npu.sh:23, run_qwen3_4b_dapo_npu.sh:21)",
)


VLLM_CACHE_ENV = "VLLM_CACHE_ROOT"


def vllm_cache_env(phase: str, stack: Stack, environ: Mapping[str, str]) -> list[EnvVar]:
    """RL's ``VLLM_CACHE_ROOT``: the user's when set, else the stack's own (:meth:`Stack.vllm_cache_root`); none for
    SFT, which runs no vLLM. The same on every platform: what collides is two stacks' vLLMs on one host."""
    check_phase(phase)
    if phase != "rl":
        return []
    given = environ.get(VLLM_CACHE_ENV, "").strip()
    if given:
        return [EnvVar(VLLM_CACHE_ENV, given, "vLLM's cache folder: set by the user, kept")]
    reason = (
        f"kit: stack {stack.name}'s own vLLM cache; the stacks' vLLMs file the facts probed of a model class under one "
        "name, each stamped with its own source's hash (vllm/model_executor/models/registry.py, 0.11 :434-440, 0.23 "
        ":828-833), so with one folder each run after the other stack's probes again, in a fresh interpreter that "
        "imports vLLM (platforms/stacks.py Stack.vllm_cache_root; tests/test_vllm_cache_root.py)"
    )
    return [EnvVar(VLLM_CACHE_ENV, stack.vllm_cache_root(environ), reason)]


def dtype_overrides(phase: str, dtype: str, stack: Stack) -> list[str]:
    """Hydra overrides that make every role of ``phase`` compute in ``dtype`` ("fp32", "bf16"), spelled out.

    Parameters stay fp32 (``model_dtype``, verl's default for the trainers); what changes is FSDP's param/reduce/
    buffer dtypes (reduce and buffer stay fp32 under bf16, as verl's defaults), the forward's autocast and the
    rollout's dtype. Also what ``scripts/bench_cpu_step.py`` uses to time one dtype against another.
    """
    check_phase(phase)
    if dtype not in TORCH_DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {', '.join(TORCH_DTYPE_NAMES)}, got {dtype!r}")
    fields = {name: dtype if name == "param_dtype" else "fp32" for name in MIXED_PRECISION_FIELDS}
    if phase == "sft":
        key = stack.verl.sft_keys["mixed_precision"]  # as an override spells it ('++' where verl lacks it)
        return [f"{key}.{name}={value}" for name, value in fields.items()]
    overrides = []
    for role in RL_FSDP_ROLES:
        overrides += [f"++{role}.fsdp_config.mixed_precision.{name}={value}" for name, value in fields.items()]
        overrides.append(f"{role}.fsdp_config.dtype={TORCH_DTYPE_NAMES[dtype]}")
    overrides.append(f"{RL_ROLLOUT_DTYPE_KEY}={TORCH_DTYPE_NAMES[dtype]}")
    return overrides


@dataclass(frozen=True)
class RolloutEngine:
    """The engine verl's RL rollout runs with on a platform: its name (``rollout.name``), version, and why."""

    name: str  # "vllm" or "hf"
    version: str | None  # the engine's version where it has one (vLLM's distribution version)
    note: str  # one line: where it comes from, or why the platform falls back
    fix: str | None = None  # how to get the platform's preferred engine, when this one is a fallback that can be fixed
    plugin: str | None = None  # the platform's vLLM plugin distribution (vllm-ascend), whose version ``version`` is

    def label(self) -> str:
        if self.plugin:
            return f"{self.name} ({self.plugin} {self.version})" if self.version else f"{self.name} ({self.plugin})"
        return f"{self.name} {self.version}" if self.version else self.name


def installed_version(dist: str) -> str | None:
    """``dist``'s installed version in this interpreter, None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def plugin_engine(plugin: str, pin_key: str, stack: Stack) -> RolloutEngine:
    """vLLM through a platform's plugin, at the plugin's installed version, else at the kit's pin (the platform's
    image brings it): issue 44, a dry run for an NPU on a CPU host reported this host's vLLM CPU build instead."""
    installed = installed_version(plugin)
    if installed:
        return RolloutEngine("vllm", installed, f"verl's vLLM async server with {plugin} (installed)", plugin=plugin)
    note = f"verl's vLLM async server with {plugin} (pinned {pin_key}: not installed here, the platform's image has it)"
    return RolloutEngine("vllm", stack.pin(pin_key), note, plugin=plugin)


@dataclass(frozen=True)
class PinnedPackage:
    """A distribution a platform's stack must carry, the pins.env key of its version (None: the image's own), and
    where a correct one comes from: ``image`` (the base image), ``venv`` (scripts/test.sh)."""

    dist: str
    pin_key: str | None
    source: str


@dataclass(frozen=True)
class HostMount:
    """A host path the container needs at the same place (read-only unless ``mode`` says otherwise)."""

    source: str
    target: str
    mode: str = "ro"

    def volume(self) -> str:
        return f"{self.source}:{self.target}" + (f":{self.mode}" if self.mode else "")


@dataclass(frozen=True)
class DeviceAccess:
    """What ``docker run`` needs for a container to use a platform's devices; data, so no script branches on it
    (composed into a command by :mod:`platforms.images`)."""

    #: Device nodes passed one by one, ``<prefix>N`` under the dev root, counted (None: the runtime passes them).
    node_prefix: str | None = None
    #: Why there may be none: the hint of the error on a host without them.
    no_nodes_hint: str = ""
    #: Control nodes every container of the platform needs besides the device nodes.
    control_nodes: tuple[str, ...] = ()
    #: Host paths that must exist (the driver lives on the host, never in the image).
    host_mounts: tuple[HostMount, ...] = ()
    #: Host paths mounted when present.
    optional_mounts: tuple[HostMount, ...] = ()
    #: ``docker run --gpus`` default (the NVIDIA runtime passes the devices); None: no --gpus option.
    gpus: str | None = None
    #: Fixed ``docker run`` arguments.
    run_args: tuple[str, ...] = ()
    #: ``--shm-size`` default (None: none, e.g. with --ipc=host the host's /dev/shm is used).
    shm_size: str | None = None

    def node_pattern(self) -> re.Pattern[str] | None:
        return re.compile(rf"^{re.escape(self.node_prefix)}(\d+)$") if self.node_prefix else None


class Platform(ABC):
    """One device kind. Subclasses set the values and implement the probes; nothing else in the kit branches on
    a platform's name."""

    name: ClassVar[str]
    verl_device: ClassVar[str]
    torch_module_name: ClassVar[str]
    #: torch.distributed backend of this device (what verl's process groups use; the doctor checks it exists).
    dist_backend: ClassVar[str]
    #: The variable that masks devices for a process (read by :meth:`device_count`), or None.
    visible_devices_env: ClassVar[str | None]
    ray_resource: ClassVar[str]
    attn_implementation: ClassVar[str]
    use_torch_compile: ClassVar[bool]
    #: FSDP flavour verl must use, or None to keep verl's default (FSDP1 needs a device id: hard error on CPU).
    fsdp_strategy: ClassVar[str | None] = None
    #: Value for ray_kwargs.ray_init.num_cpus in RL, or None to let Ray count cores.
    ray_num_cpus: ClassVar[int | None] = None
    #: Value for ray_init.include_dashboard when verl starts a local Ray, or None to keep Ray's default (on).
    ray_include_dashboard: ClassVar[bool | None] = None
    #: Compute dtype of every trainer and rollout role.
    compute_dtype: ClassVar[str] = VERL_DEFAULT_DTYPE
    #: Whether the platform has devices of its own (False: CPU, where ranks are processes). Decides what needs
    #: devices to go by: the planning default profile (profiles.default_hardware), benchmark sizes.
    has_devices: ClassVar[bool] = True
    #: Where the device stack lives on hosts and in images (Ascend: CANN, NNAL, driver, firmware), or None. The one
    #: spelling of that path: setup scripts, the image's driver mounts and the doctor's CANN checks read it here.
    install_root: ClassVar[str | None] = None
    #: The variable that moves :attr:`install_root` for the setup scripts (a CANN installed elsewhere), or None.
    install_root_env: ClassVar[str | None] = None
    #: Shell scripts to source before any process starts (CANN, ATB), relative to :attr:`install_root`.
    setup_scripts: ClassVar[tuple[str, ...]] = ()
    #: What ``docker run`` needs to reach the devices (images.py composes it); None: the platform has no image.
    device_access: ClassVar[DeviceAccess | None] = None
    #: The kit's ``docker run`` wrapper of the platform's image (docker/run_<platform>.sh), or None.
    run_script: ClassVar[str | None] = None
    #: Variables naming the network interface collectives bootstrap on (multi-node; set to the node's NIC).
    socket_ifname_vars: ClassVar[tuple[str, ...]] = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    #: Fused-kernel backends worth trying, best first; the last always loads (npu_kernels.ops).
    kernel_backends: ClassVar[tuple[str, ...]] = ("reference",)
    #: Packages the platform's stack must carry at a pin, in report order (doctor, image constraints).
    pinned_stack: ClassVar[tuple[PinnedPackage, ...]] = ()
    #: Packages that must never be installed on this platform (they shadow or break its stack).
    forbidden_packages: ClassVar[tuple[str, ...]] = ()
    #: The process environment per phase (:mod:`platforms.env`).
    env_table: ClassVar[EnvTable] = ()
    #: vLLM's sleep mode works here (verl turns it on unconditionally; vLLM 0.11.0 allows it on CUDA only,
    #: vllm/platforms/interface.py:172-173, and vllm-ascend on NPU). False: the RL overrides turn it off.
    vllm_sleep_mode: ClassVar[bool] = True
    #: vLLM must run eager here (no graph capture): emitted as ``rollout.enforce_eager``; None leaves the recipe's.
    vllm_enforce_eager: ClassVar[bool | None] = None
    #: vLLM's batch limits here (``max_num_batched_tokens``, ``max_num_seqs``), emitted as the rollout's keys of
    #: those names; None leaves the recipe's (verl's defaults, sized for a GPU).
    vllm_batch_limits: ClassVar[Mapping[str, int] | None] = None

    # -- probes

    @abstractmethod
    def is_available(self) -> bool:
        """Whether this process can use the device now."""

    @abstractmethod
    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        """Devices this process would use (honouring :attr:`visible_devices_env`)."""

    def torch_module(self) -> ModuleType:
        """``torch.npu`` / ``torch.cuda`` / ``torch.cpu``."""
        import torch

        module = getattr(torch, self.torch_module_name, None)
        if module is None:
            raise RuntimeError(f"torch.{self.torch_module_name} is not available in this interpreter")
        return module

    def status_note(self) -> str:
        """One line on what the device stack says about itself, for reports (doctor, detect)."""
        return ""

    def bf16_supported(self) -> bool:
        """Whether the devices compute in bf16 (the kit's default dtype); a platform whose older devices lack it
        says so (scripts/bench_kernels.py falls back to fp16 there)."""
        return True

    def rollout_engine(self, stack: Stack) -> RolloutEngine:
        """The RL rollout engine on ``stack``: by default the recipes' (vLLM, from the platform's image), as installed
        here."""
        installed = installed_version("vllm")
        where = "installed" if installed else "not installed here: it comes with the platform's image"
        return RolloutEngine("vllm", installed, f"verl's vLLM async server ({where})")

    # -- what verl needs

    def verl_overrides(self, phase: str, stack: Stack) -> list[str]:
        """Hydra overrides ``stack``'s verl needs on this platform, for ``phase`` ("sft" or "rl").

        verl 0.6.1 does not detect the device itself (trainer.device defaults to cuda and Ray resources follow it),
        so trainer.device is always emitted; the rest only where the platform departs from verl's defaults.
        """
        check_phase(phase)
        if phase == "sft":
            verl = stack.verl  # the SFT trainer's key names are the stack's (platforms/verl_facts.py)
            overrides = [verl.sft_override("device", self.verl_device)]
            if self.fsdp_strategy:
                overrides.append(verl.sft_override("strategy", self.fsdp_strategy))
            if self.attn_implementation != VERL_DEFAULT_ATTN:
                overrides.append(verl.sft_override("attn_implementation", self.attn_implementation))
            return overrides + self.dtype_overrides(phase, stack)
        overrides = [f"{RL_DEVICE_KEY}={self.verl_device}"]
        if self.fsdp_strategy:
            overrides.extend(f"{key}={self.fsdp_strategy}" for key in RL_STRATEGY_KEYS)
        if self.attn_implementation != VERL_DEFAULT_ATTN:
            overrides.append(f"{RL_ATTN_KEY}={self.attn_implementation}")
        overrides.append(f"{RL_TORCH_COMPILE_KEY}={self.use_torch_compile}")
        if self.ray_num_cpus is not None:
            overrides.append(f"{RL_RAY_NUM_CPUS_KEY}={self.ray_num_cpus}")
        if self.ray_include_dashboard is not None:
            overrides.append(f"{RL_RAY_DASHBOARD_KEY}={self.ray_include_dashboard}")
        return overrides + self.rollout_overrides(stack) + self.dtype_overrides(phase, stack)

    def rollout_overrides(self, stack: Stack) -> list[str]:
        """What verl's vLLM rollout needs on this platform: sleep mode off where vLLM refuses it, eager where graphs
        cannot run, vLLM's own batch limits where verl's GPU-sized ones cost its start-up, prefix caching off where it
        breaks. Subclasses that choose the engine themselves add
        ``rollout.name``."""
        overrides = [] if self.vllm_sleep_mode else [f"{RL_VLLM_SLEEP_MODE_KEY}=False"]
        if self.vllm_enforce_eager is not None:
            overrides.append(f"{RL_ENFORCE_EAGER_KEY}={self.vllm_enforce_eager}")
        for key, value in (self.vllm_batch_limits or {}).items():
            overrides.append(f"{RL_ROLLOUT_PREFIX}{key}={value}")
        return overrides + self.prefix_caching_overrides(stack)

    def prefix_caching_overrides(self, stack: Stack) -> list[str]:
        """vLLM's prefix caching on this platform and ``stack``, as ``rollout.enable_prefix_caching`` (a False reaches
        vLLM 0.11 only with patch 0026); none here: the recipe's (verl's default, on)."""
        return []

    def dtype_overrides(self, phase: str, stack: Stack) -> list[str]:
        """The overrides that make every role compute in :attr:`compute_dtype`; none at verl's default (bf16)."""
        check_phase(phase)
        return [] if self.compute_dtype == VERL_DEFAULT_DTYPE else dtype_overrides(phase, self.compute_dtype, stack)

    # -- the process environment

    def env(self, phase: str, stack: Stack, environ: Mapping[str, str] | None = None) -> list[EnvVar]:
        """The recommended environment for ``phase`` on ``stack``: the platform's own entries, then those every
        platform shares (the stack's vLLM cache folder). ``environ`` is the environment it will be applied to
        (default ``os.environ``), for entries that depend on it (the CPU allocator, a user's own cache folder)."""
        environ = os.environ if environ is None else environ
        return self.platform_env(phase, stack, environ) + vllm_cache_env(phase, stack, environ)

    def platform_env(self, phase: str, stack: Stack, environ: Mapping[str, str]) -> list[EnvVar]:
        """This platform's own entries for ``phase``: its table, in order (a platform adds machine-dependent ones)."""
        return select(self.env_table, phase)

    def env_problems(self, env: Mapping[str, str], phase: str) -> list[str]:
        """Settings in ``env`` known to break a run on this platform (silent or far from their cause)."""
        check_phase(phase)
        return []

    def rollout_env_problems(self, env: Mapping[str, str], *, enforce_eager: bool) -> list[str]:
        """Settings in ``env`` (what the rollout's processes get) that break vLLM in the mode the config asks for
        (``enforce_eager`` False: graphs), each with its one-line fix; the launcher refuses such a plan."""
        return []

    def setup_script_paths(self, environ: Mapping[str, str] | None = None) -> list[Path]:
        """Absolute paths of :attr:`setup_scripts` under the (possibly moved) install root."""
        if self.install_root is None:
            return []
        environ = os.environ if environ is None else environ
        moved = environ.get(self.install_root_env, "").strip() if self.install_root_env else ""
        root = Path(moved or self.install_root)
        return [root / script for script in self.setup_scripts]

    # -- Ray

    def ray_start_args(self, count: int) -> list[str]:
        """``ray start`` arguments that declare ``count`` devices of this node."""
        return [f"--resources={json.dumps({self.ray_resource: count}, separators=(',', ':'))}"]

    # -- reports

    def properties(self, stack: Stack, dev_root: str | os.PathLike[str] = "/dev") -> dict[str, Any]:
        """Static values plus live probes, for the CLI and for logs that must say what a run actually used."""
        return {
            "platform": self.name,
            "verl_device": self.verl_device,
            "torch_module": f"torch.{self.torch_module_name}",
            "dist_backend": self.dist_backend,
            "visible_devices_env": self.visible_devices_env,
            "ray_resource": self.ray_resource,
            "attn_implementation": self.attn_implementation,
            "use_torch_compile": self.use_torch_compile,
            "compute_dtype": self.compute_dtype,
            "rollout_engine": self.rollout_engine(stack).label(),
            "available": self.is_available(),
            "device_count": self.device_count(dev_root),
        }


def count_visible(value: str) -> int:
    """Entries in a *_VISIBLE_DEVICES value; an empty value hides every device, as in CUDA's semantics."""
    return len([item for item in value.split(",") if item.strip()])
