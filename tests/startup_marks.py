"""Shared by tests/smoke/test_startup.py (the reference) and tests/stack091/test_startup_marks_091.py (the current
stack): each RL start-up mark's line (recipes/smoke/startup.py) is still printed by the code the mark names, found in
the test interpreter's install (or, for the kit's own line, in this checkout)."""

from __future__ import annotations

from pathlib import Path

from kit_testing import REPO_ROOT

from recipes.smoke import startup


def _site_packages() -> Path:
    import verl

    return Path(verl.__file__).parent.parent


def check_marks_are_printed_by_their_code(stack: str) -> None:
    """Each mark's printing code for ``stack`` holds the line's text: a verl or Ray upgrade that rewords or drops one
    fails here, not as a phase that silently folds into the next."""
    for mark in startup.MARKS:
        assert stack in mark.printed_by or startup.KIT in mark.printed_by, f"{mark.phase}: nothing names {stack}'s line"
        where, (relative, code) = mark.printer(stack)
        root = REPO_ROOT if where == startup.KIT else _site_packages()
        assert code in (root / relative).read_text(), f"{mark.phase}: {code!r} is no longer in {root / relative}"
