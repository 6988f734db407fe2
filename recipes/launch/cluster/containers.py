"""``docker/run_npu.sh`` and ``docker/run_cuda.sh``: the ``docker run`` of a kit image, composed here.

The platform side (device nodes, driver mounts, ``--gpus``, the image of a profile) is
:mod:`platforms.images`; this module adds what the recipes need: the workspace at /workspace, the Hugging
Face cache, and the recipes' data roots (:data:`DATA_ROOTS`, names and defaults from
:mod:`recipes.launch.run_inputs.inputs`) mounted at the same absolute path and passed by name. Without them a recipe
inside writes its checkpoints to ``/root/checkpoints/...`` in the container's own layer, and ``--rm`` throws them away
(issue 14). Runs on the host with the system python3: stdlib only.

    python -m recipes.launch.cluster.containers [--prog NAME] npu|cuda [options] [--stack NAME] [--] [command...]

The stack (whose image, by its tag, runs) is resolved once in :func:`main`, before the parser: its help lists the
stack's image tags.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms import stacks
from platforms.base import DeviceAccess
from platforms.cli import add_stack_option
from platforms.cli_errors import EXIT_USAGE, UsageError, entry_point, fail
from platforms.env import PHASES
from platforms.images import (
    SANDBOX_NAMESPACE_ARGS,
    ScriptError,
    ScriptParser,
    choose_profile,
    device_nodes,
    device_run_args,
    image_profiles,
    require_docker,
    script_parser,
    short_name,
)
from platforms.profiles import PLATFORMS, Platform
from recipes.launch.run_inputs import inputs
from recipes.launch.run_inputs.mounts import EPHEMERAL_CKPT_ENV
from recipes.retool import folders

#: The roots the recipes read their model, data and checkpoints under, with the launcher's defaults.
DATA_ROOTS: dict[str, str] = {
    "MODELS_DIR": folders.DEFAULT_MODELS_DIR,
    "DATA_DIR": folders.DEFAULT_DATA_DIR,
    "CKPT_ROOT": folders.DEFAULT_CKPT_ROOT,
}
WORKSPACE = "/workspace"
CONTAINER_HF_CACHE = "/root/.cache/huggingface"

Say = Callable[[str, str], None]


@dataclass(frozen=True)
class Root:
    """A data root as the recipes will resolve it on this host: absolute, ``~`` from HOME."""

    name: str
    path: str
    source: str  # "env" or "default"


def _docker_size(text: str) -> str:
    """A size as ``docker run --shm-size`` takes it (``100g``, ``512m``, bytes): checked here, not by docker."""
    if not re.fullmatch(r"[1-9][0-9]*[bkmgBKMG]?", text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 100g, 512m or 1073741824")
    return text.strip()


def data_roots(environ: Mapping[str, str]) -> list[Root]:
    """Each of :data:`DATA_ROOTS`, resolved with the launcher's own rule (so the mount is the path it will read)."""
    out = []
    for name, default in DATA_ROOTS.items():
        value = environ.get(name, "").strip()
        out.append(Root(name, inputs._path(value or default, environ), "env" if value else "default"))
    return out


def root_args(roots: Sequence[Root], *, dry_run: bool, say: Say) -> list[str]:
    """``-v P:P -e NAME=P`` per root; a missing root is created (a dry run only says it would be)."""
    out: list[str] = []
    mounted: set[str] = set()
    for root in roots:
        if ":" in root.path:
            raise ScriptError(f"{root.name}={root.path}: docker -v cannot mount a path with ':' in it; pick another")
        where = Path(root.path)
        if not where.is_dir():
            if where.exists():
                raise ScriptError(f"{root.name}={root.path} is not a folder; set {root.name} to one")
            if dry_run:
                say("NOTE", f"{root.name} {root.path} does not exist; a real run creates it")
            else:
                try:
                    where.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise ScriptError(
                        f"cannot create {root.name} {root.path} ({exc.strerror}); create it or set {root.name} to a "
                        "writable folder"
                    ) from exc
                say("NOTE", f"created {root.name} {root.path}")
        if root.path not in mounted:  # two roots on one folder: docker refuses a duplicate mount point
            out += ["-v", f"{root.path}:{root.path}"]
            mounted.add(root.path)
        out += ["-e", f"{root.name}={root.path}"]
    return out


def device_access(platform: Platform) -> DeviceAccess:
    """The platform's docker run facts; main() only dispatches to platforms that have them."""
    assert platform.device_access is not None, f"{platform.name} has no image to run"
    return platform.device_access


