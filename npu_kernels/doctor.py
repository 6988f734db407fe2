"""retool-doctor: check a machine before a ReTool run, and say how to fix what is wrong.

Why: on Ascend the expensive failures are silent or far from their cause (a CANN env not sourced before
``ray start`` makes Ray count 10 of 16 A3 dies; ``VLLM_ASCEND_ENABLE_NZ`` garbles rollouts after weight sync; a
vllm-ascend that no longer reads a variable ignores it). Each check here turns one of them into a line with a fix,
before a day of NPU time is spent.

Design:

* Every machine read goes through :class:`Probes` (environment, /dev root, CANN root, npu-smi binary, Ray resources,
  the Python path used for package metadata), so tests can stand up a whole fake A3 node and plant one fault at a time.
* No torch / torch_npu / vLLM / Ray import at module level, and versions come from package metadata, not imports:
  the doctor must run where those are broken. The platform, profiles and env rules come from
  :mod:`npu_kernels.platform` and versions from :mod:`npu_kernels.pins`; nothing here keeps a second copy.
* Exit status 0 unless a check FAILs (WARN does not fail), 2 for usage errors.

CLI (``retool-doctor`` or ``python -m npu_kernels.doctor``)::

    retool-doctor [--phase sft|rl] [--hw a2|a3|cuda|cpu] [--json] [--only GROUP,...] [--verbose]
                  [--sandbox-url URL] [--model DIR] [--data FILE ...] [--ckpt-dir DIR] [--min-free-gb N]
                  [--dev-root DIR] [--cann-root DIR] [--npu-smi PATH] [--patches-dir DIR]
                  [--ray-resources-json FILE] [--ray-address ADDR]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npu_kernels import pins
from npu_kernels import platform as device
from npu_kernels.ascend_probe import (
    package_mentions,
    parse_npu_smi_info,
    read_cann_version,
    read_driver_version,
    vllm_ascend_env_names,
)
from npu_kernels.platform import PHASES, EnvVar
from npu_kernels.platform import PROFILE_NAMES as HARDWARE

KIT_ROOT = Path(__file__).resolve().parents[1]

OK, WARN, FAIL, SKIP, INFO = "OK", "WARN", "FAIL", "SKIP", "INFO"
STATUSES = (OK, WARN, FAIL, SKIP, INFO)

#: Check groups in report order; ``--only`` takes these names.
GROUPS = ("platform", "cann", "npu-smi", "versions", "patches", "ray", "env", "sandbox", "paths", "disk")

#: HBM already in use before a run, as a fraction of the device's total, above which another job is likely holding it.
HBM_BUSY_FRACTION = 0.5
#: Sandbox round trip (median of the pings) above which rollouts with 128 concurrent tool calls will queue on it.
SANDBOX_SLOW_MS = 250.0
SANDBOX_PINGS = 3
#: One verl FSDP checkpoint of a model ~ 7x its bf16 weights: fp32 params + two Adam moments (6x) + the HF export.
CKPT_WEIGHT_FACTOR = 7.0


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


def _default_env() -> dict[str, str]:
    return dict(os.environ)


@dataclass
class Probes:
    """Where the doctor looks. Defaults read the real machine; tests replace any of them."""

    env: Mapping[str, str] = field(default_factory=_default_env)
    dev_root: Path = Path("/dev")
    cann_root: Path = Path("/usr/local/Ascend")
    #: npu-smi binary; None = search the PATH of ``env``.
    npu_smi: str | None = None
    patches_dir: Path = field(default_factory=lambda: Path(os.environ.get("KIT_PATCH_DIR", KIT_ROOT / "patches")))
    #: A JSON file with Ray's resources of this node ({"NPU": 16, ...}) instead of asking a running cluster.
    ray_resources_json: Path | None = None
    #: Ray address to query; None = RAY_ADDRESS from ``env``, else "auto" when ``ray_state_file`` exists.
    ray_address: str | None = None
    ray_state_file: Path = Path("/tmp/ray/ray_current_cluster")
    #: Directories searched for package metadata and package sources; None = sys.path of this interpreter.
    search_path: list[str] | None = None
    detect_platform: Callable[[], device.Platform] = device.detect
    command_timeout_s: float = 30.0


@dataclass
class Options:
    """What the user asked about (as opposed to where to look, which is :class:`Probes`)."""

    phase: str = "rl"
    hw: str | None = None
    only: frozenset[str] | None = None
    sandbox_url: str | None = None
    model: Path | None = None
    data: list[Path] = field(default_factory=list)
    ckpt_dir: Path | None = None
    min_free_gb: float = 100.0


@dataclass
class Context:
    probes: Probes
    opts: Options
    platform: device.Platform
    platform_note: str
    hw: str
    #: The platform the hardware profile belongs to: the stack versions are checked for it, not for what was detected.
    target: str
    davinci: int
    torch_devices: int | None


@dataclass
class Report:
    platform: str
    hardware: str
    target: str
    phase: str
    results: list[Result]

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status == FAIL for r in self.results) else 0

    def counts(self) -> dict[str, int]:
        return {status: sum(r.status == status for r in self.results) for status in STATUSES}

    def as_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "hardware": self.hardware,
            "target": self.target,
            "phase": self.phase,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "pins_file": str(pins.PINS_FILE),
            "checks": [asdict(r) for r in self.results],
        }


def _fix_env_line(hw: str, phase: str) -> str:
    return f"source <({device.PROFILES[hw].env_command(phase)})"


def _image(hw: str) -> str:
    """The kit image that carries the pinned base stack for ``hw``, as a noun phrase for fix lines."""
    if hw in ("a2", "a3"):
        base = f"{pins.get('VLLM_ASCEND_IMAGE')}:{pins.get(f'VLLM_ASCEND_TAG_{hw.upper()}')}"
    elif hw == "cuda":
        base = f"{pins.get('VLLM_CUDA_IMAGE')}:{pins.get('VLLM_CUDA_TAG')}"
    else:
        return ".venv/ from bash scripts/test.sh (the pinned CPU stack)"
    return f"the kit image (docker/build.sh --hw {hw}, based on {base})"


# ================================================================================================ platform


def check_platform(ctx: Context) -> list[Result]:
    name, hw = ctx.platform.name, ctx.hw
    details = {"detected": name, "hardware": hw, "davinci_nodes": ctx.davinci, "torch_devices": ctx.torch_devices}
    if name != ctx.target:
        fix = {
            "npu": "run on the NPU host inside the kit image (docker/run_npu.sh), with CANN's set_env.sh sourced; "
            "check `python -c 'import torch_npu'`",
            "cuda": "run on a GPU host inside docker/run_cuda.sh (it passes --gpus all)",
        }.get(ctx.target, "set KIT_DEVICE=cpu to force the CPU platform")
        return [
            fail("platform", f"--hw {hw} needs {ctx.target}, detected {name} ({ctx.platform_note})", fix, **details)
        ]
    if name == "cpu":
        return [ok("platform", f"cpu: no NPU ({ctx.platform_note}), no CUDA GPU", **details)]
    if name == "cuda":
        return [ok("platform", f"cuda: {ctx.platform_note}", **details)]
    results = [ok("platform", f"npu ({hw}): {ctx.platform_note}", **details)]
    expected = device.PROFILES[hw].devices_per_node
    if expected and ctx.davinci != expected:
        other = "a2" if hw == "a3" else "a3"
        results.append(
            warn(
                "platform.devices",
                f"{ctx.davinci} /dev/davinciN nodes, an {hw.upper()} node has {expected}",
                "start the container with docker/run_npu.sh (it passes every /dev/davinciN), "
                f"or pass --hw {other} if this is the other machine type",
            )
        )
    if ctx.torch_devices is not None and ctx.davinci and ctx.torch_devices != ctx.davinci:
        mask = ctx.probes.env.get("ASCEND_RT_VISIBLE_DEVICES")
        results.append(
            warn(
                "platform.visible",
                f"torch_npu sees {ctx.torch_devices} of {ctx.davinci} devices (ASCEND_RT_VISIBLE_DEVICES={mask!r})",
                "unset ASCEND_RT_VISIBLE_DEVICES unless the job is meant to use a subset",
            )
        )
    return results


# ================================================================================================ CANN


def _toolkit_homes(probes: Probes) -> list[Path]:
    """Candidate toolkit homes, the sourced one first: that is the CANN processes will load."""
    env, root = probes.env, probes.cann_root
    candidates = [Path(h) for h in (env.get("ASCEND_TOOLKIT_HOME"), env.get("ASCEND_HOME_PATH")) if h]
    candidates += [root / "ascend-toolkit" / "latest", root / "cann", *sorted(root.glob("cann-*"))]
    return list(dict.fromkeys(path for path in candidates if path.is_dir()))


def _on_path_list(value: str | None, wanted: Path) -> bool:
    return str(wanted).rstrip("/") in [e.rstrip("/") for e in (value or "").split(":") if e]


def _sourced_problem(env: Mapping[str, str], home_vars: Sequence[str], lib: str, extra: Sequence[str] = ()) -> str:
    """Why a set_env.sh looks not sourced ('' when it looks sourced): its home variable, that directory, its library
    directory on LD_LIBRARY_PATH and any other variable it exports."""
    home = next((env[v] for v in home_vars if env.get(v)), None)
    if not home:
        return f"{' / '.join(home_vars)} unset"
    if not Path(home).is_dir():
        return f"{home_vars[0]} points to a missing directory {home}"
    if not _on_path_list(env.get("LD_LIBRARY_PATH"), Path(home) / lib):
        return f"LD_LIBRARY_PATH lacks {home}/{lib}"
    missing = [v for v in extra if not env.get(v)]
    return f"{', '.join(missing)} unset" if missing else ""


def check_cann(ctx: Context) -> list[Result]:
    env, root, want = ctx.probes.env, ctx.probes.cann_root, pins.get("CANN_VERSION")
    results: list[Result] = []

    found = next(filter(None, (read_cann_version(home) for home in _toolkit_homes(ctx.probes))), None)
    if found is None:
        results.append(
            fail(
                "cann.version",
                f"no CANN toolkit ($ASCEND_TOOLKIT_HOME, $ASCEND_HOME_PATH, {root}/ascend-toolkit/latest, {root}/cann)",
                f"use {_image(ctx.hw)}, or pass --cann-root if CANN is installed elsewhere",
            )
        )
    elif found.version.lower() != want.lower():
        kind = " (a build number from version.info, not a release)" if found.kind == "build-number" else ""
        results.append(
            fail(
                "cann.version",
                f"CANN {found.version}{kind} at {found.source.parent}, the kit pins {want}",
                f"use {_image(ctx.hw)}, which carries CANN {want}; or install CANN {want} toolkit + kernels + NNAL",
                version=found.version,
                source=str(found.source),
                pinned=want,
            )
        )
    else:
        results.append(ok("cann.version", f"CANN {found.version} ({found.source})", version=found.version))

    problem = _sourced_problem(env, ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"), "lib64", ("ASCEND_OPP_PATH",))
    if problem:
        results.append(
            fail(
                "cann.set_env",
                f"CANN set_env.sh not sourced: {problem}",
                f"source {root}/ascend-toolkit/set_env.sh in every shell that launches jobs, and before `ray start` "
                "(Ray counts NPUs with pyACL only when it is sourced)",
            )
        )
    else:
        results.append(ok("cann.set_env", f"set_env.sh sourced (ASCEND_HOME_PATH={env.get('ASCEND_HOME_PATH')})"))

    problem = _sourced_problem(env, ("ATB_HOME_PATH",), "lib")
    if problem:
        results.append(
            fail(
                "cann.atb",
                f"ATB (NNAL) set_env.sh not sourced: {problem}; vllm-ascend then fails on 'libatb.so: cannot open'",
                f"source {root}/nnal/atb/set_env.sh after the toolkit's set_env.sh",
            )
        )
    else:
        results.append(ok("cann.atb", f"ATB set_env.sh sourced (ATB_HOME_PATH={env['ATB_HOME_PATH']})"))

    driver = read_driver_version(root)
    if driver:
        results.append(info("cann.driver", f"driver {driver} ({root}/driver/version.info)"))
    else:
        results.append(
            warn(
                "cann.driver",
                f"no {root}/driver/version.info: the host driver is not mounted (or not installed)",
                "start the container with docker/run_npu.sh, which mounts /usr/local/Ascend/driver read-only",
            )
        )
    return results


# ================================================================================================ npu-smi


def _run_npu_smi(probes: Probes) -> tuple[str | None, Result | None]:
    """(stdout of `npu-smi info`, None) or (None, the FAIL that says why there is none)."""
    binary = probes.npu_smi or shutil.which("npu-smi", path=probes.env.get("PATH", os.defpath))
    mount = "mount the host's /usr/local/bin/npu-smi, /usr/local/dcmi and driver (docker/run_npu.sh does)"
    if not binary:
        return None, fail("npu-smi", "npu-smi not found on PATH", mount)
    try:
        proc = subprocess.run(
            [binary, "info"], capture_output=True, text=True, timeout=probes.command_timeout_s, env=dict(probes.env)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, fail("npu-smi", f"`npu-smi info` failed: {exc}", f"{mount}; run `npu-smi info` on the host")
    if proc.returncode != 0:
        tail = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
        return None, fail("npu-smi", f"`npu-smi info` exited {proc.returncode}: {tail}", mount)
    return proc.stdout, None


def check_npu_smi(ctx: Context) -> list[Result]:
    text, failure = _run_npu_smi(ctx.probes)
    if failure:
        return [failure]
    parsed = parse_npu_smi_info(text or "")
    devices = parsed.devices
    details = {"tool_version": parsed.tool_version, "devices": [d.as_dict() for d in devices]}
    if not devices:
        fix = "check the host driver (`npu-smi info` on the host) and that the container got the devices"
        return [fail("npu-smi", "`npu-smi info` listed no devices", fix, **details)]
    results: list[Result] = []
    unhealthy = [d for d in devices if d.health.upper() != "OK"]
    for dev in unhealthy:
        make = warn if dev.health.lower() == "warning" else fail
        results.append(
            make(
                f"npu-smi.health.{dev.phy_id if dev.phy_id is not None else dev.npu}",
                f"{dev.label} health is {dev.health}",
                f"read the alarm with `npu-smi info -t health -i {dev.npu}`; leave the device out "
                "(ASCEND_RT_VISIBLE_DEVICES) and have the host admin reset or replace it",
                **dev.as_dict(),
            )
        )
    busy = [d for d in devices if (d.hbm_used_mb or 0) > HBM_BUSY_FRACTION * (d.hbm_total_mb or float("inf"))]
    if busy:
        shown = ", ".join(f"{d.label} {d.hbm_used_mb}/{d.hbm_total_mb} MB" for d in busy[:4])
        more = f" and {len(busy) - 4} more" if len(busy) > 4 else ""
        results.append(
            warn(
                "npu-smi.hbm",
                f"HBM already in use before the run: {shown}{more}",
                "see the process table of `npu-smi info`; stop leftover jobs (`ray stop`) before starting",
                busy=[d.as_dict() for d in busy],
            )
        )
    if ctx.davinci and len(devices) != ctx.davinci:
        results.append(
            warn(
                "npu-smi.count",
                f"npu-smi lists {len(devices)} devices, /dev has {ctx.davinci} davinci nodes",
                "pass every /dev/davinciN to the container (docker/run_npu.sh) and mount the host's npu-smi",
            )
        )
    hbm = "/".join(f"{t // 1024} GB" for t in sorted({d.hbm_total_mb for d in devices if d.hbm_total_mb}))
    summary = f"{len(devices)} devices, {len(devices) - len(unhealthy)} healthy, HBM {hbm or 'unknown'} each"
    worst = max((r.status for r in results if r.check.startswith("npu-smi.health")), key=(WARN, FAIL).index, default=OK)
    results.insert(0, Result("npu-smi", worst, summary, "see the npu-smi.health lines" if worst != OK else "", details))
    return results


# ================================================================================================ versions


def _dist_version(name: str, search_path: list[str] | None) -> str | None:
    """Version of the first installed distribution called ``name`` on the search path (like ``pip show``)."""
    for dist in importlib.metadata.distributions(name=name, path=search_path if search_path is not None else sys.path):
        return dist.version
    return None


def _public(version: str) -> str:
    """Version without its local label: torch 2.5.1+cpu is torch 2.5.1, vLLM 0.9.1+empty is vLLM 0.9.1."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # packaging is nearly always there; the fallback keeps the doctor dependency-free
        return version.split("+", 1)[0].lower()
    try:
        return Version(version).public
    except InvalidVersion:
        return version.split("+", 1)[0].lower()


