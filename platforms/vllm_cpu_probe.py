"""vLLM's platform probe without importing IPEX on a torch built without XPU: the cpu platform's RL start-up cut.

Why: vLLM 0.11 picks its platform by running every built-in probe (``builtin_platform_plugins``,
``vllm/platforms/__init__.py:172-190``), and the XPU probe imports ``intel_extension_for_pytorch`` just to ask
``torch.xpu.is_available()`` (:125-148). In the kit's CPU venv that import alone costs 4.4 s of CPU (``import
intel_extension_for_pytorch`` 6.7 s vs ``import torch`` 2.3 s), and an RL run paid it in every process that reads
vLLM's config: the TaskRunner, each vLLM server and its engine-core child, the agent-loop worker. On 2 cores those
imports sit on the path to the first step.

A torch built without XPU support (``torch.xpu._is_compiled()`` False: the CPU venv's torch 2.8.0) can never report
an XPU, so the probe's answer (no XPU platform) is known without the import; where torch has XPU support the probe
runs as vLLM wrote it. vLLM's own use of IPEX is untouched: its CPU attention backend imports IPEX's kernels itself
(``vllm/v1/attention/backends/cpu_attn.py:22-28``) in the processes that run the model.

How it reaches every process: ``VERL_USE_EXTERNAL_MODULES`` (verl imports the modules it names first,
``verl/__init__.py:40-43``; the cpu platform's RL environment names this one). Importing it patches ``vllm.platforms``
when something first imports it (:mod:`.post_import`), so a process that never touches vLLM pays nothing.
Measured: ``tests/test_cpu_startup.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from platforms.post_import import when_imported

PLATFORMS_MODULE = "vllm.platforms"
#: The probe vLLM registers for Intel GPUs in ``builtin_platform_plugins``.
XPU_PROBE = "xpu"
#: Marks the replaced probe, so a second patch changes nothing.
_PATCHED = "_kit_skips_ipex"


def torch_has_xpu() -> bool:
    """Whether this torch was built with XPU support (only then can vLLM's XPU probe find an Intel GPU)."""
    import torch

    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu._is_compiled())


def patch(platforms: ModuleType) -> bool:
    """Replace the XPU probe in ``platforms`` (``vllm.platforms``); False when already patched or not applicable."""
    plugins = getattr(platforms, "builtin_platform_plugins", None)
    original: Callable[[], str | None] | None = plugins.get(XPU_PROBE) if isinstance(plugins, dict) else None
    if original is None or getattr(original, _PATCHED, False):
        return False

    def xpu_probe() -> str | None:
        if not torch_has_xpu():
            return None  # vLLM's probe would import IPEX, then find torch.xpu unavailable: the same answer
        return original()

    setattr(xpu_probe, _PATCHED, True)
    plugins[XPU_PROBE] = xpu_probe
    return True


def install() -> str:
    """Patch ``vllm.platforms`` now if it is imported ("now"), else right after its first import ("later")."""
    return when_imported(PLATFORMS_MODULE, patch)


install()
