"""Stack checks: installed versions against pins.env, and verl's installed patch series against the kit's.

Why: the kit is tested on one pinned stack; a vllm-ascend or transformers one release off fails far from the cause
(an ignored variable, a changed signature hours into RL), and a verl installed without the kit's patches runs the
bugs they fix. Versions come from package metadata, never from imports, so a broken package is still reported. What
a platform's stack must carry comes from ``platform.pinned_stack`` / ``forbidden_packages``; nothing here keeps a
second copy.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from platforms import HardwareProfile, Platform, stacks
from platforms.doctor.probes import (
    Context,
    Result,
    dist_version,
    fail,
    find_package_dir,
    image_phrase,
    info,
    ok,
    skip,
    warn,
)

# ------------------------------------------------------------------------------------------------ versions


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


def expected_versions(platform: Platform, stack: stacks.Stack) -> list[Expected]:
    """What must be installed for ``platform`` on ``stack`` and at which pinned version, in report order: the
    platform's packages, then the Python pins (transformers and ray first), then verl."""
    rows = [
        Expected(p.dist, p.pin_key, stack.pin(p.pin_key) if p.pin_key else None, p.source)
        for p in platform.pinned_stack
    ]
    py = stack.python_requirements()
    first = [name for name in ("transformers", "ray") if name in py]
    rows += [Expected(name, "PY_PINS", py[name], "pip") for name in first + [n for n in py if n not in first]]
    rows.append(Expected("verl", "VERL_VERSION", stack.pin("VERL_VERSION"), "verl"))
    return rows


def _version_fix(exp: Expected, profile: HardwareProfile, stack: stacks.Stack) -> str:
    return {
        "image": f"use {image_phrase(profile, stack)}; this package comes with its base image, do not pip-install "
        "it over it",
        "verl": f"bash scripts/setup_verl.sh --stack {stack.name} --source sdist --install (verl at the "
        "stack's pin with its patches)",
        "venv": f"bash scripts/test.sh --stack {stack.name} --venv (re)creates {stack.venv_name}/ "
        "with the pinned CPU build of torch",
    }.get(exp.source, f"pip install '{exp.dist}=={exp.version}' (pins.env {exp.pin_key}; the kit images install it)")


#: Releases known to break a platform, with the reason the doctor gives: (dist, version, platform name) -> reason.
KNOWN_BAD = {
    ("verl", "0.9.0", "npu"): "verl 0.9.0 (the tag) carries #7205 (hccl ckpt engine split_weight_chunks), which breaks "
    "the HCCL weight update on NPU; it was reverted after the release (#7487, #7488) and 0.9.1 ships the reverted "
    "checkpoint_engine/hccl_checkpoint_engine.py",
}


def check_versions(ctx: Context) -> list[Result]:
    """Every pinned version of the checked stack (resolved by the doctor's entry point: --stack, KIT_STACK, else the
    installed verl's), the stack named first, so a report says which set of pins it held the machine to."""
    stack = ctx.stack
    results: list[Result] = [info("versions.stack", stack.describe(), stack=stack.name)]
    search = ctx.probes.search_path
    for exp in expected_versions(ctx.platform, stack):
        installed = dist_version(exp.dist, search)
        check = f"versions.{exp.dist}"
        if installed is None:
            summary = f"{exp.dist} is not installed (pinned {exp.version})"
            results.append(fail(check, summary, _version_fix(exp, ctx.profile, stack)))
        elif exp.version is None:
            results.append(info(check, f"{exp.dist} {installed} (from the base image, not pinned)"))
        elif _public(installed) != _public(exp.version):
            summary = f"{exp.dist} {installed}, the kit pins {exp.version} ({exp.pin_key}, stack {stack.name})"
            bad = KNOWN_BAD.get((exp.dist, _public(installed), ctx.platform.name))
            fix = _version_fix(exp, ctx.profile, stack)
            fix = f"{bad}: {fix}" if bad else fix
            results.append(fail(check, summary, fix, installed=installed, pinned=exp.version))
        else:
            results.append(ok(check, f"{exp.dist} {installed}", installed=installed))
    forbidden = ctx.platform.forbidden_packages
    present = [(name, v) for name in forbidden if (v := dist_version(name, search))]
    if present:
        platform = ctx.platform.name
        results.append(
            warn(
                "versions.forbidden",
                f"packages that shadow or break the {platform} stack are installed: "
                + ", ".join(f"{n} {v}" for n, v in present),
                f"pip uninstall -y {' '.join(n for n, _ in present)} (the {platform} image's constraints forbid "
                f"{', '.join(forbidden)}: python -m platforms constraints --hw {ctx.profile.name})",
                present=dict(present),
            )
        )
    return results


# ------------------------------------------------------------------------------------------------ patches


def _patch_id(patch: Path) -> str | None:
    """``git patch-id --stable`` of a patch file: what setup_verl.sh records, stable across rebases and renames. Run
    from ``/``: patch-id needs no repository, and a working directory inside one that git cannot use (a checkout
    mounted into a container: another owner, a worktree's .git link to a host path) made it fail there (seen in the
    CPU image under docker/run_cpu.sh, every patch "matched by name only")."""
    try:
        with patch.open("rb") as stdin:
            proc = subprocess.run(
                ["git", "patch-id", "--stable"], stdin=stdin, capture_output=True, timeout=30, cwd="/"
            )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.decode(errors="replace").split()
    return out[0] if proc.returncode == 0 and out else None


def check_patches(ctx: Context) -> list[Result]:
    """Each patch of the series against verl/version/kit_patches, the '<patch-id> <file> <subject>' record that
    scripts/setup_verl.sh --install writes into the installed package."""
    patches_dir = ctx.probes.patches_dir or ctx.stack.patch_dir
    series = sorted(patches_dir.glob("*.patch"))
    option = ctx.stack.cli_option
    rebuild = (
        f"bash scripts/setup_verl.sh{option} --source sdist --install (or rebuild the image: docker/build.sh{option})"
    )
    if not series:
        return [skip("patches", f"no patch series at {patches_dir} (pass --patches-dir)")]
    verl_dir = find_package_dir("verl", ctx.probes.search_path)
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
