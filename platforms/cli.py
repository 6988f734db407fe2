"""``python -m platforms``: what the platform and hardware profiles know, for people and shell scripts.

Shell scripts ask here instead of keeping a table of their own: the environment to source, the setup scripts
(CANN, ATB) present on this machine, a profile's facts (devices per node, image), the images' pip constraints.

    python -m platforms [detect] [--json]
    python -m platforms env --phase sft|rl [--hw PROFILE]
    python -m platforms overrides --phase sft|rl [--hw PROFILE]
    python -m platforms setup-scripts [--hw PROFILE] [--required]
    python -m platforms facts --hw PROFILE [--json]
    python -m platforms constraints --hw PROFILE   (a profile with an image)
    python -m platforms default-hardware
    python -m platforms stack [--stack NAME]      (shell assignments of the resolved stack)

``--profile`` is the same option as ``--hw`` (the hardware profile); ``--hw`` is kept because users type it. The
profile names, here and in every CLI's choices and help, come from :data:`~platforms.profiles.PROFILES`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from platforms import stacks
from platforms.cli_errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ArgumentParser, entry_point, fail
from platforms.env import PHASES, render_shell
from platforms.npu import import_torch_npu
from platforms.profiles import (
    PLATFORM_OVERRIDE_ENV,
    PLATFORMS,
    PROFILE_ENV,
    PROFILE_NAMES,
    PROFILES,
    HardwareProfile,
    current_platform,
    default_hardware,
    profile_of,
)

PROG = "python -m platforms"


def add_profile_option(parser: argparse.ArgumentParser, help_text: str, **kwargs: Any) -> None:
    """``--profile`` / ``--hw``: the one spelling of the hardware-profile option across the kit's CLIs."""
    parser.add_argument("--profile", "--hw", dest="profile", choices=PROFILE_NAMES, help=help_text, **kwargs)


def stack_name_arg(text: str) -> str:
    """A stack's name, checked where argparse reads it (before anything the command would start)."""
    if text not in stacks.names():
        raise argparse.ArgumentTypeError(f"unknown stack {text!r}: choose one of {', '.join(stacks.names())}")
    return text


def add_stack_option(parser: argparse.ArgumentParser, **kwargs: Any) -> None:
    """``--stack``: the one spelling of the stack option across the kit's CLIs; the entry point resolves it once
    (:func:`platforms.stacks.resolve`: the flag, KIT_STACK, this interpreter's verl, the default), which checks it."""
    parser.add_argument(
        "--stack",
        # checked as it is read where the parser is the boundary's (one line, before the entry point's work); the
        # other parsers' entry points refuse it in stacks.resolve, one line too, where a usage block would print here
        type=stack_name_arg if isinstance(parser, ArgumentParser) else None,
        metavar="|".join(stacks.names()),
        **({"default": None} | kwargs),
        help=f"which stack: {stacks.default_name()} (the reference, the default) or "
        + ", ".join(n for n in stacks.names() if n != stacks.default_name())
        + f" (the current); default: {stacks.ENV_VAR}, else the stack of the verl installed here",
    )


def profile_shape(profile: HardwareProfile) -> str:
    """A profile's node in a few words, from its data: ``8 x 64 GB npu``; the CPU profile's ranks are processes."""
    if not profile.devices_per_node:
        return "worker processes"
    return f"{profile.devices_per_node} x {profile.memory_gb_per_device} GB {profile.platform.name}"


def profiles_help() -> str:
    """Every profile with its node shape, for help texts (``a2 (8 x 64 GB npu), ...``), from :data:`PROFILES`."""
    return ", ".join(f"{p.name} ({profile_shape(p)})" for p in PROFILES.values())


def _format_value(value: Any) -> str:
    return "none" if value is None else str(value)


def _profile(args: argparse.Namespace) -> HardwareProfile:
    return PROFILES[args.profile or default_hardware()]


def _cmd_detect(args: argparse.Namespace, stack: stacks.Stack) -> int:
    platform = current_platform()
    props = platform.properties(stack, args.dev_root)
    props["source"] = PLATFORM_OVERRIDE_ENV if os.environ.get(PLATFORM_OVERRIDE_ENV, "").strip() else "auto"
    props["hardware"] = profile_of(platform, args.dev_root)
    props["torch_npu"] = import_torch_npu()[1]
    if args.json:
        print(json.dumps(props, indent=2))
    else:
        for key, value in props.items():
            print(f"{key}: {_format_value(value)}")
    return EXIT_OK