@dataclass(frozen=True)
class Expected:
    dist: str
    pin_key: str | None
    version: str | None
    source: str  # "image" | "pip" | "venv" | "verl": where a correct version comes from, i.e. the fix


def expected_versions(target: str) -> list[Expected]:
    """What must be installed for ``target`` and at which pinned version, in report order."""
    rows: list[Expected] = []
    if target == "npu":
        for dist, key in [
            ("torch", "NPU_TORCH_VERSION"),
            ("torch-npu", "TORCH_NPU_VERSION"),
            ("vllm", "VLLM_VERSION"),
            ("vllm-ascend", "VLLM_ASCEND_VERSION"),
        ]:
            rows.append(Expected(dist, key, pins.get(key), "image"))
    elif target == "cuda":
        rows += [
            Expected("torch", None, None, "image"),
            Expected("vllm", "VLLM_VERSION", pins.get("VLLM_VERSION"), "image"),
        ]
    else:
        rows.append(Expected("torch", "CPU_TORCH_VERSION", pins.get("CPU_TORCH_VERSION"), "venv"))
    py = pins.python_requirements()
    first = [name for name in ("transformers", "ray") if name in py]
    rows += [Expected(name, "PY_PINS", py[name], "pip") for name in first + [n for n in py if n not in first]]
    rows.append(Expected("verl", "VERL_VERSION", pins.get("VERL_VERSION"), "verl"))
    return rows


