"""The sandbox's copy of the kit's error boundary (``platforms/cli_errors.py``): same exit codes, same line.

Why a copy: the sandbox is a service that stands alone (it imports nothing from ``recipes`` or ``npu_kernels``, so
it can run from its own folder on a node without the kit); ``tests/test_cli_errors.py`` runs both copies through
the same cases so they cannot drift, and ``tests/test_console_script_options.py`` holds the parser and path rules
at the end to the kit's text, character for character (issue 52). ``retool-sandbox``'s option types stay in
``sandbox/cli.py``: its ``--port`` takes 0 (any free port), which the kit's ports do not.
"""

from __future__ import annotations

import argparse
import errno
import functools
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

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


class MissingPathError(UsageError, FileNotFoundError):
    """A file or folder the user named does not exist; still a ``FileNotFoundError`` for code that catches that."""


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


# --- the parser: one line per bad option, and the rules of the options that name a path (issue 52) ---------------

#: Suffixes that name a format: an output named with one of them must be named for the format the command writes.
FORMAT_SUFFIXES = frozenset(
    ".json .jsonl .parquet .md .markdown .csv .tsv .txt .png .svg .pdf .html .yaml .yml .toml .tar .gz .zip .whl "
    ".safetensors .bin .pt .py .sh .log".split()
)
#: What an output folder may already hold (:class:`PathArg` ``rule``): ``empty`` (nothing, unless --force),
#: ``replaced`` (as ``empty``, and --force empties it: it must not hold the command's inputs), ``cache`` (a folder
#: the kit built, with a ``*fingerprint.json``), ``into`` (anything: the command keeps what is there).
FOLDER_RULES = ("empty", "replaced", "cache", "into")


@dataclass(frozen=True)
class PathArg:
    """The ``type`` of an option that names a path, and the registry of what the command does with it: ``role``
    ``input`` (it must exist: ``kind`` file, folder or any) or ``output`` (a file written in one of the ``writes``
    suffixes' formats, or a folder by its ``rule``). The parser checks each rule before the command starts work:
    argparse the suffix, :meth:`ArgumentParser.parse_known_args` the rest (--force and the inputs are known then),
    each refusal one line naming the option, as the commands' own checks did (tests/test_bad_inputs.py)."""

    role: str
    kind: str
    writes: tuple[str, ...] = ()
    rule: str = ""

    def __call__(self, text: str) -> Path:
        path = Path(text)
        suffix = path.suffix.lower()
        if self.role == "output" and self.writes and suffix in FORMAT_SUFFIXES and suffix not in self.writes:
            raise argparse.ArgumentTypeError(f"{text}: a {suffix} name, but this writes {' or '.join(self.writes)}")
        return path

    def check(self, option: str, path: Path, force: bool | None, inputs: Sequence[Path]) -> None:
        """Refuse ``path``: an input that is not there, an output that holds what the command did not write, or that
        ``--force`` would delete with the command's inputs; ``force`` None: the command has no --force."""
        where = f"{option} {path}".strip()
        if self.role == "input" and not path.exists():
            raise MissingPathError(f"{where}: no such {'file or folder' if self.kind == 'any' else self.kind}")
        if self.kind == "file" and path.is_dir():
            raise UsageError(f"{where} is a folder, not a file")
        if self.kind == "folder" and path.exists() and not path.is_dir():
            raise UsageError(f"{where} is a file, not a folder")
        if self.role == "output":
            self._refuse_overwrite(where, path, force, inputs)

    def _refuse_overwrite(self, where: str, path: Path, force: bool | None, inputs: Sequence[Path]) -> None:
        again = "or --force to replace it" if force is not None else "this command does not replace it"
        if self.kind == "file" and any(p.resolve() == path.resolve() for p in inputs):
            raise UsageError(f"{where} is an input of this command: writing there would destroy it")
        if self.kind == "file" and path.exists() and not force:
            raise UsageError(f"{where} exists", f"name a new file, {again}")
        if self.kind != "folder" or not path.is_dir() or self.rule == "into":
            return
        held = [p for p in path.iterdir() if not (self.rule == "cache" and p.name.startswith("."))]
        if held and not force and not (self.rule == "cache" and any(path.glob("*fingerprint.json"))):
            raise UsageError(f"{where} is not empty", f"give a new or empty folder, {again}")
        inside = [p for p in inputs if p.resolve() == path.resolve() or path.resolve() in p.resolve().parents]
        if force and self.rule == "replaced" and inside:
            raise UsageError(f"{where} holds {inside[0]}, an input of this run: --force would delete it with the rest")


def input_file() -> PathArg:
    return PathArg("input", "file")


def input_folder() -> PathArg:
    return PathArg("input", "folder")


def input_path() -> PathArg:
    """A file or a folder the command reads (a dump folder or a .jsonl file, a tensorboard folder or event file)."""
    return PathArg("input", "any")


def output_file(*writes: str) -> PathArg:
    """A file the command writes, in the format of ``writes``' suffixes (``.parquet``)."""
    return PathArg("output", "file", writes=writes)


def output_folder(rule: str) -> PathArg:
    """A folder the command writes into, by one of :data:`FOLDER_RULES`."""
    assert rule in FOLDER_RULES, rule
    return PathArg("output", "folder", rule=rule)


class ArgumentParser(argparse.ArgumentParser):
    """argparse by the kit's contract: a bad option is one line, ``<prog>: error: <what> (<fix>)``, exit 2 (not a
    usage block), and the outputs its :class:`PathArg` options name are checked once every option is read (--force
    and the inputs are known then), before the command does anything. Sub-commands get this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, error_line(self.prog, message, f"{self.prog} --help lists the options") + "\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        check_paths(self, namespace)
        return namespace, extras


def _values(namespace: argparse.Namespace, action: argparse.Action) -> list[Path]:
    value: Any = getattr(namespace, action.dest, None)
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, Path)]


def check_paths(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> None:
    """The output rules of ``parser``'s own :class:`PathArg` options (its sub-commands check theirs)."""
    typed = [a for a in parser._actions if isinstance(a.type, PathArg)]
    inputs = [p for a in typed if a.type.role == "input" for p in _values(namespace, a)]  # type: ignore[union-attr]
    force = getattr(namespace, "force", None) if any(a.dest == "force" for a in parser._actions) else None
    for action in sorted(typed, key=lambda a: a.type.role != "input"):  # type: ignore[union-attr]
        spec: PathArg = action.type  # type: ignore[assignment]
        for path in _values(namespace, action):
            spec.check(action.option_strings[0] if action.option_strings else "", path, force, inputs)
