"""An RL driver started before the launcher's checks end, its imports done while they run.

Why: the launcher imports verl (and with it torch, tensordict, transformers) to check a run before it starts it,
8-10 s on a 2-core Xeon; the driver it then starts, ``python -m verl.trainer.main_ppo``, imports the same again before
it reaches Ray, about 5 s more, one after the other while the second core waits (docs/measurements/rl_startup.yaml:
"launcher checks", "verl driver and Ray"). A prewarmed driver is started as the launch begins: it imports its entry
module, then waits on its stdin for the command line the plan settles and runs it as ``python -m`` would
(:func:`runpy.run_module` as ``__main__``, what the module imports already loaded). The launcher's first attempt is
that process (restart.run_attempt); a restart starts afresh.

Only what a wait cannot change is run so: the command must be this interpreter's ``-m`` of the module imported, and
the extra environment the plan puts before it (``env K=V ...``) must hold only variables read after start-up
(``late_env`` of :meth:`Prewarmed.take`, the plan's own: the TensorBoard folder, the trace store). Anything else, a
check that fails, a dry run or the launcher's end closes its stdin: it exits without running anything, and the
command starts fresh. Standard library only: the child runs it before anything else.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import runpy
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from recipes.launch.supervision.process_group import kill_group

GRACE_S = 10.0


def start(module: str, env: Mapping[str, str]) -> Prewarmed:
    """Start ``python -m recipes.launch.supervision.prewarm MODULE`` with ``env``, piped as a trainer attempt is
    (restart.run_attempt: output to a pipe, a session of its own), its stdin a pipe for the command."""
    proc = subprocess.Popen(
        [sys.executable, "-m", __name__, module],
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Prewarmed(proc, module)


@dataclass
class Prewarmed:
    """The waiting driver: :meth:`take` hands it a command, :meth:`dismiss` lets it go."""

    proc: subprocess.Popen
    module: str
    refused: str | None = None  # why :meth:`take` did not hand it the command

    def refusal(self, argv: Sequence[str], extra_env: Mapping[str, str], late_env: Collection[str]) -> str | None:
        """Why this driver cannot run ``argv`` with ``extra_env`` (the plan's ``argv`` and ``env``: its command is
        ``env K=V ... ARGV``) as a fresh one would; None when it can."""
        if list(argv[:3]) != [sys.executable, "-m", self.module]:
            return f"the command is not {sys.executable} -m {self.module}"
        early = sorted(set(extra_env) - set(late_env))
        if early:
            return f"its environment sets {', '.join(early)}, which the driver may read while importing"
        if self.proc.poll() is not None:
            return f"it exited with status {self.proc.returncode} while waiting"
        return None

    def take(
        self, argv: Sequence[str], extra_env: Mapping[str, str], late_env: Collection[str]
    ) -> subprocess.Popen | None:
        """The driver running ``argv`` with ``extra_env``, or None when :meth:`refusal` names a reason (kept in
        ``refused``; the driver is dismissed)."""
        self.refused = self.refusal(argv, extra_env, late_env)
        if self.refused is None:
            assert self.proc.stdin is not None
            order = {"env": dict(extra_env), "args": list(argv[3:])}
            try:
                self.proc.stdin.write((json.dumps(order) + "\n").encode())
                self.proc.stdin.close()
                return self.proc
            except BrokenPipeError:
                self.refused = "it ended before the command came"
        self.dismiss()
        return None

    def dismiss(self) -> None:
        """Close its stdin (waiting, it exits without running anything) and end its process group: the launcher's
        last word on it, whether or not it was taken. Nothing once an attempt reaped it (its group ended with it)."""
        if self.proc.returncode is not None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        kill_group(self.proc, GRACE_S)


def warm(module: str) -> None:
    """Import what ``module`` imports at its top level, not the module itself: its body then runs once, as
    ``__main__``, as under ``python -m`` (verl's main_ppo defines Ray actor classes there). An import that fails is
    left for the run, which reports it as ``python -m`` would."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return
    tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
    imports = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    try:
        exec(compile(imports, spec.origin, "exec"), {"__name__": f"{module}.prewarm", "__package__": spec.parent})
    except Exception:  # noqa: BLE001, S110 (the run itself raises it)
        pass


def serve(module: str) -> int:
    """The child: import what ``module`` imports, wait for the command, run it as ``python -m module ARGS`` would."""
    warm(module)
    line = sys.stdin.readline()
    if not line.strip():  # dismissed: the launcher closed the pipe
        return 0
    order = json.loads(line)
    os.environ.update(order["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)  # as a fresh driver's: not the launcher's pipe
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.argv = [sys.argv[0], *order["args"]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