#: Never on an NPU host: the community triton replaces the package dir triton-ascend needs, and flash-attn / liger
#: are CUDA-only (verl's NPU path goes through transformers' npu_flash_attention instead).
NPU_FORBIDDEN = ("triton", "flash-attn", "liger-kernel")


def _version_fix(exp: Expected, hw: str) -> str:
    return {
        "image": f"use {_image(hw)}; this package comes with its base image, do not pip-install it over it",
        "verl": "bash scripts/setup_verl.sh --source sdist --install (verl at the pin with the kit's patches)",
        "venv": "bash scripts/test.sh (re)creates .venv/ with the pinned CPU build of torch",
    }.get(exp.source, f"pip install '{exp.dist}=={exp.version}' (pins.env {exp.pin_key}; the kit images install it)")


def check_versions(ctx: Context) -> list[Result]:
    results: list[Result] = []
    search = ctx.probes.search_path
    for exp in expected_versions(ctx.target):
        installed = _dist_version(exp.dist, search)
        check = f"versions.{exp.dist}"
        if installed is None:
            results.append(
                fail(check, f"{exp.dist} is not installed (pinned {exp.version})", _version_fix(exp, ctx.hw))
            )
        elif exp.version is None:
            results.append(info(check, f"{exp.dist} {installed} (from the base image, not pinned)"))
        elif _public(installed) != _public(exp.version):
            summary = f"{exp.dist} {installed}, the kit pins {exp.version} ({exp.pin_key})"
            results.append(fail(check, summary, _version_fix(exp, ctx.hw), installed=installed, pinned=exp.version))
        else:
            results.append(ok(check, f"{exp.dist} {installed}", installed=installed))
    present = [(name, v) for name in NPU_FORBIDDEN if (v := _dist_version(name, search))] if ctx.target == "npu" else []
    if present:
        results.append(
            warn(
                "versions.forbidden",
                "CUDA-only packages on an NPU host: " + ", ".join(f"{n} {v}" for n, v in present),
                f"pip uninstall -y {' '.join(n for n, _ in present)} (the community triton shadows triton-ascend; "
                "flash-attn and liger do not run on NPU)",
            )
        )
    return results


