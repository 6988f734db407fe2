"""The kit's images as commands: ``docker build`` for a hardware profile, and how a ``docker run`` of one reaches the
platform's devices.

docker/build.sh and docker/run_*.sh exec this module (``run`` through the launcher's ``cluster/containers.py``,
which adds the recipes' data roots), so the shells hold no hardware table: the Dockerfile, base image, build args and
tag are the profile's :class:`~platforms.profiles.Image`, the devices per node are the profile's, and what a
container needs to see a platform's devices is the platform's
:attr:`~platforms.base.Platform.device_access`. It runs on the host, where only a system python3 is
guaranteed: stdlib only.

    python -m platforms.images build --hw PROFILE [--tag T] [--dry-run] [-- DOCKER_BUILD_ARGS]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from platforms import stacks
from platforms.base import DeviceAccess, Platform
from platforms.cli_errors import EXIT_USAGE, UsageError, entry_point, error_line, fail
from platforms.profiles import PROFILES, HardwareProfile, default_profile_on, get_profile

#: The repository root: the build context, and where the Dockerfiles are.
KIT_ROOT = Path(__file__).resolve().parents[1]
#: What ``docker run`` needs for the code sandbox's bubblewrap to make its namespaces inside the container. The sandbox
#: runs as root there and so asks bwrap for no user namespace (it keeps per-slot uids: sandbox/isolation.py
#: bwrap_prefix): the mount, pid and net namespaces then need CAP_SYS_ADMIN, the new netns's loopback CAP_NET_ADMIN,
#: pivot_root a seccomp profile that allows it, and the new /proc an unmasked one. Measured (docker 20.10), each
#: missing in turn: "Creating new namespace failed", "loopback: Failed RTM_NEWADDR", "pivot_root: Operation not
#: permitted", "Can't mount proc on /newroot/proc". Request code still runs with every capability dropped (bwrap
#: --cap-drop ALL, then its own uid). The run scripts add these unless --no-bwrap; without them the sandbox falls back
#: to rlimits, its own uid and Landlock.
SANDBOX_NAMESPACE_ARGS = (
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "systempaths=unconfined",
)
#: Set by every kit Dockerfile to the profile the image was built for: its Python carries that profile's pinned
#: stack, so a CPU image runs the smoke with it instead of building the .venv a bare CPU host needs.
IMAGE_ENV = "KIT_IMAGE"
VERL_SOURCES = ("sdist", "git")


class ScriptError(UsageError):
    """A problem the user must fix: printed as ``<script>: error: <message>``, exit 2 (platforms.cli_errors)."""


class ScriptParser(argparse.ArgumentParser):
    """argparse with the shells' conventions: ``Usage:``, and ``<script>: error: ...`` (exit 2) as every command."""

    def format_usage(self) -> str:
        return super().format_usage().replace("usage:", "Usage:", 1)

    def format_help(self) -> str:
        return super().format_help().replace("usage:", "Usage:", 1)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, error_line(short_name(self.prog), message) + "\n")


def short_name(prog: str) -> str:
    """``docker/build.sh`` -> ``build.sh`` (the prefix of the shells' messages); a ``python -m`` line stays whole."""
    return prog if " " in prog else Path(prog).name


