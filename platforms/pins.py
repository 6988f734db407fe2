"""The kit's version pins, read from the repo's ``pins.env`` (the one file that holds them).

``pins.env`` is shell syntax restricted to ``KEY=VALUE`` / ``KEY="VALUE"`` lines so that bash ``source``,
this reader and the Docker build args all see the same values without a second copy anywhere.
"""

from __future__ import annotations

import os
import re
import shlex
from functools import cache
from pathlib import Path

from platforms.cli_errors import UsageError

PINS_FILE = Path(os.environ.get("KIT_PINS_FILE", Path(__file__).resolve().parents[1] / "pins.env"))
_LINE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


class PinsError(UsageError, ValueError):
    """pins.env (or the file ``KIT_PINS_FILE`` names) is damaged: one error line, exit 2, from any command's boundary
    (the image scripts printed it so before: ``platform/images.py``, ``recipes/launch/containers.py``); still a
    ValueError for library callers."""

    def __init__(self, what: str) -> None:
        super().__init__(what, f"restore the kit's pins.env ({PINS_FILE}), e.g. git checkout -- pins.env")


def parse(text: str) -> dict[str, str]:
    """Parse pins.env text; anything but comments, blanks and KEY=VALUE lines is an error."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise PinsError(f"pins.env line {number}: expected KEY=VALUE, got {raw!r}")
        words = shlex.split(match["value"], comments=True)
        if len(words) > 1 or "$" in match["value"]:
            raise PinsError(f"pins.env line {number}: quote multi-word values and use no expansions: {raw!r}")
        key = match["key"]
        if key in pins:
            raise PinsError(f"pins.env line {number}: {key} is pinned twice")
        pins[key] = words[0] if words else ""
    return pins


@cache
def load(path: Path = PINS_FILE) -> dict[str, str]:
    return parse(path.read_text())


# ---------------------------------------------------------------------------------------------------------- stacks
# pins.env holds two stacks (platforms/stacks.py says what a stack is): the default's keys plain, another stack's as
# V<digits>_<KEY> overrides (0.9.1 -> V091_). The merging lives here, with the file it reads; stacks builds on it.
STACK_ENV = "KIT_STACK"


def stack_names() -> tuple[str, ...]:
    return tuple(load()["KIT_STACKS"].split())


def default_stack() -> str:
    return load()["KIT_DEFAULT_STACK"]


def stack_prefix(name: str) -> str:
    """The pins.env prefix of a non-default stack's keys: ``0.9.1`` -> ``V091_``."""
    return "V" + name.replace(".", "") + "_"


def for_stack(name: str) -> dict[str, str]:
    """The stack's pins: the plain keys, with the stack's ``V<digits>_`` keys in their place."""
    raw = load()
    prefixes = tuple(stack_prefix(n) for n in stack_names())
    merged = {k: v for k, v in raw.items() if not k.startswith(prefixes)}
    if name != default_stack():
        mine = stack_prefix(name)
        merged.update({k[len(mine) :]: v for k, v in raw.items() if k.startswith(mine)})
    return merged


def installed_verl() -> str | None:
    """The verl version installed in this interpreter (package metadata only: verl is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def active_stack() -> str:
    """The stack this process serves: ``KIT_STACK`` (every entry point's ``--stack`` sets it), else the stack whose
    verl is installed here, else the default. An unknown ``KIT_STACK`` is a usage error."""
    chosen = os.environ.get(STACK_ENV, "").strip()
    if chosen:
        if chosen not in stack_names():
            raise UsageError(
                f"unknown stack {chosen!r} ({STACK_ENV} or --stack)",
                f"choose one of {', '.join(stack_names())} (pins.env KIT_STACKS)",
            )
        return chosen
    version = (installed_verl() or "").split("+")[0]
    for name in stack_names():
        if version and version == for_stack(name)["VERL_VERSION"]:
            return name
    return default_stack()


def get(key: str, stack: str | None = None) -> str:
    """``key``'s pin in ``stack`` (default: the active stack, :func:`active_stack`)."""
    pins = for_stack(stack or active_stack())
    if key not in pins:
        raise KeyError(f"{key} is not pinned in {PINS_FILE}")
    return pins[key]


def python_requirements(stack: str | None = None) -> dict[str, str]:
    """PY_PINS as {distribution name: exact version}."""
    reqs: dict[str, str] = {}
    for spec in get("PY_PINS", stack).split():
        name, _, version = spec.partition("==")
        if not version:
            raise PinsError(f"PY_PINS entry {spec!r} is not an exact pin (name==version)")
        reqs[name.lower()] = version
    return reqs