# ================================================================================================ patches


def _find_package_dir(name: str, search_path: list[str] | None) -> Path | None:
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


def _patch_id(patch: Path) -> str | None:
    """``git patch-id --stable`` of a patch file: what setup_verl.sh records, stable across rebases and renames."""
    try:
        with patch.open("rb") as stdin:
            proc = subprocess.run(["git", "patch-id", "--stable"], stdin=stdin, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.decode(errors="replace").split()
    return out[0] if proc.returncode == 0 and out else None


def check_patches(ctx: Context) -> list[Result]:
    """Each patch of the series against verl/version/kit_patches, the '<patch-id> <file> <subject>' record that
    scripts/setup_verl.sh --install writes into the installed package."""
    series = sorted(ctx.probes.patches_dir.glob("*.patch"))
    rebuild = "bash scripts/setup_verl.sh --source sdist --install (or rebuild the image: docker/build.sh)"
    if not series:
        return [skip("patches", f"no patch series at {ctx.probes.patches_dir} (pass --patches-dir)")]
    verl_dir = _find_package_dir("verl", ctx.probes.search_path)
    if verl_dir is None:
        return [fail("patches", "verl is not installed", rebuild)]
    try:
        lines = (verl_dir / "version" / "kit_patches").read_text().splitlines()
    except OSError:
        summary = f"{verl_dir} has no version/kit_patches: not installed by setup_verl.sh, so none of the kit's patches"
        return [fail("patches", summary, rebuild)]
    records = [line.split(" ", 2) for line in lines if len(line.split(" ", 2)) >= 2]
    ids = {parts[0] for parts in records}
    by_name = {parts[1]: parts[0] for parts in records}
    results = []
    for patch in series:
        pid, check = _patch_id(patch), f"patches.{patch.name[:4]}"
        if pid is not None and pid in ids:
            results.append(ok(check, patch.name, patch_id=pid))
        elif pid is None and patch.name in by_name:
            results.append(
                warn(check, f"{patch.name}: matched by name only", "install git so patch ids can be compared")
            )
        elif patch.name in by_name:
            summary = f"installed verl carries an older version of {patch.name} (patch id differs)"
            results.append(fail(check, summary, rebuild, patch_id=pid, installed_id=by_name[patch.name]))
        else:
            results.append(fail(check, f"installed verl lacks {patch.name}", rebuild, patch_id=pid))
    return results


# ================================================================================================ Ray

_RAY_QUERY = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
ip = ray.util.get_node_ip_address()
local = [n["Resources"] for n in ray.nodes() if n.get("Alive") and n.get("NodeManagerAddress") == ip]
print(json.dumps({"local": local[0] if local else None, "cluster": ray.cluster_resources()}))
"""


def _ray_resources(probes: Probes) -> tuple[dict[str, Any] | None, str]:
    """(Ray's resources of this node, where they came from), or (None, why not) when there is no cluster to ask.
    The query runs in a child process: importing Ray here would make the doctor slow and fragile."""
    if probes.ray_resources_json is not None:
        data = json.loads(Path(probes.ray_resources_json).read_text())
        return (data["local"] if "local" in data else data), str(probes.ray_resources_json)
    address = probes.ray_address or probes.env.get("RAY_ADDRESS")
    if not address and probes.ray_state_file.exists():
        address = "auto"
    if not address:
        return None, f"no running Ray cluster (RAY_ADDRESS unset, no {probes.ray_state_file})"
    proc = subprocess.run(
        [sys.executable, "-c", _RAY_QUERY, address],
        capture_output=True,
        text=True,
        timeout=max(probes.command_timeout_s, 60),
        env=dict(probes.env),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"could not query Ray at {address}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data.get("local") or data.get("cluster"), f"ray cluster at {address}"


def check_ray(ctx: Context) -> list[Result]:
    resource = device.PLATFORMS[ctx.target].ray_resource
    present = ctx.davinci if ctx.target == "npu" else (ctx.torch_devices or 0)
    try:
        resources, source = _ray_resources(ctx.probes)
    except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return [fail("ray", str(exc), "check `ray status`; restart the head with `ray start --head`")]
    source_env = f"source {ctx.probes.cann_root}/ascend-toolkit/set_env.sh; " if ctx.target == "npu" else ""
    restart = f"ray stop; {source_env}ray start --head --resources='{{\"{resource}\": {present}}}'"
    if resources is None:
        return [skip("ray", f"{source}; when you start it: {restart}")]
    seen = resources.get(resource, 0)
    details = {"source": source, "resource": resource, "ray": seen, "present": present}
    if seen < present:
        why = (
            " (Ray counted NPUs at `ray start`: without CANN's set_env.sh pyACL is missing and older Ray's "
            "/dev/davinci? glob stops at 10; a narrower ASCEND_RT_VISIBLE_DEVICES also caps it)"
            if resource == "NPU"
            else ""
        )
        return [fail("ray", f"Ray's {resource} total is {seen:g}, this node has {present}{why}", restart, **details)]
    if seen > present:
        summary = f"Ray's {resource} total {seen:g} exceeds the {present} devices of this node"
        return [warn("ray", summary, f"restart Ray with the real count: {restart}", **details)]
    return [ok("ray", f"Ray {resource} = {seen:g} = devices present ({source})", **details)]


# ================================================================================================ env

_VAR_NAME = re.compile(r"\b[A-Z][A-Z0-9_]{3,}\b")


def _env_fix(names: Iterable[str], env: Mapping[str, str], entries: Sequence[EnvVar], hw: str, phase: str) -> str:
    """Shell commands that set ``names`` the way the kit's preset does (unset when the preset has no entry),
    skipping those already at the preset's value."""
    wanted = {e.name: e.value for e in entries}
    steps = [
        f"unset {name}" if wanted.get(name) is None else f"export {name}={wanted[name]}"
        for name in names
        if env.get(name) != wanted.get(name)
    ]
    return "; ".join(steps) + f" (or: {_fix_env_line(hw, phase)})"


def check_env(ctx: Context) -> list[Result]:
    """Known-bad combinations (env_presets.known_bad_combinations) FAIL; other departures from the kit's preset
    WARN; on NPU, VLLM_ASCEND_* variables the installed vllm-ascend does not read WARN."""
    env, hw, phase = ctx.probes.env, ctx.hw, ctx.opts.phase
    entries = device.PROFILES[hw].env(phase, env)
    results: list[Result] = []
    flagged: set[str] = set()
    for problem in device.PROFILES[hw].env_problems(env, phase):
        names = [n for n in dict.fromkeys(_VAR_NAME.findall(problem)) if n in env or any(e.name == n for e in entries)]
        flagged.update(names)
        results.append(
            fail(f"env.bad.{names[0] if names else 'combination'}", problem, _env_fix(names, env, entries, hw, phase))
        )

    diffs = []
    for entry in (e for e in entries if e.name not in flagged):
        current = env.get(entry.name)
        if entry.value is None and current is not None:
            diffs.append(f"{entry.name}={current!r} (kit: unset)")
        elif entry.value is not None and current != entry.value:
            diffs.append(f"{entry.name} {'unset' if current is None else repr(current)} (kit: {entry.value})")
    if diffs:
        summary = f"{len(diffs)} of {len(entries)} variables differ from the kit's {phase}/{hw} preset: " + "; ".join(
            diffs
        )
        results.append(warn("env.preset", summary, _fix_env_line(hw, phase), differences=diffs))
    else:
        results.append(ok("env.preset", f"matches the kit's {phase}/{hw} preset ({len(entries)} variables)"))
    if ctx.target == "npu":
        results.extend(_check_vllm_ascend_vars(ctx))
    return results


def _check_vllm_ascend_vars(ctx: Context) -> list[Result]:
    set_vars = sorted(name for name in ctx.probes.env if name.startswith("VLLM_ASCEND_"))
    if not set_vars:
        return []
    package = _find_package_dir("vllm_ascend", ctx.probes.search_path)
    names = vllm_ascend_env_names(package) if package else None
    if package is None or names is None:
        return [skip("env.vllm_ascend", "vllm_ascend/envs.py not found: cannot tell which variables it reads")]
    version = _dist_version("vllm-ascend", ctx.probes.search_path) or "installed"
    unread = [name for name in set_vars if name not in names and not package_mentions(package, name)]
    if not unread:
        return [ok("env.vllm_ascend", f"vllm-ascend {version} reads every VLLM_ASCEND_* variable set")]
    return [
        warn(
            "env.vllm_ascend",
            f"vllm-ascend {version} does not read {', '.join(unread)}: silently ignored (removed or renamed)",
            f"unset {' '.join(unread)}; their replacement, if any, is an --additional-config option of vllm-ascend",
            unread=unread,
        )
    ]


# ================================================================================================ sandbox


def _sandbox_base(url: str) -> str:
    base = url.rstrip("/")
    for suffix in ("/run_code", "/v1/ping"):
        base = base.removesuffix(suffix)
    return base


def check_sandbox(ctx: Context) -> list[Result]:
    url = ctx.opts.sandbox_url
    start_it = "start it with `python -m sandbox serve --port 8080` (retool-sandbox) and keep it up during RL"
    if not url:
        return [skip("sandbox", "no --sandbox-url given (the ReTool tool config uses http://localhost:8080/run_code)")]
    ping = _sandbox_base(url) + "/v1/ping"
    host = urllib.parse.urlsplit(ping).hostname or ""
    # A proxy from the environment must not sit between the trainer and a sandbox on this host.
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if loopback else []))
    times = []
    for _ in range(SANDBOX_PINGS):
        t0 = time.perf_counter()
        try:
            with opener.open(ping, timeout=5) as response:
                body = response.read(256).decode(errors="replace").strip()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return [fail("sandbox", f"{ping} unreachable: {exc}", f"{start_it}; or fix --sandbox-url")]
        times.append((time.perf_counter() - t0) * 1000)
        if body.strip('"') != "pong":
            summary = f"{ping} answered {body[:60]!r}, not pong: not a SandboxFusion-compatible service"
            return [fail("sandbox", summary, f"point --sandbox-url at the sandbox; {start_it}")]
    rtt = statistics.median(times)
    if rtt > SANDBOX_SLOW_MS:
        fix = "run the sandbox on the training host (localhost) with enough workers (--workers)"
        return [warn("sandbox", f"{ping}: pong, but slow ({rtt:.0f} ms median)", fix, url=ping, rtt_ms=round(rtt, 2))]
    return [ok("sandbox", f"{ping}: pong in {rtt:.1f} ms (median of {SANDBOX_PINGS})", url=ping, rtt_ms=round(rtt, 2))]


