"""The run's log file: everything a launch prints, kept beside its checkpoints.

Why: a ReTool run lasts days, and the terminal that started it does not (an ssh session drops, ``nohup`` output lands
wherever the shell was). The launcher therefore copies its own lines, the trainer's output and the restart
supervisor's lines into ``<trainer.default_local_dir>/run.log`` (``run.node<R>.log`` on the other nodes of a
multi-node SFT run, whose checkpoint folder the nodes share). That folder is the one every run script mounts and the
plan checks is writable and, in a container, not on the container's own filesystem
(:mod:`recipes.launch.run_inputs.paths`), so the log survives ``--rm``. The file is opened for appending: a restart
under ``--max-restarts`` and the re-run that resumes a run add to it, each launch after a header line naming the time,
the host and the command.

A log that cannot be written (a full disk) must not stop the run it records: the first failed write says so once
on the terminal, and the run goes on with the terminal alone.
"""

from __future__ import annotations

import datetime
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

LOG_NAME = "run.log"


def log_path(ckpt_dir: Path, phase: str, nnodes: int, environ: Mapping[str, str]) -> Path:
    """``run.log``; ``run.node<R>.log`` on node R > 0 of a multi-node SFT run (torchrun runs the launcher on every
    node, all writing the same shared checkpoint folder). RL launches once, on the head."""
    rank = environ.get("NODE_RANK", "").strip()
    if phase == "sft" and nnodes > 1 and rank not in ("", "0"):
        return ckpt_dir / f"run.node{rank}.log"
    return ckpt_dir / LOG_NAME


class RunLog:
    """An append-only file that gives up quietly after saying once why (a full disk must not end the run)."""

    def __init__(self, path: Path, warn: TextIO) -> None:
        self.path, self._warn = path, warn
        self._file: TextIO | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - lives for the run
        except OSError as exc:
            self._fail(exc)

    @property
    def open(self) -> bool:
        return self._file is not None

    def _fail(self, exc: OSError) -> None:
        self._file = None
        print(f"run log: cannot write {self.path} ({exc}); the output goes to this terminal only", file=self._warn)

    def write(self, text: str) -> None:
        if self._file is None:
            return
        try:
            self._file.write(text)
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def header(self, argv: Sequence[str]) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        self.write(f"\n===== {now} on {socket.gethostname()}: {' '.join(argv)}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Tee:
    """A text stream that writes to a terminal stream and the run log: what the supervisor passes the trainer's
    output and its own lines to."""

    def __init__(self, stream: TextIO, log: RunLog) -> None:
        self._stream, self._log = stream, log

    def write(self, text: str) -> int:
        self._stream.write(text)
        self._log.write(text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def launch_argv() -> list[str]:
    """What ran, for the header: the run scripts exec ``python -m <the launcher> run RECIPE ...``; the module is the
    one ``-m`` named (``__main__``'s spec), so this room names no module above it."""
    program = Path(sys.argv[0])
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = str(spec.name).removesuffix(".__main__") if spec is not None else program.parent.name
    head = ["python", "-m", module] if program.name == "__main__.py" else [program.name]
    return [*head, *sys.argv[1:]]
