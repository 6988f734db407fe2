"""Hardware profiles (:data:`PROFILES`): a platform plus the node's shape, memory per device and image.

Two ideas, named once: the *platform* is what the code runs on (:data:`PLATFORMS`, :mod:`platforms.base`);
a *hardware profile* is a platform plus node shape and recipe scaling (the recipes' ``scaling/<recipe>/<profile>.yaml``
and the launcher's ``--profile``/``--hw``). A2 and A3 are one platform, two profiles.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from platforms.base import Platform
from platforms.cli_errors import UsageError
from platforms.cpu import CpuPlatform
from platforms.cuda import CudaPlatform
from platforms.env import EnvVar
from platforms.npu import NpuPlatform, count_davinci, soc_name

if TYPE_CHECKING:
    from platforms.stacks import Stack

#: Forces a platform (a name in :data:`PLATFORMS`), e.g. to dry-run NPU launch commands on a laptop, or to keep a
#: GPU box on CPU.
PLATFORM_OVERRIDE_ENV = "KIT_DEVICE"
#: The hardware profile every entry point uses when none is given on its command line.
PROFILE_ENV = "KIT_HW"


class UnknownHardwareError(UsageError, ValueError):
    """A profile or platform name (``--hw``, ``KIT_HW``, ``KIT_DEVICE``) the kit does not know.

    A :class:`~platforms.cli_errors.UsageError`, so every entry point's boundary prints it as one line, exit 2,
    with no conversion at the call site; still a ``ValueError`` for library callers that catch that.
    """


NPU = NpuPlatform()
CUDA = CudaPlatform()
CPU = CpuPlatform()
#: The registry: platform name -> the platform.
PLATFORMS: dict[str, Platform] = {p.name: p for p in (NPU, CUDA, CPU)}


@dataclass(frozen=True)
class Image:
    """The kit image of a profile: its Dockerfile, the pins.env keys of its base image, and the pins its Dockerfile
    takes as build args (the Dockerfiles hold no version; tests/docker checks both sides)."""

    dockerfile: str
    base_repo_key: str
    base_tag_key: str
    #: Prefix of the default kit image tag before the base tag (``retool-npu-kit:<prefix><base tag>``).
    tag_prefix: str = ""
    #: Build-arg names the Dockerfile's ``FROM`` reads the base repo and tag from (default: the pins.env keys).
    base_args: tuple[str, str] | None = None
    #: pins.env keys passed as build args of the same name (labels, checks), after the base image's.
    pin_args: tuple[str, ...] = ()

    def base(self, stack: Stack) -> str:
        return f"{stack.pin(self.base_repo_key)}:{stack.pin(self.base_tag_key)}"

    def kit_tag(self, stack: Stack) -> str:
        """The kit's image tag on ``stack``: the base's tag and the stack's suffix (the CPU base is the same Python
        image on both stacks: without the suffix the two builds would take one name)."""
        return f"retool-npu-kit:{self.tag_prefix}{stack.pin(self.base_tag_key)}{stack.image_tag_suffix}"

    def pinned_build_args(self, stack: Stack) -> dict[str, str]:
        """Every build arg whose value comes from ``stack``'s pins: the base image's, then :attr:`pin_args`."""
        repo_arg, tag_arg = self.base_args or (self.base_repo_key, self.base_tag_key)
        out = {repo_arg: stack.pin(self.base_repo_key), tag_arg: stack.pin(self.base_tag_key)}
        return out | {key: stack.pin(key) for key in self.pin_args}


@dataclass(frozen=True)
class HardwareProfile:
    """A machine type as data: its platform, how many devices per node, how much memory each, its image."""

    name: str
    platform: Platform
    devices_per_node: int | None
    memory_gb_per_device: int | None
    note: str
    image: Image | None = None

    def env(self, phase: str, stack: Stack, environ: Mapping[str, str] | None = None) -> list[EnvVar]:
        """The process environment for ``phase`` on this profile (the platform's; A2 and A3 share one table)."""
        return self.platform.env(phase, stack, environ)

    def env_problems(self, env: Mapping[str, str], phase: str) -> list[str]:
        return self.platform.env_problems(env, phase)

    def verl_overrides(self, phase: str, stack: Stack) -> list[str]:
        """The platform's overrides plus the node shape (``trainer.n_gpus_per_node``) where the profile has one."""
        out = self.platform.verl_overrides(phase, stack)
        if self.devices_per_node:
            out.append(f"trainer.n_gpus_per_node={self.devices_per_node}")
        return out

    def env_command(self, phase: str, stack: Stack) -> str:
        """The command line that prints this profile's environment on ``stack`` (for tables and fix hints)."""
        return f"python -m platforms env --phase {phase} --hw {self.name}{stack.cli_option}"


_IMAGE_PINS = ("VERL_VERSION", "VLLM_VERSION")
_NPU_IMAGE_PINS = (*_IMAGE_PINS, "CANN_VERSION", "VLLM_ASCEND_VERSION", "NPU_TORCH_VERSION", "TORCH_NPU_VERSION")
_NPU_BASE_ARGS = ("VLLM_ASCEND_IMAGE", "VLLM_ASCEND_TAG")
_NPU_IMAGE_A2 = Image(
    "docker/Dockerfile.npu", "VLLM_ASCEND_IMAGE", "VLLM_ASCEND_TAG_A2", "", _NPU_BASE_ARGS, _NPU_IMAGE_PINS
)
_NPU_IMAGE_A3 = Image(
    "docker/Dockerfile.npu", "VLLM_ASCEND_IMAGE", "VLLM_ASCEND_TAG_A3", "", _NPU_BASE_ARGS, _NPU_IMAGE_PINS
)
_CUDA_IMAGE = Image("docker/Dockerfile.cuda", "VLLM_CUDA_IMAGE", "VLLM_CUDA_TAG", "cuda-", pin_args=_IMAGE_PINS)
# Same Dockerfile and base; its own tag, since the image records the profile it was built for (KIT_HW).
_H200_IMAGE = Image("docker/Dockerfile.cuda", "VLLM_CUDA_IMAGE", "VLLM_CUDA_TAG", "h200-", pin_args=_IMAGE_PINS)
_CPU_IMAGE = Image(
    "docker/Dockerfile.cpu", "CPU_BASE_IMAGE", "CPU_BASE_TAG", "cpu-", pin_args=(*_IMAGE_PINS, "CPU_TORCH_VERSION")
)

PROFILES: dict[str, HardwareProfile] = {
    "a2": HardwareProfile(
        "a2",
        NPU,
        8,
        64,
        "Atlas A2 (910B): 8 NPUs per node; configs published (verl's Qwen2.5-7B ReTool pair), no results",
        _NPU_IMAGE_A2,
    ),
    "a3": HardwareProfile("a3", NPU, 16, 64, "Atlas A3: 8 chips x 2 dies = 16 logical NPUs per node", _NPU_IMAGE_A3),
    "cuda": HardwareProfile("cuda", CUDA, 8, 80, "8 x 80 GB GPUs (A100/H100 class)", _CUDA_IMAGE),
    # One 8 x H200 box: the single-node layout of Bojie Li's ReTool walkthrough (github bojieli/verl,
    # recipe/retool/run_qwen2-32b_{sft,dapo}.sh: nnodes=1, 8 GPUs), the box people reproduce the 32B recipe on.
    "h200": HardwareProfile("h200", CUDA, 8, 141, "8 x 141 GB H200 GPUs in one node", _H200_IMAGE),
    "cpu": HardwareProfile(
        "cpu", CPU, None, None, "plain CPU: smoke tests; ranks are processes, not devices", _CPU_IMAGE
    ),
}
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)


