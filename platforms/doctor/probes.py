"""The doctor's types: where it looks (:class:`Probes`), what was asked (:class:`Options`), what every check sees
(:class:`Context`), one report line (:class:`Result`) and the whole report (:class:`Report`).

Why probes: every machine read goes through :class:`Probes` (environment, /dev root, CANN root, npu-smi binary, Ray
resources, the Python path used for package metadata, the network), so tests can stand up a whole fake A3 node and
plant one fault at a time. Installed packages are read from their metadata and located without importing them:
the doctor must run where torch, vLLM or verl are broken, and importing verl or vllm_ascend has side effects.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import platforms as device
from platforms import HardwareProfile, Platform, pins, stacks
from platforms.netprobe import route_source, run_ip_addr

KIT_ROOT = Path(__file__).resolve().parents[2]

OK, WARN, FAIL, SKIP, INFO = "OK", "WARN", "FAIL", "SKIP", "INFO"
STATUSES = (OK, WARN, FAIL, SKIP, INFO)


@dataclass
class Result:
    """One line of the report. ``check`` is a stable id (group.item) that tests and scripts can match on."""

    check: str
    status: str
    summary: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status in (WARN, FAIL) and not self.fix:
            raise ValueError(f"{self.check}: a {self.status} must say how to fix it")


def ok(check: str, summary: str, **details: Any) -> Result:
    return Result(check, OK, summary, details=details)


def info(check: str, summary: str, **details: Any) -> Result:
    return Result(check, INFO, summary, details=details)


def skip(check: str, summary: str) -> Result:
    return Result(check, SKIP, summary)


def warn(check: str, summary: str, fix: str, **details: Any) -> Result:
    return Result(check, WARN, summary, fix, details)


def fail(check: str, summary: str, fix: str, **details: Any) -> Result:
    return Result(check, FAIL, summary, fix, details)


#: The namespaces the sandbox's workers ask bwrap for (sandbox/isolation.py bwrap_prefix): ipc, pid, net, uts, a
#: fresh /proc and /dev; as root no user namespace (it keeps per-slot uids) and every capability dropped, otherwise a
#: user namespace. A probe that asked for more than the sandbox does said OK where the sandbox fell back (seen in the
#: CPU image: a user namespace was allowed, root's namespaces were not).
BWRAP_COMMON = ("--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-ipc", "--unshare-pid")
BWRAP_COMMON += ("--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent")


def bwrap_probe_args(root: bool) -> tuple[str, ...]:
    return (*BWRAP_COMMON, *(("--cap-drop", "ALL") if root else ("--unshare-user",)), "true")


def probe_bwrap(timeout_s: float = 20.0) -> str | None:
    """None when bwrap made its namespaces; else why not (bwrap's own last line, or that it is missing)."""
    binary = shutil.which("bwrap")
    if binary is None:
        return "bwrap is not installed"
    try:
        args = bwrap_probe_args(os.geteuid() == 0)
        proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"bwrap exited {proc.returncode}"


def _default_env() -> dict[str, str]:
    return dict(os.environ)


#: Where the CANN checks look by default: the NPU platform's install root (set there; ``or`` only for the type).
CANN_ROOT = Path(device.NPU.install_root or "/")


@dataclass
class Probes:
    """Where the doctor looks. Defaults read the real machine; tests replace any of them."""

    env: Mapping[str, str] = field(default_factory=_default_env)
    dev_root: Path = Path("/dev")
    cann_root: Path = CANN_ROOT
    #: npu-smi binary; None = search the PATH of ``env``.
    npu_smi: str | None = None
    #: The patch series to compare verl with; None = the checked stack's (``Options.stack.patch_dir``).
    patches_dir: Path | None = None
    #: A JSON file with Ray's resources of this node ({"NPU": 16, ...}) instead of asking a running cluster.
    ray_resources_json: Path | None = None
    #: Ray address to query; None = RAY_ADDRESS from ``env``, else "auto" when ``ray_state_file`` exists.
    ray_address: str | None = None
    ray_state_file: Path = Path("/tmp/ray/ray_current_cluster")
    #: Directories searched for package metadata and package sources; None = sys.path of this interpreter.
    search_path: list[str] | None = None
    detect_platform: Callable[[], Platform] = device.detect
    #: The text of ``ip -o -4 addr show`` (None: not available here).
    ip_addr_text: Callable[[], str | None] = run_ip_addr
    #: The local address used to reach a peer (None: no route).
    local_address: Callable[[str], str | None] = route_source
    command_timeout_s: float = 30.0
    #: None when bubblewrap can make the sandbox's namespaces here, else why not (platforms/doctor/bwrap.py).
    bwrap_probe: Callable[[], str | None] = probe_bwrap
    #: The file a stand-in base image carries (docker/standin/; platforms/doctor/image.py).
    standin_marker: Path = Path("/etc/retool-kit-standin.json")


@dataclass
class Options:
    """What the user asked about (as opposed to where to look, which is :class:`Probes`)."""

    phase: str = "rl"
    #: Hardware profile name; None = :func:`platforms.default_hardware`.
    profile: str | None = None
    only: frozenset[str] | None = None
    #: Sandbox to ping; None = RETOOL_SANDBOX_URL of the probed environment, as the recipes read it.
    sandbox_url: str | None = None
    model: Path | None = None
    data: list[Path] = field(default_factory=list)
    ckpt_dir: Path | None = None
    #: Free GB --ckpt-dir must have; None = one checkpoint of ``model`` (platforms/doctor/disk.py), else assumed.
    min_free_gb: float | None = None
    #: This node's address as the other nodes reach it; None = the source address of the route to MASTER_ADDR.
    node_ip: str | None = None
    #: The stack whose pins and patch series the machine is held to (resolved once by the doctor's entry point).
    stack: stacks.Stack = field(default_factory=lambda: stacks.REFERENCE)


@dataclass
class Context:
    """What every check sees. ``platform`` is the profile's platform: the stack is checked for what the run targets,
    not for what happens to be detected (``detected``)."""

    probes: Probes
    opts: Options
    detected: Platform
    detected_note: str
    profile: HardwareProfile
    #: /dev/davinciN nodes (0 where there are none); meaningful where the platform has a host stack.
    davinci: int
    #: Devices the detected platform's torch module reports (None on a platform without devices to mask).
    torch_devices: int | None

    @property
    def platform(self) -> Platform:
        return self.profile.platform

    @property
    def stack(self) -> stacks.Stack:
        return self.opts.stack


@dataclass
class Report:
    """The run: the detected platform, the profile checked for and its platform, the phase, the lines."""

    detected: str
    profile: str
    platform: str
    phase: str
    results: list[Result]

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status == FAIL for r in self.results) else 0

    def counts(self) -> dict[str, int]:
        return {status: sum(r.status == status for r in self.results) for status in STATUSES}

    def as_dict(self) -> dict[str, Any]:
        """The JSON report. Its keys are what scripts already read: ``platform`` is the detected platform,
        ``hardware`` the profile and ``target`` the profile's platform."""
        return {
            "platform": self.detected,
            "hardware": self.profile,
            "target": self.platform,
            "phase": self.phase,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "pins_file": str(pins.PINS_FILE),
            "checks": [asdict(r) for r in self.results],
        }


