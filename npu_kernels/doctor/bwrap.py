"""``sandbox.bwrap``: can the code sandbox's bubblewrap make its namespaces here?

Why: the sandbox isolates model-written code with bubblewrap where it can and otherwise falls back to rlimits, its
own uid and Landlock, quietly, at start-up. Inside a container started with docker's defaults it cannot (the
default seccomp profile denies the user namespace, the masked /proc the proc mount: npu_kernels/platform/images.py
``SANDBOX_NAMESPACE_ARGS``); the kit's run scripts lift both unless --no-bwrap. The doctor runs the same kind of
bwrap call the sandbox makes and says which isolation a run will get, and how to get the stronger one.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from npu_kernels.doctor.probes import Context, Result, ok, run_script, warn
from npu_kernels.platform.images import SANDBOX_NAMESPACE_ARGS

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
