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
    (the image scripts printed it so before: ``platform/images.py``, ``recipes/launch/cluster/containers.py``); still a
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
# pins.env holds every stack (platforms/stacks.py says what a stack is): the reference's keys plain, another stack's as
# V<digits>_<KEY> overrides (0.9.1 -> V091_; the stack object names its prefix). The merging lives here, with the file
# it reads; which stack a command serves is not this module's business.
_STACK_KEY = re.compile(r"^V\d+_")


def for_prefix(prefix: str) -> dict[str, str]:
    """A stack's pins: the plain keys, with the keys that start with ``prefix`` in their place (none for "")."""
    raw = load()
    merged = {k: v for k, v in raw.items() if not _STACK_KEY.match(k)}
    if prefix:
        merged.update({k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)})
    return merged


def common(key: str) -> str:
    """A pin every stack shares (the sandbox, the smoke model, the CPU image): no stack overrides it, so code that
    reads it needs no stack. A key a stack overrides is an error here: ask that stack (``Stack.pin``)."""
    raw = load()
    if key not in raw:
        raise KeyError(f"{key} is not pinned in {PINS_FILE}")
    overridden = [k for k in raw if _STACK_KEY.match(k) and _STACK_KEY.sub("", k) == key]
    if overridden:
        raise KeyError(f"{key} differs between stacks ({', '.join(overridden)}): read it from the stack")
    return raw[key]


def installed_verl() -> str | None:
    """The verl version installed in this interpreter (package metadata only: verl is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def requirements(spec: str) -> dict[str, str]:
    """A PY_PINS value as {distribution name: exact version}."""
    reqs: dict[str, str] = {}
    for item in spec.split():
        name, _, version = item.partition("==")
        if not version:
            raise PinsError(f"PY_PINS entry {item!r} is not an exact pin (name==version)")
        reqs[name.lower()] = version
    return reqs
