"""The ``image`` check: which kit image this process runs in, and whether that image's base is the real one.

Why: scripts/test_images.sh builds the kit's images on machines that cannot reach the registries, on stand-in bases
made from local material (docker/standin/). Such a base carries :data:`STANDIN_MARKER`; an image built on it runs
the kit's own checks but has none of the real base's accelerator stack (no CANN, no vendor torch), and must never
be taken for the real thing: inside it, the doctor says so on every run.
"""

from __future__ import annotations

import json

from platforms.doctor.probes import Context, Result, info, ok, warn
from platforms.images import IMAGE_ENV


def _profile_result(ctx: Context) -> Result:
    built_for = ctx.probes.env.get(IMAGE_ENV, "")
    if not built_for:
        return info("image.profile", f"not inside a kit image ({IMAGE_ENV} unset)")
    if built_for != ctx.profile.name:
        return warn(
            "image.profile",
            f"this image was built for --hw {built_for}, the doctor checks --hw {ctx.profile.name}",
            f"run the --hw {ctx.profile.name} image (docker/build.sh --hw {ctx.profile.name}), or check --hw "
            f"{built_for}",
            built_for=built_for,
        )
    return ok("image.profile", f"kit image built for --hw {built_for}", built_for=built_for)


def _base_result(ctx: Context) -> Result | None:
    marker = ctx.probes.standin_marker
    if not marker.is_file():
        return ok("image.base", "real base image (no stand-in marker)") if ctx.probes.env.get(IMAGE_ENV) else None
    fix = "rebuild on the real base (docker/build.sh on a host that can pull it) before any real run"
    try:
        facts = json.loads(marker.read_text())
        replaced, made_by = facts["stand_in_for"], facts["made_by"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return warn("image.base", f"STAND-IN base ({marker} unreadable: {exc})", fix, marker=str(marker))
    return warn(
        "image.base",
        f"STAND-IN base: not {replaced} but a local substitute made by {made_by}; reproduces: "
        f"{facts.get('reproduces', '?')}; differs: {facts.get('differs', '?')}",
        fix,
        stand_in_for=replaced,
        marker=str(marker),
    )


def check_image(ctx: Context) -> list[Result]:
    base = _base_result(ctx)
    return [_profile_result(ctx), *([base] if base else [])]
