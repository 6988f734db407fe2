"""The RL start-up's marks on the current stack (recipes/smoke/startup.py): each line a phase ends at is still printed
by the verl 0.9.1 code the mark names (tests/smoke/test_startup.py checks the reference's, and the phase arithmetic).

Runs under the current stack's interpreter (``bash scripts/test.sh --stack 0.9.1``); skips under another verl.
"""

from __future__ import annotations

from kit_testing import needs_verl_09
from startup_marks import check_marks_are_printed_by_their_code

pytestmark = needs_verl_09()


def test_the_marks_are_printed_by_verl_091() -> None:
    check_marks_are_printed_by_their_code("0.9.1")
