"""The kit's plain-CPU platform for verl >= 0.9's platform registry, and the env that selects it.

Why: verl 0.9 asks one object, ``verl.plugin.platform.get_platform()``, for the device name, the torch device module,
the collective backend, the Ray resource and the visibility variable (verl/utils/device.py:60-130 in 0.9.1). It ships
nvidia, huawei and rocm platforms only and falls back to nvidia when none is detected (verl/plugin/platform/
platform_manager.py:113-117), so a CPU run asks Ray for GPUs and torch for CUDA. verl lets a plugin register more
(``PlatformRegistry.register``, platform_manager.py:43-70) and picks one by ``VERL_PLATFORM`` (:92-96). This module
registers ``cpu`` when it is imported inside a verl >= 0.9 process; the kit imports it through
``VERL_USE_EXTERNAL_MODULES``, which verl imports in its package ``__init__`` (verl/__init__.py:49-52), that is in every
process that imports verl, before the platform is first resolved (the first ``get_platform()`` call is lazy).

Under verl 0.6.1 (the kit's reference stack) or without verl, importing this module does nothing: no verl import,
no registration. What no platform hook reaches is patched in ``patches/0.9.1/``.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from platforms.verl_selectors import (  # noqa: F401  (re-exported: the plugin's own names)
    ENGINE_DEVICE,
    FIRST_REGISTRY_VERSION,
    MODULE,
    PLATFORM_NAME,
    TRANSFER_QUEUE_UNITS_KEY,
    VISIBLE_DEVICES_ENV,
    external_modules,
    has_platform_registry,
    rl_overrides,
    verl_env,
    verl_version,
)


def _registry_loaded() -> bool:
    """True when the running verl is >= 0.9: its registry module is loaded already, or its metadata says so."""
    return "verl.plugin.platform" in sys.modules or has_platform_registry(verl_version())


class _CpuDeviceModule:
    """``torch.cpu`` plus the accelerator-module calls verl makes through ``get_torch_device()``.

    # kit: verl 0.9.1 calls get_rng_state/set_rng_state (checkpoint save/load: verl/utils/checkpoint/
    # checkpoint_manager.py:208,219), empty_cache and memory statistics (verl/utils/memory_utils.py:47-61),
    # mem_get_info (verl/utils/profiler/performance.py:54) on ``get_torch_device()``; ``torch.cpu`` has none of
    # them. It compares equal to ``torch.cpu`` so verl's ``device == torch.cpu`` branches keep the CPU path.
    """

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch.cpu, name)

    def __eq__(self, other: object) -> bool:
        import torch

        return other is self or other is torch.cpu

    def __hash__(self) -> int:
        import torch

        return hash(torch.cpu)

    @staticmethod
    def get_rng_state(device: Any = None) -> Any:
        import torch

        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: Any, device: Any = None) -> None:
        import torch

        torch.set_rng_state(new_state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def empty_cache() -> None:
        """Nothing to release: the CPU allocator keeps no cache that verl could empty."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return 0, 0

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        """No statistics are kept on CPU."""

    @staticmethod
    def set_device(device: Any) -> None:
        """Ranks are processes, not devices: there is nothing to select."""

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """CPU ops are synchronous."""

    @staticmethod
    def device_count() -> int:
        return 1


CPU_DEVICE_MODULE = _CpuDeviceModule()


class _CpuPlatformMethods:
    """The CPU platform's answers to verl's ``PlatformBase`` (platform_npu.py is the model): plain CPU, gloo, ranks as
    processes, Ray CPUs as the only resource. A mixin so that this module defines it without importing verl;
    :func:`_platform_class` puts ``PlatformBase`` under it on verl >= 0.9."""

    device_name = PLATFORM_NAME
    vendor_name = "kit"
    device_module = CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # kit: auto-detection probes platforms in registration order (platform_manager.py:99-111); CPU is only
        # ever chosen by VERL_PLATFORM=cpu, never detected, so a GPU host that imports this plugin stays on CUDA.
        return False

    def current_device(self) -> str:
        # kit: verl places tensors with `.to(device=get_device_id())` (verl/utils/fsdp_utils.py:505-508); an int
        # means cuda:<int> to torch, so the CPU "device id" is torch.cpu.current_device()'s own answer, "cpu".
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """Ranks are processes, not devices (verl calls it per worker: verl/utils/distributed.py:74)."""

    def synchronize(self, device_index: int | None = None) -> None:
        """CPU ops are synchronous."""

    def manual_seed(self, seed: int) -> None:
        CPU_DEVICE_MODULE.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        CPU_DEVICE_MODULE.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """The CUDA caching allocator's settings have no CPU counterpart (verl/utils/device.py:143)."""

    def empty_cache(self) -> None:
        """Nothing cached to release on CPU."""

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        # kit: read at import by verl/trainer/constants_ppo.py:26; (None, None) selects no GPU-only env.
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return VISIBLE_DEVICES_ENV

    def ray_resource_name(self) -> str:
        # kit: the worker bundles ask {"CPU": 1} (verl/single_controller/ray/base.py:145-148).
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        # kit: Ray refuses "CPU" in `resources` (single_controller/ray/base.py:404-406 passes this to .options).
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    @contextmanager
    def nvtx_range(self, msg: str) -> Any:
        yield

    def profiler_start(self) -> None:
        """No device profiler on CPU."""

    def profiler_stop(self) -> None:
        """No device profiler on CPU."""

    def cudart(self) -> Any:
        return None


def _platform_class() -> type:
    """Build the platform class on the running verl's ``PlatformBase`` (only called on verl >= 0.9)."""
    from verl.plugin.platform import PlatformBase

    return type("PlatformCPU", (_CpuPlatformMethods, PlatformBase), {"__module__": __name__})


def register() -> type | None:
    """Register the CPU platform with verl's registry; None (and no import of verl) on a verl without one, or where
    the metadata says 0.9 but the package has no registry (a stand-in dist-info: the doctor's fake nodes)."""
    if not _registry_loaded():
        return None
    try:
        from verl.plugin.platform import PlatformRegistry
    except ImportError:
        return None

    existing = PlatformRegistry.get(PLATFORM_NAME)
    if existing is not None and existing.__module__ == __name__:
        return existing
    return PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())


def _drop_onednn(custom_ops: ModuleType) -> None:
    """Send vLLM's CPU linear layers down torch's own ``F.linear`` path, which keeps ``layer.weight``."""
    custom_ops._supports_onednn = False


def keep_vllm_weights_loadable() -> bool:
    """On a CPU run, keep vLLM's linear weights in place so verl can sync new weights into them.

    # kit: vLLM 0.23's CPU backend packs each linear weight into a oneDNN handle after loading and replaces
    # ``layer.weight`` with an empty tensor (vllm/model_executor/layers/utils.py:289-299, called with
    # remove_weight=True from linear.py:211-215). verl 0.9.1 syncs weights by ``model.load_weights`` into those
    # parameters (verl/workers/rollout/vllm_rollout/utils.py:405-409): "Attempted to load weight (torch.Size([64,
    # 64])) into parameter (torch.Size([0]))" and the rollout engine dies. Without oneDNN vLLM uses its fallback
    # ``F.linear(x, layer.weight)`` (utils.py:306-309), which reads whatever verl loaded. Lazy (platforms/
    # post_import.py): only processes that import vLLM pay for it.
    """
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != PLATFORM_NAME:
        return False
    from platforms.post_import import when_imported

    when_imported("vllm._custom_ops", _drop_onednn)
    return True


PlatformCPU = register()
if PlatformCPU is not None:
    keep_vllm_weights_loadable()