# ================================================================================================ paths and disk

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def _weights_bytes(model: Path) -> int:
    return sum(p.stat().st_size for pattern in ("*.safetensors", "*.bin") for p in model.glob(pattern))


def _model_problems(model: Path) -> list[str]:
    if not model.is_dir():
        return ["is not a directory"]
    problems = []
    try:
        json.loads((model / "config.json").read_text())
    except OSError:
        problems.append("has no config.json")
    except ValueError:
        problems.append("has a config.json that is not valid JSON")
    if not any((model / name).is_file() for name in _TOKENIZER_FILES):
        problems.append("has no tokenizer (tokenizer.json / tokenizer.model / vocab.json)")
    if not _weights_bytes(model):
        problems.append("has no *.safetensors / *.bin weights")
    return problems


def check_paths(ctx: Context) -> list[Result]:
    model, data = ctx.opts.model, ctx.opts.data
    if model is None and not data:
        return [skip("paths", "no --model / --data given")]
    results = []
    if model is not None:
        problems = _model_problems(model)
        if problems:
            fix = "download it, e.g. `hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir DIR`, and pass that DIR"
            results.append(fail("paths.model", f"model {model} " + ", ".join(problems), fix))
        else:
            results.append(ok("paths.model", f"model {model} ({_weights_bytes(model) / 1e9:.1f} GB of weights)"))
    prepare = "prepare the data (the recipes' preprocess scripts write parquet) and pass the file it wrote"
    for path in data:
        check = f"paths.data.{path.name}"
        if path.is_file() and path.stat().st_size > 0:
            results.append(ok(check, f"data {path} ({path.stat().st_size / 1e6:.1f} MB)"))
        elif path.is_dir() and any(path.glob("*.parquet")):
            results.append(ok(check, f"data dir {path} ({len(list(path.glob('*.parquet')))} parquet files)"))
        else:
            results.append(fail(check, f"data {path} {'is empty' if path.exists() else 'does not exist'}", prepare))
    return results


