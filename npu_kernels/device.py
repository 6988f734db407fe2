"""The kit's only knowledge of npu / cuda / cpu differences.

Modelled on vLLM's ``vllm/platforms/interface.py`` and verl's later ``verl/plugin/platform/``: one small frozen
dataclass per platform carries every device-dependent value (torch namespace, collective backend, visibility variable,
Ray resource name, attention kernel, torch.compile, Hydra overrides), so recipes and scripts ask the platform instead of
sprinkling ``if npu`` branches. verl 0.6.1 has no such layer (verl/utils/device.py only answers "which name"), and it
hard-codes CUDA choices that break NPU and CPU runs unless the launch passes the overrides produced here.

Import cost matters: launch scripts call ``python -m npu_kernels.device env ...`` for every job, so torch is only
imported when a question needs it, and torch_npu only inside detection (never at import time: without CANN it raises
OSError/RuntimeError, not ImportError).

CLI::

    python -m npu_kernels.device [detect] [--json]
    python -m npu_kernels.device env --phase sft|rl [--hw a2|a3|cuda|cpu]
    python -m npu_kernels.device overrides --phase sft|rl [--hw a2|a3|cuda|cpu]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from npu_kernels.env_presets import HARDWARE, PHASES, preset, render_shell

#: Forces a platform (npu|cuda|cpu), e.g. to dry-run NPU launch commands on a laptop, or to keep a GPU box on CPU.
OVERRIDE_ENV = "KIT_DEVICE"

# Hydra override keys, spelled once. SFT keys belong to verl/trainer/config/sft_trainer.yaml
# (model.attn_implementation exists only with the kit's patch series); RL keys to ppo_trainer.yaml.
SFT_DEVICE_KEY = "trainer.device"
SFT_STRATEGY_KEY = "model.strategy"
SFT_ATTN_KEY = "model.attn_implementation"
RL_DEVICE_KEY = "trainer.device"
RL_STRATEGY_KEYS = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
# '+': override_config is an empty dict in verl's yaml, so the key has to be added, not overridden.
RL_ATTN_KEY = "+actor_rollout_ref.model.override_config.attn_implementation"
RL_TORCH_COMPILE_KEY = "actor_rollout_ref.actor.use_torch_compile"
RL_RAY_NUM_CPUS_KEY = "ray_kwargs.ray_init.num_cpus"

#: verl's default attention everywhere; the kit only emits an attention override when a platform differs from it,
#: because a '+' key would clash with a recipe that already sets it.
VERL_DEFAULT_ATTN = "flash_attention_2"

#: Ray's CPU count is only a scheduling label: on CPU the FSDP workers, the TaskRunner and each agent-loop worker all
#: ask for one CPU, so a 2-core box must advertise more than it has or the job waits forever.
CPU_RAY_NUM_CPUS = 4

_DAVINCI_RE = re.compile(r"^davinci\d+$")


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")


def _count_visible(value: str) -> int:
    """Entries in a *_VISIBLE_DEVICES value; an empty value hides every device, as in CUDA's semantics."""
    return len([item for item in value.split(",") if item.strip()])


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


def _npu_namespace(torch_npu: ModuleType) -> Any:
    """``torch.npu`` when torch_npu registered it (the real one does), else ``torch_npu.npu``."""
    import torch

    return getattr(torch, "npu", None) or torch_npu.npu


@dataclass(frozen=True)
class Platform:
    """Everything that differs between accelerators, as plain values plus a few probes."""

    name: str
    verl_device: str
    torch_module_name: str
    dist_backend: str
    visible_devices_env: str | None
    ray_resource: str
    attn_implementation: str
    use_torch_compile: bool
    #: FSDP flavour verl must use, or None to keep verl's default (FSDP1 needs a device id: hard error on CPU).
    fsdp_strategy: str | None = None
    #: Value for ray_kwargs.ray_init.num_cpus in RL, or None to let Ray count cores.
    ray_num_cpus: int | None = None

    def torch_module(self) -> ModuleType:
        """``torch.npu`` / ``torch.cuda`` / ``torch.cpu``; on npu this imports torch_npu first so the name exists."""
        import torch

        module = getattr(torch, self.torch_module_name, None)
        if module is None:
            raise RuntimeError(f"torch.{self.torch_module_name} is not available in this interpreter")
        return module

    def is_available(self) -> bool:
        raise NotImplementedError

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        raise NotImplementedError

    def verl_overrides(self, phase: str) -> list[str]:
        """Hydra overrides verl needs on this platform, for ``phase`` ("sft" or "rl").

        verl 0.6.1 does not detect the device itself (trainer.device defaults to cuda and Ray resources follow it),
        so trainer.device is always emitted; the rest only where the platform departs from verl's defaults.
        """
        _check_phase(phase)
        if phase == "sft":
            overrides = [f"{SFT_DEVICE_KEY}={self.verl_device}"]
            if self.fsdp_strategy:
                overrides.append(f"{SFT_STRATEGY_KEY}={self.fsdp_strategy}")
            if self.attn_implementation != VERL_DEFAULT_ATTN:
                overrides.append(f"{SFT_ATTN_KEY}={self.attn_implementation}")
            return overrides
        overrides = [f"{RL_DEVICE_KEY}={self.verl_device}"]
        if self.fsdp_strategy:
            overrides.extend(f"{key}={self.fsdp_strategy}" for key in RL_STRATEGY_KEYS)
        if self.attn_implementation != VERL_DEFAULT_ATTN:
            overrides.append(f"{RL_ATTN_KEY}={self.attn_implementation}")
        overrides.append(f"{RL_TORCH_COMPILE_KEY}={self.use_torch_compile}")
        if self.ray_num_cpus is not None:
            overrides.append(f"{RL_RAY_NUM_CPUS_KEY}={self.ray_num_cpus}")
        return overrides

    def properties(self, dev_root: str | os.PathLike[str] = "/dev") -> dict[str, Any]:
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
            "available": self.is_available(),
            "device_count": self.device_count(dev_root),
        }


