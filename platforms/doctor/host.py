"""Host checks: the platform this process runs on (and its collectives backend), CANN, and npu-smi.

Why: on Ascend the expensive failures are silent or far from their cause. A CANN env not sourced before ``ray start``
makes Ray count 10 of 16 A3 dies; a container without every /dev/davinciN or without the host's driver and npu-smi
fails only when the first process touches a device; a torch build without the platform's distributed backend
fails at ``init_process_group`` after the model has loaded. Each check turns one of them into a line with a fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from platforms import PLATFORM_OVERRIDE_ENV, PROFILES, HardwareProfile, Platform, stacks
from platforms.ascend_probe import parse_npu_smi_info, read_cann_version, read_driver_version
from platforms.doctor.libs import check_vllm_libraries
from platforms.doctor.probes import (
    FAIL,
    OK,
    WARN,
    Context,
    Probes,
    Result,
    fail,
    has_host_stack,
    image_phrase,
    info,
    ok,
    run_script,
    warn,
)

#: HBM already in use before a run, as a fraction of the device's total, above which another job is likely holding it.
HBM_BUSY_FRACTION = 0.5

# ------------------------------------------------------------------------------------------------ platform


def _reach_platform_fix(profile: HardwareProfile, env: Mapping[str, str]) -> str:
    """How to get a process onto the profile's platform: its image on a host that has the devices, else the
    platform override (the CPU platform is everywhere)."""
    platform = profile.platform
    if profile.image is None:
        return f"set {PLATFORM_OVERRIDE_ENV}={platform.name} to force the {platform.name} platform"
    sourced = ", ".join(str(path) for path in platform.setup_script_paths(env))
    return (
        f"run on a host with {platform.name} devices inside the kit image ({run_script(platform)})"
        + (f", with {sourced} sourced" if sourced else "")
        + "; check with `python -m platforms detect`"
    )


def _other_profiles_hint(profile: HardwareProfile, present: int) -> str:
    """', or pass --profile X ...' naming the profiles of the same platform, the one matching ``present`` first."""
    siblings = [p for p in PROFILES.values() if p.platform is profile.platform and p is not profile]
    matching = [p.name for p in siblings if p.devices_per_node == present]
    if matching:
        return f", or pass --profile {matching[0]} if this is that machine type ({present} devices per node)"
    if siblings:
        return f", or pass --profile {' / '.join(p.name for p in siblings)} if this is another machine type"
    return ""


def _dist_backend(profile: HardwareProfile, stack: stacks.Stack) -> Result:
    """Whether torch.distributed has the backend verl's process groups use on this platform.

    Asked after loading the platform's torch module, because a device plugin registers its backend on import
    (torch_npu/__init__.py in Ascend/pytorch: ``torch.distributed.Backend.register_backend("hccl", ...)``). Only
    registration is checked, no collective runs; torch is imported here, never at module level, and a broken torch
    is reported, not raised.
    """
    platform, check = profile.platform, "platform.dist"
    backend = platform.dist_backend
    repair = f"use {image_phrase(profile, stack)}, whose torch stack provides the {backend} backend"
    try:
        platform.torch_module()
        import torch.distributed as dist

        available_fn = getattr(dist, "is_backend_available", None)
        if available_fn is not None:
            available = bool(dist.is_available() and available_fn(backend))
        else:  # torch before 2.3: the registry is the list registered backends land in
            available = backend in getattr(dist.Backend, "backend_list", [])
    except Exception as exc:  # noqa: BLE001  (a broken torch/plugin must become a line, not a crash)
        summary = f"cannot ask torch.distributed for the {backend} backend: {type(exc).__name__}: {exc}"
        return warn(check, summary, repair, backend=backend)
    if not available:
        summary = (
            f"torch.distributed has no {backend} backend: verl's process groups fail at init_process_group on "
            f"{platform.name}"
        )
        return warn(check, summary, repair, backend=backend)
    summary = f"torch.distributed has the {backend} backend verl uses on {platform.name} (registered; not exercised)"
    return info(check, summary, backend=backend)


def check_platform(ctx: Context) -> list[Result]:
    detected, profile, platform = ctx.detected, ctx.profile, ctx.platform
    details = {
        "detected": detected.name,
        "hardware": profile.name,
        "davinci_nodes": ctx.davinci,
        "torch_devices": ctx.torch_devices,
    }
    if detected is not platform:
        summary = f"profile {profile.name} needs {platform.name}, detected {detected.name} ({ctx.detected_note})"
        return [fail("platform", summary, _reach_platform_fix(profile, ctx.probes.env), **details)]
    shown = detected.name if profile.name == platform.name else f"{detected.name} ({profile.name})"
    results = [ok("platform", f"{shown}: {ctx.detected_note}", **details)]
    if has_host_stack(platform):
        expected = profile.devices_per_node
        if expected and ctx.davinci != expected:
            results.append(
                warn(
                    "platform.devices",
                    f"{ctx.davinci} /dev/davinciN nodes, an {profile.name.upper()} node has {expected}",
                    f"start the container with {run_script(platform)} (it passes every /dev/davinciN)"
                    + _other_profiles_hint(profile, ctx.davinci),
                )
            )
        if ctx.torch_devices is not None and ctx.davinci and ctx.torch_devices != ctx.davinci:
            mask_var = platform.visible_devices_env
            mask = ctx.probes.env.get(mask_var) if mask_var else None
            results.append(
                warn(
                    "platform.visible",
                    f"torch.{platform.torch_module_name} sees {ctx.torch_devices} of {ctx.davinci} devices "
                    f"({mask_var}={mask!r})",
                    f"unset {mask_var} unless the job is meant to use a subset",
                )
            )
    results.append(_dist_backend(profile, ctx.stack))
    results.append(_rollout_engine(platform, ctx.stack))
    if platform.rollout_engine(ctx.stack).name == "vllm":
        results += check_vllm_libraries(ctx)
    return results


def _rollout_engine(platform: Platform, stack: stacks.Stack) -> Result:
    """The engine RL rolls out with here (vLLM, or on CPU the hf fallback) and its version."""
    engine = platform.rollout_engine(stack)
    summary = f"RL rollout: {engine.label()} ({engine.note})"
    details = {"engine": engine.name, "version": engine.version}
    return (
        warn("platform.rollout", summary, engine.fix, **details)
        if engine.fix
        else ok("platform.rollout", summary, **details)
    )


# ------------------------------------------------------------------------------------------------ CANN


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


def _cann_version(ctx: Context, root: Path, image: str) -> Result:
    """The CANN toolkit found (first of the toolkit homes) against the version pins.env pins."""
    want = ctx.stack.pin("CANN_VERSION")
    found = next(filter(None, (read_cann_version(home) for home in _toolkit_homes(ctx.probes))), None)
    if found is None:
        return fail(
            "cann.version",
            f"no CANN toolkit ($ASCEND_TOOLKIT_HOME, $ASCEND_HOME_PATH, {root}/ascend-toolkit/latest, {root}/cann)",
            f"use {image}, or pass --cann-root if CANN is installed elsewhere",
        )
    if found.version.lower() != want.lower():
        kind = " (a build number from version.info, not a release)" if found.kind == "build-number" else ""
        return fail(
            "cann.version",
            f"CANN {found.version}{kind} at {found.source.parent}, the kit pins {want}",
            f"use {image}, which carries CANN {want}; or install CANN {want} toolkit + kernels + NNAL",
            version=found.version,
            source=str(found.source),
            pinned=want,
        )
    return ok("cann.version", f"CANN {found.version} ({found.source})", version=found.version)


def _cann_sourced(env: Mapping[str, str], root: Path) -> list[Result]:
    """Whether the toolkit's and ATB's set_env.sh were sourced in the environment that launches jobs."""
    results: list[Result] = []
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
    return results


def _cann_driver(ctx: Context, root: Path) -> Result:
    driver = read_driver_version(root)
    if driver:
        return info("cann.driver", f"driver {driver} ({root}/driver/version.info)")
    return warn(
        "cann.driver",
        f"no {root}/driver/version.info: the host driver is not mounted (or not installed)",
        f"start the container with {run_script(ctx.platform)}, which mounts {ctx.platform.install_root}/driver "
        "read-only",
    )


def check_cann(ctx: Context) -> list[Result]:
    """The CANN toolkit's version, its environment (toolkit and ATB set_env.sh) and the host driver."""
    root = ctx.probes.cann_root
    return [
        _cann_version(ctx, root, image_phrase(ctx.profile, ctx.stack)),
        *_cann_sourced(ctx.probes.env, root),
        _cann_driver(ctx, root),
    ]