def check_disk(ctx: Context) -> list[Result]:
    ckpt = ctx.opts.ckpt_dir
    if ckpt is None:
        return [skip("disk", "no --ckpt-dir given")]
    existing = ckpt
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK):
        return [fail("disk", f"{existing} (for {ckpt}) is not writable", "choose a writable --ckpt-dir")]
    free_gb = shutil.disk_usage(existing).free / 1e9
    need_gb, basis = ctx.opts.min_free_gb, f"--min-free-gb {ctx.opts.min_free_gb:g}"
    if ctx.opts.model is not None and ctx.opts.model.is_dir():
        estimate = CKPT_WEIGHT_FACTOR * _weights_bytes(ctx.opts.model) / 1e9
        if estimate > need_gb:
            need_gb, basis = estimate, f"one checkpoint ~ {CKPT_WEIGHT_FACTOR:g}x the model's weights"
    details = {"path": str(existing), "free_gb": round(free_gb, 1), "need_gb": round(need_gb, 1)}
    if free_gb < need_gb:
        return [
            fail(
                "disk",
                f"{free_gb:.0f} GB free under {existing}, need {need_gb:.0f} GB ({basis})",
                "free space, point --ckpt-dir / trainer.default_local_dir at a larger disk, "
                "or keep fewer checkpoints (trainer.max_actor_ckpt_to_keep)",
                **details,
            )
        ]
    return [ok("disk", f"{free_gb:.0f} GB free under {existing} (need {need_gb:.0f} GB: {basis})", **details)]