def run_parser(platform: Platform, prog: str, stack: stacks.Stack) -> ScriptParser:
    access = device_access(platform)
    profiles = image_profiles(platform)
    images = ", ".join(f"{p.name}: {p.image.kit_tag(stack)}" for p in profiles if p.image)
    roots = ", ".join(f"{name} (default {default})" for name, default in DATA_ROOTS.items())
    parser = script_parser(
        prog,
        f"Runs the kit's {platform.name} image (docker/build.sh --hw {'|'.join(p.name for p in profiles)}) with "
        "this host's devices; the command defaults to bash.",
        f"Mounted: the workspace at {WORKSPACE} (the working directory), the Hugging Face cache at "
        f"{CONTAINER_HF_CACHE}, and the recipes' data roots at the same path as on this host, passed by name: "
        f"{roots}; missing ones are created. Checkpoints written anywhere else inside the container are lost with it "
        f"(--rm): the launcher refuses such a checkpoint dir unless {EPHEMERAL_CKPT_ENV}=1.",
    )
    parser.add_argument("--image", help=f"default: the profile's ({images})")
    parser.add_argument(
        "--hw",
        "--profile",
        dest="hw",
        choices=[p.name for p in profiles],
        help="which profile's image and node shape (default: KIT_HW, else this host's"
        + (
            f"; with no {access.node_prefix}N nodes, a dry run plans the reference profile)"
            if access.node_prefix
            else ")"
        ),
    )
    parser.add_argument("--workspace", default=os.getcwd(), metavar="DIR", help=f"mounted at {WORKSPACE} (default: .)")
    parser.add_argument(
        "--cache",
        metavar="DIR",
        default=os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface"),
        help=f"mounted at {CONTAINER_HF_CACHE} if it exists (default: $HF_HOME or ~/.cache/huggingface)",
    )
    parser.add_argument("--phase", default="rl", choices=PHASES, help="KIT_PHASE, the env the entry point applies")
    parser.add_argument("--name", help="container name")
    add_stack_option(parser)
    _add_docker_options(parser, access)
    parser.add_argument("--dry-run", action="store_true", help="print the docker run command instead of running it")
    parser.add_argument(
        "command",
        nargs="*",
        help="command to run in the container (default: bash); -- before it when it starts with a dash",
    )
    return parser


def _add_docker_options(parser: ScriptParser, access: DeviceAccess) -> None:
    """docker run's own knobs, those the platform's device access has (shm size, --gpus, device nodes) among them."""
    if access.shm_size:
        parser.add_argument(
            "--shm-size", type=_docker_size, default=access.shm_size, help=f"/dev/shm size (default: {access.shm_size})"
        )
    if access.gpus:
        parser.add_argument("--gpus", default=access.gpus, help=f"docker --gpus (default: {access.gpus})")
    parser.add_argument(
        "--privileged", action="store_true", help="run privileged (also lets the sandbox's bubblewrap make namespaces)"
    )
    parser.add_argument(
        "--no-bwrap",
        dest="bwrap",
        action="store_false",
        help="keep docker's default seccomp profile and masked /proc; by default the run adds "
        f"{' '.join(SANDBOX_NAMESPACE_ARGS)} so that the code sandbox's bubblewrap can isolate model-written code "
        "in namespaces (without: its fallback, rlimits + own uid + Landlock; retool-doctor's sandbox.bwrap says which)",
    )
    parser.add_argument(
        "--docker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more docker run argument (repeatable), e.g. --docker-arg=-e --docker-arg=HF_TOKEN",
    )
    if access.node_prefix or access.gpus or access.host_mounts:
        parser.add_argument(
            "--no-devices",
            dest="devices",
            action="store_false",
            help="start the image without the platform's devices and driver mounts, on a host that has none (image "
            "checks only: retool-doctor's image, versions, patches, env and sandbox groups; scripts/test_images.sh)",
        )
    if access.node_prefix:
        parser.add_argument(
            "--dev-root", default="/dev", metavar="DIR", help="where to look for the device nodes (default: /dev)"
        )