def _cmd_env(args: argparse.Namespace, stack: stacks.Stack) -> int:
    profile = _profile(args)
    header = f"retool-npu-kit environment: phase={args.phase} hw={profile.name} (python -m platforms env)"
    sys.stdout.write(render_shell(profile.env(args.phase, stack), header=header))
    return EXIT_OK


def _cmd_overrides(args: argparse.Namespace, stack: stacks.Stack) -> int:
    platform = PROFILES[args.profile].platform if args.profile else current_platform()
    for override in platform.verl_overrides(args.phase, stack):
        print(override)
    return EXIT_OK


def _cmd_setup_scripts(args: argparse.Namespace, stack: stacks.Stack) -> int:
    """The setup scripts present here, one path per line, for ``source``; with ``--required`` a missing one fails.

    Without ``--hw`` every platform's scripts are listed (only NPU has any): they must be sourced *before* the
    platform can be detected, since torch_npu cannot load without CANN's environment.
    """
    platforms = [PROFILES[args.profile].platform] if args.profile else list(PLATFORMS.values())
    missing = []
    for platform in platforms:
        for script in platform.setup_script_paths():
            if script.is_file():
                print(script)
            else:
                missing.append(script)
    if args.required and missing:
        variable = next(p.install_root_env for p in platforms if p.install_root_env)
        for script in missing:
            fail(PROG, f"{script} not found", f"set {variable} if it is installed elsewhere")
        return EXIT_FAILED
    return EXIT_OK


def facts(profile: HardwareProfile, stack: stacks.Stack) -> dict[str, Any]:
    """What shell scripts and images need to know about a profile on ``stack``, flat."""
    platform = profile.platform
    out: dict[str, Any] = {
        "profile": profile.name,
        "platform": platform.name,
        "devices_per_node": profile.devices_per_node,
        "memory_gb_per_device": profile.memory_gb_per_device,
        "ray_resource": platform.ray_resource,
        "visible_devices_env": platform.visible_devices_env,
        "socket_ifname_vars": " ".join(platform.socket_ifname_vars),
        "setup_scripts": " ".join(str(p) for p in platform.setup_script_paths()),
    }
    if profile.image is not None:
        out |= {
            "dockerfile": profile.image.dockerfile,
            "base_image": profile.image.base(stack),
            "image": profile.image.kit_tag(stack),
        }
    return out


def _cmd_facts(args: argparse.Namespace, stack: stacks.Stack) -> int:
    found = facts(_profile(args), stack)
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for key, value in found.items():
            print(f"{key}: {_format_value(value)}")
    return EXIT_OK


def constraints(profile: HardwareProfile, stack: stacks.Stack, python: str = sys.executable) -> list[str]:
    """pip constraints of the profile's image on ``stack``: the platform's packages at its pins, PY_PINS, and ``<0``
    for every forbidden package (no version satisfies it, so anything that would pull one in fails loudly;
    constraints can only narrow versions, ``<0`` is how they say "never"). A stack package pinned by its image
    (``pin_key`` None) is held at the version ``python`` has installed."""
    lines = []
    for package in profile.platform.pinned_stack:
        if package.pin_key is not None:
            lines.append(f"{package.dist}=={stack.pin(package.pin_key)}")
            continue
        code = f"import importlib.metadata as m; print(m.version({package.dist!r}))"
        version = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        lines.append(f"{package.dist}=={version}")
    lines += [f"{name}=={version}" for name, version in stack.python_requirements().items()]
    if profile.platform.forbidden_packages:
        lines.append(f"# never on {profile.platform.name}: they shadow or break its stack")
        lines += [f"{name}<0" for name in profile.platform.forbidden_packages]
    return lines


