"""``sandbox.bwrap``: can the code sandbox's bubblewrap make its namespaces here?

Why: the sandbox isolates model-written code with bubblewrap where it can and otherwise falls back to rlimits, its
own uid and Landlock, quietly, at start-up. Inside a container started with docker's defaults it cannot (each
namespace root asks for is refused: platforms/images.py ``SANDBOX_NAMESPACE_ARGS``); the kit's run
scripts grant them unless --no-bwrap. The doctor makes the bwrap call the sandbox makes (probes.py
:func:`~platforms.doctor.probes.probe_bwrap`) and says which isolation a run will get, and how to get bwrap's.
"""

from __future__ import annotations

from platforms.doctor.probes import Context, Result, ok, run_script, warn
from platforms.images import SANDBOX_NAMESPACE_ARGS


def check_bwrap(ctx: Context) -> Result:
    problem = ctx.probes.bwrap_probe()
    if problem is None:
        return ok("sandbox.bwrap", "bubblewrap makes its namespaces here: the sandbox isolates code with them")
    if problem == "bwrap is not installed":
        fix = "install bubblewrap (apt-get install bubblewrap; the kit's images carry it)"
    elif ctx.probes.env.get("KIT_IMAGE"):
        fix = (
            f"start the container with {run_script(ctx.platform)} without --no-bwrap, or add "
            f"{' '.join(SANDBOX_NAMESPACE_ARGS)} to your docker run"
        )
    else:
        fix = "allow user namespaces (Debian: sysctl kernel.unprivileged_userns_clone=1), or run the sandbox as root"
    return warn(
        "sandbox.bwrap",
        f"the sandbox cannot use bubblewrap here ({problem}): it runs model code under its fallback (rlimits, own "
        "uid, Landlock), without namespaces",
        fix,
        reason=problem,
    )