@dataclass(frozen=True)
class NpuPlatform(Platform):
    name: str = "npu"
    verl_device: str = "npu"
    torch_module_name: str = "npu"
    dist_backend: str = "hccl"
    visible_devices_env: str | None = "ASCEND_RT_VISIBLE_DEVICES"
    ray_resource: str = "NPU"
    # transformers routes flash_attention_2 to its NPU integration (npu_fusion_attention); flash_attn itself is absent.
    attn_implementation: str = "flash_attention_2"
    # Every Ascend recipe disables torch.compile; dynamo on torch_npu is not worth the risk.
    use_torch_compile: bool = False

    def torch_module(self) -> ModuleType:
        torch_npu, status = import_torch_npu()
        if torch_npu is None:
            raise RuntimeError(f"torch_npu unavailable: {status}")
        return _npu_namespace(torch_npu)

    def _torch_count(self) -> int | None:
        """Devices torch_npu reports, or None when torch_npu is unusable (so callers can fall back)."""
        torch_npu, _ = import_torch_npu()
        if torch_npu is None:
            return None
        try:
            npu = _npu_namespace(torch_npu)
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
            return _count_visible(mask)
        counted = self._torch_count()
        if counted is not None:
            return counted
        return count_davinci(dev_root)


@dataclass(frozen=True)
class CudaPlatform(Platform):
    name: str = "cuda"
    verl_device: str = "cuda"
    torch_module_name: str = "cuda"
    dist_backend: str = "nccl"
    visible_devices_env: str | None = "CUDA_VISIBLE_DEVICES"
    ray_resource: str = "GPU"
    attn_implementation: str = "flash_attention_2"
    use_torch_compile: bool = True

    def is_available(self) -> bool:
        import torch

        return torch.cuda.is_available()

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        import torch

        return torch.cuda.device_count()


@dataclass(frozen=True)
class CpuPlatform(Platform):
    name: str = "cpu"
    verl_device: str = "cpu"
    torch_module_name: str = "cpu"
    dist_backend: str = "gloo"
    visible_devices_env: str | None = None
    ray_resource: str = "CPU"
    attn_implementation: str = "sdpa"
    # Inductor costs ~35 s on the first step on CPU, more than a whole smoke run's training.
    use_torch_compile: bool = False
    fsdp_strategy: str | None = "fsdp2"
    ray_num_cpus: int | None = CPU_RAY_NUM_CPUS

    def is_available(self) -> bool:
        return True

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        return os.cpu_count() or 1


NPU = NpuPlatform()
CUDA = CudaPlatform()
CPU = CpuPlatform()
PLATFORMS: dict[str, Platform] = {p.name: p for p in (NPU, CUDA, CPU)}


@dataclass(frozen=True)
class HardwareProfile:
    """A machine type as data: which platform, how many devices per node, how much memory each."""

    name: str
    platform: str
    devices_per_node: int | None
    memory_gb_per_device: int | None
    note: str


PROFILES: dict[str, HardwareProfile] = {
    "a2": HardwareProfile("a2", "npu", 8, 64, "Atlas A2 (910B): 8 NPUs per node"),
    "a3": HardwareProfile("a3", "npu", 16, 64, "Atlas A3: 8 chips x 2 dies = 16 logical NPUs per node"),
    "cuda": HardwareProfile("cuda", "cuda", 8, 80, "8 x 80 GB GPUs (A100/H100 class)"),
    "cpu": HardwareProfile("cpu", "cpu", None, None, "plain CPU: smoke tests; ranks are processes, not devices"),
}


