"""A SIGTERM handler a test leaves behind is undone after it (tests/kit_signals.py; tests/conftest.py)."""

from __future__ import annotations

import signal

import kit_signals


def _returns(signum: int, frame: object) -> None:
    """The kind that hung a forked pool worker: it returns, so a blocked wait goes on."""


def test_a_handler_installed_inside_is_put_back_on_exit() -> None:
    before = {sig: signal.getsignal(sig) for sig in kit_signals.RESTORED}
    with kit_signals.handlers_restored():
        for sig in kit_signals.RESTORED:
            signal.signal(sig, _returns)
    assert {sig: signal.getsignal(sig) for sig in kit_signals.RESTORED} == before


def test_the_autouse_fixture_wraps_every_test(request) -> None:
    assert "_signal_handlers_restored" in request.fixturenames