# ------------------------------------------------------------------------------------------------ npu-smi


def _run_npu_smi(probes: Probes, platform: Platform) -> tuple[str | None, Result | None]:
    """(stdout of `npu-smi info`, None) or (None, the FAIL that says why there is none)."""
    binary = probes.npu_smi or shutil.which("npu-smi", path=probes.env.get("PATH", os.defpath))
    mount = f"mount the host's /usr/local/bin/npu-smi, /usr/local/dcmi and driver ({run_script(platform)} does)"
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
    text, failure = _run_npu_smi(ctx.probes, ctx.platform)
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
    mask_var = ctx.platform.visible_devices_env
    for dev in unhealthy:
        make = warn if dev.health.lower() == "warning" else fail
        results.append(
            make(
                f"npu-smi.health.{dev.phy_id if dev.phy_id is not None else dev.npu}",
                f"{dev.label} health is {dev.health}",
                f"read the alarm with `npu-smi info -t health -i {dev.npu}`; leave the device out "
                f"({mask_var}) and have the host admin reset or replace it",
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
                f"pass every /dev/davinciN to the container ({run_script(ctx.platform)}) and mount the host's npu-smi",
            )
        )
    hbm = "/".join(f"{t // 1024} GB" for t in sorted({d.hbm_total_mb for d in devices if d.hbm_total_mb}))
    summary = f"{len(devices)} devices, {len(devices) - len(unhealthy)} healthy, HBM {hbm or 'unknown'} each"
    worst = max((r.status for r in results if r.check.startswith("npu-smi.health")), key=(WARN, FAIL).index, default=OK)
    results.insert(0, Result("npu-smi", worst, summary, "see the npu-smi.health lines" if worst != OK else "", details))
    return results
