"""Platforms: the one place that knows npu / cuda / cpu differences (platforms, hardware profiles, environments).

* :mod:`~platforms.base`: the :class:`Platform` interface (verl device, torch module, dist backend,
  visible-devices variable, Ray resource and start args, attention, compute dtype, install root and setup scripts,
  what a container needs to reach the devices and the image's run script, socket-interface variables, kernel
  backends, pinned stack, environment per phase);
* :mod:`~platforms.npu`, :mod:`~.cuda`, :mod:`~.cpu`: one subclass each;
* :mod:`~platforms.profiles`: :class:`HardwareProfile`, the registries (:data:`PROFILES`, the only list
  of hardware names: CLI choices, help and docs are generated from it or checked against it by
  tests/test_profile_names.py), :func:`detect` / :func:`current_platform` and :func:`default_hardware` /
  :func:`default_profile_on`, the one default every entry point uses;
* :mod:`~platforms.env`: environment entries as data (:class:`EnvVar`);
* :mod:`~platforms.images`: the ``docker build`` command of a profile's image and the ``docker run``
  arguments of a platform's :class:`DeviceAccess` (``docker/build.sh``; stdlib only, it runs on hosts);
* :mod:`~platforms.netprobe`: this host's interfaces and addresses and the route toward a peer, read
  the same way by the multi-node launchers and the doctor (stdlib only);
* ``python -m platforms``: the CLI shell scripts ask for facts (:mod:`~platforms.cli`).

Beside the platform layer, and below everything else of the kit: :mod:`~platforms.pins` (``pins.env``),
:mod:`~platforms.cli_errors` (every console script's error boundary), :mod:`~platforms.ascend_probe` (readers of what
an Ascend host says) and :mod:`platforms.doctor` (``retool-doctor``). Nothing outside the platform layer branches on
a platform or hardware-profile name. Importing it costs no torch (README.md in this folder).
"""

from platforms.base import (
    VERL_DEFAULT_ATTN,
    VERL_DEFAULT_DTYPE,
    DeviceAccess,
    HostMount,
    PinnedPackage,
    Platform,
    RolloutEngine,
    dtype_overrides,
)
from platforms.cpu import TCMALLOC_SWITCH, find_tcmalloc
from platforms.env import PHASES, EnvVar, applied, render_shell
from platforms.npu import count_davinci, import_torch_npu
from platforms.profiles import (
    CPU,
    CUDA,
    NPU,
    PLATFORM_OVERRIDE_ENV,
    PLATFORMS,
    PROFILE_ENV,
    PROFILE_NAMES,
    PROFILES,
    REFERENCE_PROFILE,
    HardwareProfile,
    Image,
    UnknownHardwareError,
    current_platform,
    default_hardware,
    default_profile_on,
    detect,
    get_profile,
    kit_hw,
    machine_profile,
    profile_of,
)

__all__ = [
    "CPU",
    "CUDA",
    "NPU",
    "PHASES",
    "PLATFORMS",
    "PLATFORM_OVERRIDE_ENV",
    "PROFILES",
    "PROFILE_ENV",
    "PROFILE_NAMES",
    "REFERENCE_PROFILE",
    "TCMALLOC_SWITCH",
    "VERL_DEFAULT_ATTN",
    "VERL_DEFAULT_DTYPE",
    "DeviceAccess",
    "EnvVar",
    "HardwareProfile",
    "HostMount",
    "Image",
    "PinnedPackage",
    "Platform",
    "RolloutEngine",
    "UnknownHardwareError",
    "applied",
    "count_davinci",
    "current_platform",
    "default_hardware",
    "default_profile_on",
    "detect",
    "dtype_overrides",
    "find_tcmalloc",
    "get_profile",
    "import_torch_npu",
    "kit_hw",
    "machine_profile",
    "profile_of",
    "render_shell",
]