# -- facts the checks share, asked of the platform API instead of kept here


def has_host_stack(platform: Platform) -> bool:
    """Whether the platform's device stack lives on the host outside Python: setup scripts to source (CANN, ATB),
    device nodes under /dev and a host tool (npu-smi). The checks of those belong to such platforms only."""
    return bool(platform.setup_scripts)


def run_script(platform: Platform) -> str:
    """The kit's ``docker run`` wrapper for a platform's image (the platform's fact), for fix lines."""
    return platform.run_script or "the kit image"


def image_phrase(profile: HardwareProfile, stack: stacks.Stack) -> str:
    """The kit image that carries ``stack``'s pinned base for ``profile``, as a noun phrase for fix lines."""
    if profile.image is None:
        return f"{stack.venv_name}/ from bash scripts/test.sh{stack.cli_option} (the pinned CPU stack)"
    return (
        f"the kit image (docker/build.sh --hw {profile.name}{stack.cli_option}, based on {profile.image.base(stack)})"
    )


def env_fix_line(profile: HardwareProfile, phase: str, stack: stacks.Stack) -> str:
    return f"source <({profile.env_command(phase, stack)})"


def dist_version(name: str, search_path: list[str] | None) -> str | None:
    """Version of the first installed distribution called ``name`` on the search path (like ``pip show``)."""
    for dist in importlib.metadata.distributions(name=name, path=search_path if search_path is not None else sys.path):
        return dist.version
    return None


def find_package_dir(name: str, search_path: list[str] | None) -> Path | None:
    """Where a top-level package lives, without importing it (importing verl or vllm_ascend has side effects)."""
    if search_path is not None:
        spec = importlib.machinery.PathFinder.find_spec(name, search_path)
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