def _cmd_constraints(args: argparse.Namespace, stack: stacks.Stack) -> int:
    profile = PROFILES[args.profile]
    if profile.image is None:
        return fail(PROG, f"profile {profile.name} has no image", "give a profile of a device platform", EXIT_USAGE)
    print(f"# pip constraints of the retool-npu-kit image for --hw {profile.name}, from pins.env")
    print("# (python -m platforms constraints); unset PIP_CONSTRAINT to step outside them on purpose.")
    try:
        lines = constraints(profile, stack, args.python)
    except (OSError, subprocess.CalledProcessError) as exc:
        return fail(PROG, f"cannot read the image's versions with {args.python}: {exc}")
    print("\n".join(lines))
    return EXIT_OK


def _cmd_default_hardware(args: argparse.Namespace, stack: stacks.Stack) -> int:
    print(default_hardware(dev_root=args.dev_root))
    return EXIT_OK


def _cmd_stack(args: argparse.Namespace, stack: stacks.Stack) -> int:
    """The resolved stack as shell assignments, for ``eval`` (scripts/lib/stack.sh): the shell's view of the stacks
    is this one, so the two cannot drift."""
    for key, value in stack.shell_view().items():
        print(f"{key}={shlex.quote(value)}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=f"The platform ({'/'.join(PLATFORMS)}) and hardware profiles ({'/'.join(PROFILES)}) as the kit "
        f"knows them. Set {PLATFORM_OVERRIDE_ENV}={'|'.join(PLATFORMS)} to force a platform, {PROFILE_ENV} to pick "
        "the default profile.",
    )
    parser.add_argument("--json", action="store_true", help="detect: print the properties as JSON")
    parser.add_argument("--dev-root", default="/dev", help="where to count davinci device nodes (default /dev)")
    sub = parser.add_subparsers(dest="command")

    det = sub.add_parser("detect", help="print the detected platform, one 'key: value' per line (default command)")
    # SUPPRESS: a subparser default would overwrite a value given before the subcommand.
    det.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the properties as JSON")
    det.add_argument("--dev-root", default=argparse.SUPPRESS, help="where to count davinci device nodes")

    env = sub.add_parser("env", help="print 'export NAME=value  # reason' lines for source/eval")
    env.add_argument("--phase", required=True, choices=PHASES)
    add_profile_option(env, "hardware profile (default: KIT_HW, else this machine's)")

    ovr = sub.add_parser("overrides", help="print the Hydra overrides verl needs, one per line")
    ovr.add_argument("--phase", required=True, choices=PHASES)
    add_profile_option(ovr, "take the platform from this profile instead of detecting it")

    setup = sub.add_parser("setup-scripts", help="print the setup scripts (CANN, ATB) present here, to source")
    add_profile_option(setup, "only this profile's platform (default: every platform's, before detection)")
    setup.add_argument("--required", action="store_true", help="exit 1 naming any that is missing")

    fact = sub.add_parser("facts", help="a profile's facts for scripts: devices per node, image, Ray resource")
    add_profile_option(fact, "hardware profile (default: KIT_HW, else this machine's)")
    fact.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print them as JSON")

    cons = sub.add_parser("constraints", help="print the pip constraints of a profile's image")
    add_profile_option(cons, "hardware profile with an image", required=True)
    cons.add_argument(
        "--python",
        default=os.environ.get("PYTHON", sys.executable),
        help="interpreter to read an image-provided version with (default: $PYTHON, else this one)",
    )

    dflt = sub.add_parser("default-hardware", help="print the profile entry points use when given none")
    dflt.add_argument("--dev-root", default=argparse.SUPPRESS, help="where to count davinci device nodes")

    sub.add_parser("stack", help="print the resolved stack's pins and folders as shell assignments (for eval)")
    add_stack_option(parser)
    for choice in sub.choices.values():  # --stack after the command too, as the printed commands place it
        add_stack_option(choice, default=argparse.SUPPRESS)
    return parser


HANDLERS = {
    None: _cmd_detect,
    "detect": _cmd_detect,
    "env": _cmd_env,
    "overrides": _cmd_overrides,
    "setup-scripts": _cmd_setup_scripts,
    "facts": _cmd_facts,
    "constraints": _cmd_constraints,
    "default-hardware": _cmd_default_hardware,
    "stack": _cmd_stack,
}


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stack = stacks.resolve(args.stack)  # the one place this command chooses its stack
    return HANDLERS[args.command](args, stack)  # a bad KIT_DEVICE or KIT_HW raises profiles.UnknownHardwareError