# ================================================================================================ driver

CHECKS: dict[str, Callable[[Context], list[Result]]] = {
    "platform": check_platform,
    "cann": check_cann,
    "npu-smi": check_npu_smi,
    "versions": check_versions,
    "patches": check_patches,
    "ray": check_ray,
    "env": check_env,
    "sandbox": check_sandbox,
    "paths": check_paths,
    "disk": check_disk,
}
#: Groups that only mean something for one kind of target.
_TARGETS = {"cann": {"npu"}, "npu-smi": {"npu"}, "ray": {"npu", "cuda"}}


def _torch_npu_note() -> str:
    torch_npu, status = device.import_torch_npu()
    return f"torch_npu {status}" if torch_npu is None else f"torch_npu {getattr(torch_npu, '__version__', '?')}"


def build_context(opts: Options, probes: Probes) -> Context:
    platform = probes.detect_platform()
    davinci = device.count_davinci(probes.dev_root)
    torch_devices: int | None = None
    if platform.name == "npu":
        torch_devices = platform.device_count(probes.dev_root)
        note = f"{_torch_npu_note()}, {torch_devices} visible, {davinci} /dev/davinciN nodes"
    elif platform.name == "cuda":
        torch_devices = platform.device_count(probes.dev_root)
        note = f"{torch_devices} CUDA devices"
    else:
        note = _torch_npu_note()
    hw = opts.hw or device.profile_of(platform, probes.dev_root)
    target = device.PROFILES[hw].platform.name
    return Context(probes, opts, platform, note, hw, target, davinci, torch_devices)


