"""The sandbox's copy of the kit's error boundary (``platforms/cli_errors.py``): same exit codes, same line.

Why a copy: the sandbox is a service that stands alone (it imports nothing from ``recipes`` or ``npu_kernels``, so
it can run from its own folder on a node without the kit); ``tests/test_cli_errors.py`` runs both copies through
the same cases so they cannot drift. ``retool-sandbox``'s option types stay in ``sandbox/cli.py``: its ``--port``
takes 0 (any free port), which the kit's ports do not.
"""

from __future__ import annotations

import errno
import functools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

EXIT_OK = 0
EXIT_FAILED = 1  # the input was fine; what the command checks or needs failed (a check, a service, a full disk)
EXIT_USAGE = 2  # the input is wrong: an option's value (argparse exits 2 too), or a file or folder it names
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it

Main = TypeVar("Main", bound=Callable[..., int])


class KitError(Exception):
    """An expected failure of what the command checks or needs: ``what`` happened, ``fix`` is what the user can do."""

    exit_code = EXIT_FAILED

    def __init__(self, what: str, fix: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix

    def line(self, prog: str) -> str:
        return error_line(prog, self.what, self.fix)


class UsageError(KitError):
    """The input is wrong: a value out of range, options that exclude each other, a missing or damaged file."""

    exit_code = EXIT_USAGE


def error_line(prog: str, what: str, fix: str = "") -> str:
    return f"{prog}: error: {what}" + (f" ({fix})" if fix else "")


def fail(prog: str, what: str, fix: str = "", code: int = EXIT_FAILED) -> int:
    """Print the one error line and hand back the exit code, for commands that return their code."""
    print(error_line(prog, what, fix), file=sys.stderr, flush=True)
    return code


def _os_error_line(prog: str, exc: OSError) -> str:
    where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    return error_line(prog, f"{where}: {exc.strerror or exc}")


def _os_error_code(exc: OSError) -> int:
    """A full disk is not the user's input; a missing, unreadable or wrong-kind path they named is."""
    return EXIT_FAILED if exc.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_USAGE


def entry_point(prog: str) -> Callable[[Main], Main]:
    """Wrap a ``main(argv) -> int``: expected failures become one line and their exit code; bugs keep a traceback."""

    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def guarded(*args: object, **kwargs: object) -> int:
            try:
                return main(*args, **kwargs)
            except KitError as exc:
                print(exc.line(prog), file=sys.stderr, flush=True)
                return exc.exit_code
            except OSError as exc:
                if exc.filename is None:  # a socket or a syscall without a path: not a user's file, a bug
                    raise
                print(_os_error_line(prog, exc), file=sys.stderr, flush=True)
                return _os_error_code(exc)
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr, flush=True)
                return EXIT_INTERRUPTED

        return guarded  # type: ignore[return-value]

    return wrap


def check_writable(option: str, path: Path) -> None:
    """The kit's ``check_writable`` (platforms/cli_errors.py), for an output file: checked before the work, so a
    benchmark of minutes does not end in an OSError at its last line (issue 33: ``retool-sandbox bench --json``
    under /proc ran the whole benchmark first). A probe, not os.access: root passes access() on /proc."""
    path = path.absolute()
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is a file, not a folder")
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".kit-probe-").cleanup()
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write in {existing} ({exc.strerror or exc})") from None
