"""Process-wide signal handlers, restored after each test (tests/conftest.py's autouse fixture).

Some of the kit's code installs its own SIGTERM/SIGINT/SIGHUP handlers (the sandbox's keepalive, the launcher's restart
supervisor, the smoke's supervisor) and tests run parts of it inside a pytest-xdist worker. A handler left behind stays
for every later test of that worker and is inherited by the processes it forks: phase 1 hung in
tests/retool/test_dataset.py's ``num_proc=2`` filter, whose pool's ``terminate()`` sends its workers SIGTERM - one kept
waiting on the pool's queue lock under an inherited handler that returns (py-spy: ``SimpleQueue.get`` in the worker,
``Pool._terminate_pool`` joining it in the test; that worker's SigCgt had SIGTERM, the other xdist worker's did not).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

#: The signals whose handlers a test may replace.
RESTORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def handlers_restored() -> Iterator[None]:
    """Put back the handlers of :data:`RESTORED` as they were on entry (those Python can set: not None)."""
    saved = {sig: signal.getsignal(sig) for sig in RESTORED}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