def detect() -> Platform:
    """The platform this process should use: KIT_DEVICE if set, else npu, then cuda, then cpu.

    NPU is probed before CUDA because an Ascend image may carry a CUDA-enabled torch build that reports no GPU, while
    the reverse (torch_npu on a GPU box) does not happen in practice.
    """
    forced = os.environ.get(OVERRIDE_ENV, "").strip().lower()
    if forced:
        if forced not in PLATFORMS:
            raise ValueError(
                f"{OVERRIDE_ENV}={os.environ[OVERRIDE_ENV]!r} is not a platform; allowed: {', '.join(PLATFORMS)}"
            )
        platform = PLATFORMS[forced]
        if not platform.is_available():
            warnings.warn(
                f"{OVERRIDE_ENV}={forced} forces a platform that is not available here; commands will be "
                "generated for it, but running them on this machine will fail",
                RuntimeWarning,
                stacklevel=2,
            )
        return platform
    for platform in (NPU, CUDA):
        if platform.is_available():
            return platform
    return CPU


@functools.cache
def current_platform() -> Platform:
    """Cached :func:`detect`, like vLLM's ``current_platform``: probing torch_npu and CUDA is not free."""
    return detect()


def guess_hardware(platform: Platform, dev_root: str | os.PathLike[str] = "/dev") -> str:
    """Which profile the platform most likely runs on; used as the default for ``--hw``.

    For NPU the SoC name decides (Ascend910B* = A2, Ascend910_93* = A3); without it, more than 8 davinci nodes means A3.
    """
    if platform.name != "npu":
        return platform.name
    torch_npu, _ = import_torch_npu()
    if torch_npu is not None:
        try:
            soc = str(_npu_namespace(torch_npu).get_device_name(0))
        except Exception:  # noqa: BLE001
            soc = ""
        if soc.startswith("Ascend910_93"):
            return "a3"
        if soc.startswith("Ascend910B"):
            return "a2"
    a2_devices = PROFILES["a2"].devices_per_node or 0
    return "a3" if count_davinci(dev_root) > a2_devices else "a2"


def _platform_for(hw: str | None) -> Platform:
    return PLATFORMS[PROFILES[hw].platform] if hw else current_platform()


def _format_value(value: Any) -> str:
    return "none" if value is None else str(value)


def _cmd_detect(args: argparse.Namespace) -> int:
    platform = current_platform()
    props = platform.properties(args.dev_root)
    props["source"] = OVERRIDE_ENV if os.environ.get(OVERRIDE_ENV, "").strip() else "auto"
    props["hardware"] = guess_hardware(platform, args.dev_root)
    props["torch_npu"] = import_torch_npu()[1]
    if args.json:
        print(json.dumps(props, indent=2))
    else:
        for key, value in props.items():
            print(f"{key}: {_format_value(value)}")
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    hw = args.hw or guess_hardware(current_platform())
    header = f"retool-npu-kit environment: phase={args.phase} hw={hw} (python -m npu_kernels.device env)"
    sys.stdout.write(render_shell(preset(args.phase, hw), header=header))
    return 0


def _cmd_overrides(args: argparse.Namespace) -> int:
    for override in _platform_for(args.hw).verl_overrides(args.phase):
        print(override)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m npu_kernels.device",
        description="Detect npu/cuda/cpu and print what verl needs on it. Set KIT_DEVICE=npu|cuda|cpu to force one.",
    )
    parser.add_argument("--json", action="store_true", help="detect: print the properties as JSON")
    parser.add_argument("--dev-root", default="/dev", help="where to count davinci device nodes (default /dev)")
    sub = parser.add_subparsers(dest="command")

    det = sub.add_parser("detect", help="print the detected platform, one 'key: value' per line (default command)")
    # SUPPRESS: a subparser default would overwrite a value given before the subcommand.
    det.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the properties as JSON")
    det.add_argument("--dev-root", default=argparse.SUPPRESS, help="where to count davinci device nodes")

    env = sub.add_parser("env", help="print 'export NAME=value  # reason' lines for source/eval")
    env.add_argument("--phase", required=True, choices=PHASES)
    env.add_argument("--hw", choices=HARDWARE, help="hardware profile (default: guessed from the detected platform)")

    ovr = sub.add_parser("overrides", help="print the Hydra overrides verl needs, one per line")
    ovr.add_argument("--phase", required=True, choices=PHASES)
    ovr.add_argument("--hw", choices=HARDWARE, help="take the platform from this profile instead of detecting it")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {None: _cmd_detect, "detect": _cmd_detect, "env": _cmd_env, "overrides": _cmd_overrides}
    try:
        return handlers[args.command](args)
    except ValueError as exc:  # e.g. a bad KIT_DEVICE: one clear line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