def split_command(parser: ScriptParser, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(options, command): the command starts after ``--`` or at the first word that is neither an option nor an
    option's value, as the shells did. ``--docker-arg X`` with a dash-led X is joined to ``--docker-arg=X``."""
    takes_value = {flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings}
    options: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return options, list(argv[i + 1 :])
        if not word.startswith("-"):
            return options, list(argv[i:])
        if word == "--docker-arg" and i + 1 < len(argv):
            options.append(f"--docker-arg={argv[i + 1]}")
            i += 2
            continue
        options.append(word)
        if word in takes_value and i + 1 < len(argv):
            options.append(argv[i + 1])
            i += 1
        i += 1
    return options, []


def compose(
    platform: Platform,
    argv: Sequence[str],
    stack: stacks.Stack,
    environ: Mapping[str, str],
    say: Say,
    prog: str = "python -m recipes.launch.cluster.containers",
) -> tuple[list[str], bool]:
    """(the docker run command, dry run?) for ``argv`` on ``stack`` (the default image is its tag: docker/build.sh
    --stack); raises :class:`ScriptError` on what the user must fix."""
    parser = run_parser(platform, prog, stack)
    own, command = split_command(parser, argv)
    args = parser.parse_args(own)
    access = device_access(platform)
    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise ScriptError(f"--workspace {args.workspace} is not a directory")
    dev_root = getattr(args, "dev_root", "/dev")
    nodes_present = access.node_prefix is None or bool(device_nodes(access, dev_root))
    profile = choose_profile(platform, args.hw, environ, dev_root, nodes_present)
    assert profile.image is not None
    # --init: docker's tini as PID 1 reaps what dies in the container; without it the processes `ray stop` ended in a
    # container of the CPU image stayed zombies (raylet, its agent) under a shell that never waits for them
    # (scripts/test_images.sh --two-node).
    cmd = ["docker", "run", "--rm", "--init"]
    if sys.stdin.isatty() and sys.stdout.isatty():
        cmd.append("-it")
    if args.name:
        cmd += ["--name", args.name]
    if args.privileged:
        cmd.append("--privileged")
    elif args.bwrap:
        cmd += SANDBOX_NAMESPACE_ARGS
    if getattr(args, "devices", True):
        gpus = getattr(args, "gpus", None)
        cmd += device_run_args(access, profile, dev_root, dry_run=args.dry_run, gpus=gpus, say=say)
    else:
        say(
            "NOTE",
            f"--no-devices: no {platform.name} devices or driver mounts in the container; only checks that "
            "need none can pass (retool-doctor --only image,versions,patches,env,sandbox)",
        )
    cmd += list(access.run_args)
    if getattr(args, "shm_size", None):
        cmd.append(f"--shm-size={args.shm_size}")
    cmd += ["-e", f"KIT_PHASE={args.phase}", "-v", f"{workspace.resolve()}:{WORKSPACE}", "-w", WORKSPACE]
    if Path(args.cache).is_dir():
        cmd += ["-v", f"{args.cache}:{CONTAINER_HF_CACHE}"]
    if not args.dry_run:
        require_docker()  # before creating folders for a run that cannot start
    cmd += root_args(data_roots(environ), dry_run=args.dry_run, say=say)
    cmd += [*args.docker_arg, args.image or profile.image.kit_tag(stack), *command]
    return cmd, args.dry_run


@entry_point("python -m recipes.launch.cluster.containers")
def main(argv: Sequence[str] | None = None) -> int:
    """``[--prog NAME] PLATFORM [options] [--] [command...]``; ``--prog`` is the script that execs this."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "python -m recipes.launch.cluster.containers"
    if argv[:1] == ["--prog"] and len(argv) > 1:
        prog, argv = argv[1], argv[2:]
    runnable = [platform.name for platform in PLATFORMS.values() if platform.device_access]
    if not argv or argv[0] not in runnable:
        asked = argv[:1] in (["-h"], ["--help"])
        print(
            f"Usage: {prog} {'|'.join(runnable)} [options] [--] [command...]", file=sys.stdout if asked else sys.stderr
        )
        return 0 if asked else EXIT_USAGE
    platform, argv = PLATFORMS[argv[0]], argv[1:]
    name = short_name(prog)

    def say(kind: str, message: str) -> None:
        print(f"{name}: {kind}: {message}", file=sys.stderr)

    try:
        stack = stacks.resolve(stacks.flag_in(argv))  # before the parser: its help shows the stack's image tags
        cmd, dry_run = compose(platform, argv, stack, os.environ, say, prog)
    except UsageError as exc:  # ScriptError, a KIT_HW that names no profile, a damaged pins.env (pins.PinsError)
        return fail(name, exc.what, exc.fix, exc.exit_code)
    if dry_run:
        print(shlex.join(cmd))
        return 0
    os.execvp(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