def run_checks(opts: Options, probes: Probes | None = None) -> Report:
    probes = probes or Probes()
    ctx = build_context(opts, probes)
    results: list[Result] = []
    for group, check in CHECKS.items():
        if opts.only is not None and group not in opts.only:
            continue
        if group in _TARGETS and ctx.target not in _TARGETS[group]:
            results.append(skip(group, f"only for {' / '.join(sorted(_TARGETS[group]))} (this run targets {ctx.hw})"))
            continue
        try:
            results.extend(check(ctx))
        except Exception as exc:  # noqa: BLE001  (one broken probe must not hide the other checks)
            summary = f"the check itself failed: {type(exc).__name__}: {exc}"
            results.append(fail(group, summary, "re-run with --only to skip it, and report this (--json output helps)"))
    return Report(ctx.platform.name, ctx.hw, ctx.target, opts.phase, results)


# ================================================================================================ output


def render_table(report: Report, verbose: bool = False) -> str:
    rows = report.results
    width = max([len(r.check) for r in rows] + [5])
    lines = [
        f"retool-doctor: platform {report.platform}, hardware {report.hardware}, phase {report.phase} "
        f"(pins: {pins.PINS_FILE})",
        f"{'STATUS':<6}  {'CHECK':<{width}}  RESULT",
    ]
    for r in rows:
        lines.append(f"{r.status:<6}  {r.check:<{width}}  {r.summary}")
        if r.fix and r.status in (WARN, FAIL):
            lines.append(f"{'':<6}  {'':<{width}}  fix: {r.fix}")
        if verbose and r.check == "npu-smi":
            for dev in r.details.get("devices", []):
                lines.append(
                    f"{'':<6}  {'':<{width}}  NPU {dev['npu']} chip {dev['chip']}: {dev['health']}, "
                    f"HBM {dev['hbm_used_mb']}/{dev['hbm_total_mb']} MB"
                )
    counts = report.counts()
    verdict = "not ready: fix the FAIL lines before starting a run" if report.exit_code else "ready"
    lines.append(", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + f" -> {verdict}")
    return "\n".join(lines) + "\n"


def _csv(value: str) -> frozenset[str]:
    names = frozenset(v.strip() for v in value.split(",") if v.strip())
    unknown = names - set(GROUPS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown check group(s) {', '.join(sorted(unknown))}; choose from {', '.join(GROUPS)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retool-doctor",
        description="Check this machine before a ReTool SFT/RL run: platform, CANN, npu-smi, versions against the "
        "kit's pins, verl's patches, Ray's device count, env vars, sandbox, paths and disk. Exit 1 on any FAIL.",
    )
    parser.add_argument("--phase", choices=PHASES, default="rl", help="which run to check for (default %(default)s)")
    parser.add_argument("--hw", choices=HARDWARE, help="hardware profile (default: guessed from the detected platform)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (top-level 'platform' field)")
    parser.add_argument("--only", type=_csv, help=f"comma-separated groups to run: {', '.join(GROUPS)}")
    parser.add_argument("-v", "--verbose", action="store_true", help="table: list every device npu-smi reports")
    parser.add_argument(
        "--sandbox-url", help="sandbox to ping (GET <base>/v1/ping), e.g. http://localhost:8080/run_code"
    )
    parser.add_argument("--model", type=Path, help="local model directory to check (config, tokenizer, weights)")
    parser.add_argument("--data", type=Path, action="append", default=[], help="data file or dir to check (repeatable)")
    parser.add_argument("--ckpt-dir", type=Path, help="where checkpoints go: checks free space and write access")
    parser.add_argument("--min-free-gb", type=float, default=100.0, help="free space to require (default %(default)s)")
    probe = parser.add_argument_group("where to look (defaults read this machine; tests point them at fakes)")
    probe.add_argument("--dev-root", type=Path, default=Path("/dev"), help="device node directory (default /dev)")
    probe.add_argument("--cann-root", type=Path, default=Path("/usr/local/Ascend"), help="Ascend install root")
    probe.add_argument("--npu-smi", help="npu-smi binary (default: found on PATH)")
    probe.add_argument("--patches-dir", type=Path, help="the kit's patch series (default: the kit's patches/)")
    probe.add_argument("--ray-resources-json", type=Path, help="JSON file with this node's Ray resources")
    probe.add_argument("--ray-address", help="Ray cluster to query (default: RAY_ADDRESS, or a running local one)")
    return parser


def main(argv: Sequence[str] | None = None, probes: Probes | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = Options(
        phase=args.phase,
        hw=args.hw,
        only=args.only,
        sandbox_url=args.sandbox_url,
        model=args.model,
        data=list(args.data),
        ckpt_dir=args.ckpt_dir,
        min_free_gb=args.min_free_gb,
    )
    if probes is None:
        probes = Probes(
            dev_root=args.dev_root,
            cann_root=args.cann_root,
            npu_smi=args.npu_smi,
            ray_resources_json=args.ray_resources_json,
            ray_address=args.ray_address,
        )
        if args.patches_dir is not None:
            probes.patches_dir = args.patches_dir
    try:
        report = run_checks(opts, probes)
    except ValueError as exc:  # e.g. KIT_DEVICE=tpu: one clear line, not a traceback
        print(f"retool-doctor: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        sys.stdout.write(render_table(report, verbose=args.verbose))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
