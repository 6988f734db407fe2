"""The bare-metal part of a ``retool-bundle``: verl's sdist at the pin and the code sandbox's wheels.

Why: on an offline machine without the kit's image, ``scripts/setup_verl.sh --source sdist`` downloaded verl's sdist
from the package index, and ``pip install ".[sandbox]"`` reached the index for the sandbox's HTTP side and for the
packages its warm workers import (``sandbox/settings.py`` ``DEFAULT_PRELOAD``: numpy, sympy, mpmath, scipy; a missing
one is skipped silently, ``sandbox/worker_main.py`` ``_preload``, so model code would meet an ImportError instead).
``retool-bundle create`` fetches them here (issue 33, journey "Offline bare metal"), ``install`` prints the commands
that use them with the network off (:func:`next_steps`); tests/retool/test_bundle_offline.py runs those commands in
a network namespace with no network.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from platforms.cli_errors import KitError
from platforms.stacks import Stack
from sandbox.settings import DEFAULT_PRELOAD

KIT_ROOT = Path(__file__).resolve().parents[2]
SDIST_DIR = "sdist"
VERL_REQUIREMENT = "verl.requirements.txt"
SANDBOX_REQUIREMENT = "sandbox.requirements.txt"
CONSTRAINTS = "constraints.txt"

Run = Callable[[Sequence[str]], None]  # runs a command, raises on failure


def sdist_name(stack: Stack) -> str:
    """The file name ``pip download`` gives ``stack``'s verl sdist (what setup_verl.sh --sdist takes)."""
    return f"verl-{stack.pin('VERL_VERSION')}.tar.gz"


def verl_requirement(stack: Stack) -> str:
    """``stack``'s verl as a hash-checked requirement (pins.env: its VERL_VERSION and VERL_SDIST_SHA256)."""
    return f"verl=={stack.pin('VERL_VERSION')} --hash=sha256:{stack.pin('VERL_SDIST_SHA256')}"


def pinned_constraints(stack: Stack) -> list[str]:
    """``stack``'s PY_PINS as constraints: the bundle's wheels are the versions every environment of it runs."""
    return [f"{name}=={version}" for name, version in stack.python_requirements().items()]


def preload_distributions() -> list[str]:
    """The third-party top-level modules the warm workers preload (their distributions have the same names)."""
    names: list[str] = []
    for module in DEFAULT_PRELOAD:
        top = module.split(".")[0]
        if top not in sys.stdlib_module_names and top not in names:
            names.append(top)
    return names


def kit_requirements(pyproject: Path = KIT_ROOT / "pyproject.toml") -> list[str]:
    """What ``pip install -e "KIT[sandbox]"`` reaches for: the build backend (pip builds the kit in an isolated
    environment, from ``--find-links`` when ``--no-index``), the kit's dependencies and its ``[sandbox]`` extra."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        project = tomllib.loads(pyproject.read_text())
    except (OSError, ValueError) as exc:
        raise KitError(f"{pyproject} cannot be read ({exc})", "run retool-bundle from the kit's checkout") from None
    return [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["sandbox"],
    ]


def sandbox_requirements() -> list[str]:
    return [*kit_requirements(), *preload_distributions()]


def download_sdist(out: Path, stack: Stack, run: Run) -> Path:
    """``stack``'s verl sdist into ``out/sdist``; pip checks its sha256 (pins.env) while it downloads."""
    folder = out / SDIST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    requirement = folder / VERL_REQUIREMENT
    requirement.write_text(verl_requirement(stack) + "\n")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "--require-hashes"]
    run([*pip, "-d", str(folder), "-r", str(requirement)])
    return folder / sdist_name(stack)


def download_sandbox_wheels(wheels: Path, stack: Stack, run: Run) -> None:
    """The ``[sandbox]`` extra with the kit's own dependencies and build backend, and the preloaded packages, as
    wheels (nothing to compile offline) under the stack's constraints (its numpy, like its every environment)."""
    wheels.mkdir(parents=True, exist_ok=True)
    constraints = wheels / CONSTRAINTS
    if not constraints.exists():
        constraints.write_text("\n".join(pinned_constraints(stack)) + "\n")
    requirement = wheels / SANDBOX_REQUIREMENT
    requirement.write_text("\n".join(sandbox_requirements()) + "\n")
    pip = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(wheels)]
    run([*pip, "-c", str(constraints), "-r", str(requirement)])


def next_steps(bundle: Path, files: Sequence[str], stack: Stack) -> list[str]:
    """The commands that use the bundled sdist and sandbox wheels, with the network off, for what the bundle has:
    ``stack``'s verl (the bundle's), built as that stack's patched tree."""
    lines = []
    sdist = f"{SDIST_DIR}/{sdist_name(stack)}"
    if sdist in files:
        setup = KIT_ROOT / "scripts" / "setup_verl.sh"
        tree = f"{stack.verl_tree.parent.name}/{stack.verl_tree.name}"  # build/verl<suffix>, in the kit it runs
        lines.append(
            f"bash {setup}{stack.cli_option} --source sdist --sdist {bundle / sdist}   # the patched tree in {tree}"
        )
    if f"wheels/{SANDBOX_REQUIREMENT}" in files:
        wheels = bundle / "wheels"
        lines.append(
            f"{sys.executable} -m pip install --no-index --find-links {wheels} -c {wheels / CONSTRAINTS} "
            f"-r {wheels / SANDBOX_REQUIREMENT} -e '{KIT_ROOT}[sandbox]'"
        )
        lines.append("retool-sandbox serve   # the code sandbox, on 127.0.0.1:8080")
    return lines
