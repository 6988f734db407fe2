"""Environment variables as data: one recommendation per entry, with its reason, rendered for bash or applied.

Why data and not shell: the same entries feed the launchers (applied in Python before the verl command is exec'd),
``python -m platforms env`` (sourced by the images and by ``ray start`` wrappers), the doctor (which
compares a live environment with them) and the tests, and a reviewer can judge each value by its reason.

An entry whose value is ``None`` must be UNSET: a leftover value from a user's shell or an image can be actively
harmful (``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`` breaks vLLM sleep mode), so "not mentioning it" is not
enough.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PHASES: tuple[str, ...] = ("sft", "rl")
BOTH: tuple[str, ...] = ("sft", "rl")
SFT: tuple[str, ...] = ("sft",)
RL: tuple[str, ...] = ("rl",)


def check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")


@dataclass(frozen=True)
class EnvVar:
    """One recommendation. ``value=None`` means the variable must be unset."""

    name: str
    value: str | None
    reason: str

    def shell_line(self) -> str:
        """One bash line; the reason goes into a trailing comment so ``source`` output stays self-documenting."""
        if self.value is None:
            return f"unset {self.name}  # {self.reason}"
        return f"export {self.name}={shlex.quote(self.value)}  # {self.reason}"


#: A platform's table: (the phases an entry applies to, the entry), in the order they are rendered.
EnvTable = Sequence[tuple[Sequence[str], EnvVar]]


def select(table: EnvTable, phase: str) -> list[EnvVar]:
    check_phase(phase)
    return [entry for phases, entry in table if phase in phases]


def applied(entries: Iterable[EnvVar], environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` with the entries applied: what ``source <(render_shell(entries))`` leaves behind."""
    out = dict(environ)
    for entry in entries:
        if entry.value is None:
            out.pop(entry.name, None)
        else:
            out[entry.name] = entry.value
    return out


def render_shell(entries: Iterable[EnvVar], header: str | None = None) -> str:
    """Bash text for ``source <(...)`` / ``eval``: values are shlex-quoted, reasons become comments."""
    lines = [f"# {header}"] if header else []
    lines.extend(entry.shell_line() for entry in entries)
    return "\n".join(lines) + "\n"