def get_profile(name: str) -> HardwareProfile:
    """A profile by name, with an error that lists the choices."""
    if name not in PROFILES:
        raise UnknownHardwareError(f"unknown hardware profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


@functools.cache
def warn_once(text: str) -> None:
    """One ``kit: warning: ...`` line on stderr, once a process: issue 44 found Python's RuntimeWarning format (the
    file, the line number and the source line of the call) in front of every command run with KIT_DEVICE=npu."""
    print(f"kit: warning: {text}", file=sys.stderr, flush=True)


def detect(environ: Mapping[str, str] | None = None) -> Platform:
    """The platform this process should use: KIT_DEVICE if set, else npu, then cuda, then cpu.

    NPU is probed before CUDA because an Ascend image may carry a CUDA-enabled torch build that reports no GPU, while
    the reverse (torch_npu on a GPU box) does not happen in practice.
    """
    environ = os.environ if environ is None else environ
    forced = environ.get(PLATFORM_OVERRIDE_ENV, "").strip().lower()
    if forced:
        if forced not in PLATFORMS:
            raise UnknownHardwareError(
                f"{PLATFORM_OVERRIDE_ENV}={environ[PLATFORM_OVERRIDE_ENV]!r} is not a platform; "
                f"allowed: {', '.join(PLATFORMS)}"
            )
        platform = PLATFORMS[forced]
        if not platform.is_available():
            warn_once(
                f"{PLATFORM_OVERRIDE_ENV}={forced} forces a platform that is not available here; commands will be "
                "generated for it, but running them on this machine will fail"
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


def profile_of(platform: Platform, dev_root: str | os.PathLike[str] = "/dev") -> str:
    """The profile a machine of ``platform`` most likely is.

    For NPU the SoC name decides (Ascend910B* = A2, Ascend910_93* = A3); without it, more NPU device nodes than an
    A2 node has means A3.
    """
    if platform is not NPU:
        return platform.name
    soc = soc_name()
    if soc.startswith("Ascend910_93"):
        return "a3"
    if soc.startswith("Ascend910B"):
        return "a2"
    return "a3" if count_davinci(dev_root) > (PROFILES["a2"].devices_per_node or 0) else "a2"


#: The profile the recipes' reference runs were made on (Ascend sample and verl's scripts, scaled to one A3 node).
REFERENCE_PROFILE = "a3"


def kit_hw(environ: Mapping[str, str] | None = None) -> HardwareProfile | None:
    """The profile ``KIT_HW`` names, or None when it is unset; a name that is no profile is an error naming it."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(PROFILE_ENV, "").strip()
    if not chosen:
        return None
    if chosen not in PROFILES:
        raise UnknownHardwareError(
            f"{PROFILE_ENV}: unknown hardware profile {chosen!r}; choose one of {', '.join(PROFILES)}"
        )
    return PROFILES[chosen]


def machine_profile(platform: Platform, dev_root: str | os.PathLike[str] = "/dev", *, devices_here: bool = True) -> str:
    """This machine's profile on ``platform`` (:func:`profile_of`), or, with no devices here to go by (planning from
    a laptop or a login node), the reference profile the recipes' reference runs were made on."""
    return profile_of(platform, dev_root) if devices_here else REFERENCE_PROFILE


def default_hardware(
    environ: Mapping[str, str] | None = None,
    dev_root: str | os.PathLike[str] = "/dev",
    platform: Platform | None = None,
    *,
    planning: bool = False,
) -> str:
    """The hardware profile of every entry point that was not given one.

    One rule everywhere (launcher, Ray wrapper, hand-off, doctor, images, smoke, ``env``): ``KIT_HW`` if set; else
    this machine's profile (:func:`profile_of`: the NPU profile by SoC, else the platform's name). The one refinement
    is ``planning``: a dry run on a machine without NPU or GPU plans the reference profile (a3) rather than the CPU
    smoke, because planning a cluster run from a laptop is what a dry run there is for; pass ``--hw cpu`` for the
    smoke's plan.
    Commands bound to one platform use :func:`default_profile_on`, the same rule within that platform.
    """
    chosen = kit_hw(environ)
    if chosen is not None:
        return chosen.name
    platform = platform or current_platform()
    return machine_profile(platform, dev_root, devices_here=not (planning and not platform.has_devices))


def default_profile_on(
    platform: Platform,
    environ: Mapping[str, str] | None = None,
    dev_root: str | os.PathLike[str] = "/dev",
    *,
    choices: list[HardwareProfile] | None = None,
    devices_here: bool = True,
    refuse_other: str = "",
) -> HardwareProfile:
    """:func:`default_hardware` for a command bound to ``platform`` (the smoke's ``--platform``, the image scripts
    docker/run_<platform>.sh), among ``choices`` (default: the platform's profiles).

    ``KIT_HW`` if it is one of ``choices``. One of another platform is ignored (a shell's ``KIT_HW=a3`` must not make
    a CPU smoke an NPU one: tests/smoke/test_cli.py) unless ``refuse_other`` names what the command runs, then it is
    an error (running the wrong image is a mistake: tests/docker/test_run_scripts.py). Else :func:`machine_profile`
    (``devices_here=False``: a login node planning a run, the reference profile), kept to ``choices``.
    """
    choices = choices or [p for p in PROFILES.values() if p.platform is platform]
    chosen = kit_hw(environ)
    if chosen is not None and chosen in choices:
        return chosen
    if chosen is not None and refuse_other:
        names = ", ".join(p.name for p in choices)
        raise UsageError(
            f"{PROFILE_ENV}={chosen.name} is a {chosen.platform.name} profile; {refuse_other} ({names}): pass --hw "
            f"or unset {PROFILE_ENV}"
        )
    found = PROFILES[machine_profile(platform, dev_root, devices_here=devices_here)]
    return found if found in choices else choices[0]