def script_parser(prog: str, description: str, *epilog: str) -> ScriptParser:
    """A :class:`ScriptParser`; each text paragraph is wrapped, a paragraph with line breaks (a table) kept as is."""
    return ScriptParser(
        prog=prog,
        description=_paragraphs(description),
        epilog=_paragraphs(*epilog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _paragraphs(*parts: str) -> str:
    return "\n\n".join(part if "\n" in part else textwrap.fill(part, width=100) for part in parts)


def image_profiles(platform: Platform | None = None) -> list[HardwareProfile]:
    """The profiles that have an image (optionally: of one platform), in registry order."""
    return [p for p in PROFILES.values() if p.image is not None and (platform is None or p.platform is platform)]


# ---------------------------------------------------------------------------------------------------------- build
def build_args(
    profile: HardwareProfile, stack: stacks.Stack, verl_source: str, pip_index_url: str, verify: bool
) -> dict[str, str]:
    """Every ``--build-arg`` of the profile's image on ``stack``: the base image, the build options, then the pinned
    versions."""
    assert profile.image is not None
    pinned = list(profile.image.pinned_build_args(stack).items())
    options = {
        "KIT_HW": profile.name,
        "KIT_STACK": stack.name,  # the image's stack: setup_verl.sh's pins and series, the doctor's checks
        "VERL_SOURCE": verl_source,
        "PIP_INDEX_URL": pip_index_url,
        "KIT_VERIFY": "1" if verify else "0",
    }
    return dict(pinned[:2]) | options | dict(pinned[2:])


def build_command(
    profile: HardwareProfile,
    stack: stacks.Stack,
    *,
    tag: str | None = None,
    verl_source: str = "sdist",
    pip_index_url: str = "",
    verify: bool = True,
    docker_platform: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``docker build`` command line of the profile's image (the context is the repository root)."""
    assert profile.image is not None
    cmd = ["docker", "build", "-f", str(KIT_ROOT / profile.image.dockerfile), "-t", tag or profile.image.kit_tag(stack)]
    if docker_platform:
        cmd += ["--platform", docker_platform]
    for key, value in build_args(profile, stack, verl_source, pip_index_url, verify).items():
        cmd += ["--build-arg", f"{key}={value}"]
    return [*cmd, *extra, str(KIT_ROOT)]


def _images_table(stack: stacks.Stack) -> str:
    rows = [
        (p.name, p.image.dockerfile, f"FROM {p.image.base(stack)}", p.image.kit_tag(stack))
        for p in image_profiles()
        if p.image
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join("  " + "  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows)


def build_parser(prog: str, stack: stacks.Stack) -> ScriptParser:
    parser = script_parser(
        prog,
        "Builds the retool-npu-kit image of one hardware profile from the repository root. Every version and the base "
        "image come from pins.env as build args (the Dockerfiles hold none), so an image is always the pinned stack.",
        f"Images of {stack.describe()} (profile, Dockerfile, base image, default tag; --stack picks "
        "the other stack's):\n" + _images_table(stack),
        "Everything after -- goes to docker build unchanged.",
    )
    parser.add_argument("--hw", "--profile", dest="hw", required=True, choices=[p.name for p in image_profiles()])
    parser.add_argument(
        "--tag",
        metavar="NAME",
        help="image name (default: the profile's tag above, which docker/run_*.sh use by default)",
    )
    parser.add_argument(
        "--verl-source",
        default="sdist",
        choices=VERL_SOURCES,
        help="how scripts/setup_verl.sh gets verl: the PyPI sdist (sha256 checked against pins.env; default) or the "
        "git tag",
    )
    parser.add_argument(
        "--pip-index-url",
        default="",
        metavar="URL",
        help="package index for the build (default: whatever the base image is configured with)",
    )
    parser.add_argument(
        "--platform",
        dest="docker_platform",
        metavar="PLATFORM",
        help="docker build --platform, e.g. linux/arm64 for Kunpeng hosts (default: the builder's)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the build-time retool-doctor check of versions and patches against pins.env",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the docker build command instead of running it")
    from platforms.cli import add_stack_option  # platforms.cli imports this module's neighbours: import at use

    add_stack_option(parser)
    return parser


def split_at_double_dash(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def main_build(argv: Sequence[str], prog: str = "python -m platforms.images build") -> int:
    own, extra = split_at_double_dash(argv)
    stack = stacks.export(stacks.resolve(stacks.flag_in(own)))  # before the parser: its help lists the stack's images
    args = build_parser(prog, stack).parse_args(own)
    cmd = build_command(
        PROFILES[args.hw],
        stack,
        tag=args.tag,
        verl_source=args.verl_source,
        pip_index_url=args.pip_index_url,
        verify=not args.no_verify,
        docker_platform=args.docker_platform,
        extra=extra,
    )
    if args.dry_run:
        # One line, shell-quoted: it can be pasted, and tests parse it with shlex.
        print("DOCKER_BUILDKIT=1 " + shlex.join(cmd))
        return 0
    docker = require_docker()
    # BuildKit reads docker/<Dockerfile>.dockerignore, which keeps .venv/, build/ and .git out of the context.
    os.execvpe(docker, cmd, {**os.environ, "DOCKER_BUILDKIT": "1"})
    return 0  # not reached


def require_docker() -> str:
    found = shutil.which("docker")
    if not found:
        raise ScriptError("docker not found (install it, or add --dry-run to print the command)")
    return found


# ---------------------------------------------------------------------------------------------- devices in a run
def device_nodes(access: DeviceAccess, dev_root: str | os.PathLike[str]) -> list[str]:
    """The platform's device nodes under ``dev_root``, in numeric order (davinci10 after davinci9; a glob like
    ``davinci?`` would stop at davinci9, Ray's old A3 undercount)."""
    pattern = access.node_pattern()
    if pattern is None:
        return []
    try:
        names = os.listdir(dev_root)
    except OSError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := pattern.match(name))]
    return [name for _, name in sorted(found)]


def choose_profile(
    platform: Platform,
    hw: str | None,
    environ: Mapping[str, str],
    dev_root: str | os.PathLike[str],
    nodes_present: bool,
) -> HardwareProfile:
    """``--hw``, else the kit's one default rule bound to this platform's images
    (:func:`~platforms.profiles.default_profile_on`): ``KIT_HW`` (it must name one of them), else this
    host's profile, else, with no device nodes to go by (a login node planning a run), the reference profile."""
    if hw:
        return get_profile(hw)
    return default_profile_on(
        platform,
        environ,
        dev_root,
        choices=image_profiles(platform),
        devices_here=nodes_present,
        refuse_other=f"this script runs {platform.name} images",
    )


def _device_arg(name: str, dev_root: str) -> str:
    """The container always sees the node as /dev/<name>; a dev root other than /dev (tests' fake trees) is mapped."""
    return f"--device=/dev/{name}" if dev_root == "/dev" else f"--device={dev_root}/{name}:/dev/{name}"


def device_run_args(
    access: DeviceAccess,
    profile: HardwareProfile,
    dev_root: str,
    *,
    dry_run: bool,
    gpus: str | None,
    say: Callable[[str, str], None],
) -> list[str]:
    """``docker run`` arguments that give the container the platform's devices and driver.

    ``say(kind, message)`` reports WARNING/NOTE lines. Raises :class:`ScriptError` where the shell used to die.
    A dry run on a host without device nodes (a login node) prints the command for the profile's node shape.
    """
    out: list[str] = []
    if access.gpus is not None:
        out += ["--gpus", gpus or access.gpus]
    if access.node_prefix:
        nodes = device_nodes(access, dev_root)
        label = f"{dev_root}/{access.node_prefix}N"
        expected = profile.devices_per_node or 0
        if not nodes:
            if not dry_run:
                raise ScriptError(
                    f"no {label} device nodes: {access.no_nodes_hint} (add --dry-run to print the command anyway)"
                )
            nodes = [f"{access.node_prefix}{i}" for i in range(expected)]
            say(
                "NOTE",
                f"no {label} device nodes here (a login node?): the command below assumes the {profile.name} "
                f"profile's node, {expected} devices {access.node_prefix}0..{access.node_prefix}{expected - 1} and "
                "the control devices; run it on such a node",
            )
        else:
            if len(nodes) != expected:
                say(
                    "WARNING",
                    f"{len(nodes)} {access.node_prefix} devices, an {profile.name.upper()} node has {expected}; "
                    f"passing the {len(nodes)} present",
                )
            for control in access.control_nodes:
                if not Path(dev_root, control).exists():
                    raise ScriptError(f"{dev_root}/{control} is missing: the NPU driver is not installed or not loaded")
        out += [_device_arg(name, dev_root) for name in [*nodes, *access.control_nodes]]
    for mount in access.host_mounts:
        if not Path(mount.source).exists():
            if not dry_run:
                raise ScriptError(f"{mount.source} is missing on this host (docker would mount an empty directory)")
            say("WARNING", f"{mount.source} is missing on this host")
        out += ["-v", mount.volume()]
    for mount in access.optional_mounts:
        if Path(mount.source).exists():
            out += ["-v", mount.volume()]
    return out


@entry_point("python -m platforms.images")
def main(argv: Sequence[str] | None = None) -> int:
    """``[--prog NAME] build [options]``: ``--prog`` is the script that execs this (docker/build.sh), for messages."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "python -m platforms.images"
    if argv[:1] == ["--prog"] and len(argv) > 1:
        prog, argv = argv[1], argv[2:]
    else:
        if argv[:1] != ["build"]:
            print(f"Usage: {prog} build [options]   (build --help for the options)")
            return 0 if argv[:1] in (["-h"], ["--help"]) else EXIT_USAGE
        prog, argv = f"{prog} build", argv[1:]
    try:
        return main_build(argv, prog)
    except UsageError as exc:  # ScriptError, a KIT_HW that names no profile, a damaged pins.env (pins.PinsError)
        return fail(short_name(prog), exc.what, exc.fix, exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
