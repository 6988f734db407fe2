"""Fault (h) of tests/stack091/test_rl_faults_091.py: the vLLM worker that receives the trainer's weights dies in the
middle of a weight update. Loaded into every verl process of the faulted run through ``VERL_USE_EXTERNAL_MODULES``
(verl 0.9.1 ``verl/__init__.py:49-52`` imports what it names), never into verl itself.

Why a hook and not a kill from outside: in verl 0.9.1's sync trainer the update that carries step k's weights to
the rollout starts right after checkpoint k is written (``trainer/ppo/v1/trainer_base.py:478-487`` save, then
``on_step_end`` -> ``trainer_sync.py:35-38`` ``checkpoint_manager.update_weights``) and lasts well under a second for
the tiny model, so a test polling the tracker from outside would miss it. Inside the receiver the moment is exact:
``BucketedWeightReceiver.receive_weights`` (``workers/rollout/vllm_rollout/bucketed_weight_transfer.py:240-300``)
runs in vLLM's worker process (the ``mp`` executor, ``vllm_async_server.py:339``), and the trainer's
``BucketedWeightSender`` waits on its ZMQ REQ socket for the ack of each bucket (``:137-140``). This hook SIGKILLs
that worker process when the first bucket has arrived and before it is acknowledged.

Armed by ``KIT_FAULT_WEIGHT_KILL=<checkpoint dir>|<step>``: it fires once, in the first weight update that starts
while the checkpoint tracker names ``<step>`` (so the update of step k+1's weights, not the one a resumed attempt
makes from checkpoint k: the marker below is written first, with O_EXCL, and no later update fires). The marker
(``<checkpoint dir>/../kit-weight-fault.json``) records the pid killed and the time, for the test's clock.
Each process that loads this module also appends ``pid argv0 verl.__file__`` to ``kit-verl-files.txt`` beside it:
which verl the Ray workers imported (a patched clone on PYTHONPATH must reach them).
Standard library only at import: it is imported by every verl process of the run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import ModuleType

ARM_ENV = "KIT_FAULT_WEIGHT_KILL"
TARGET = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
TRACKER = "latest_checkpointed_iteration.txt"
_WRAPPED = "_kit_weight_fault"


def marker(ckpt: Path) -> Path:
    """Where the hook records the kill (outside the checkpoint folder, which verl and the launcher read)."""
    return ckpt.parent / "kit-weight-fault.json"


def verl_files(ckpt: Path) -> Path:
    return ckpt.parent / "kit-verl-files.txt"


def armed() -> tuple[Path, int] | None:
    value = os.environ.get(ARM_ENV, "")
    if "|" not in value:
        return None
    folder, step = value.rsplit("|", 1)
    return Path(folder), int(step)


def _tracker_step(ckpt: Path) -> int | None:
    try:
        return int((ckpt / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


def maybe_die() -> None:
    """SIGKILL this process once: in the first bucket received while the tracker names the armed step."""
    arm = armed()
    if arm is None or _tracker_step(arm[0]) != arm[1]:
        return
    try:
        fd = os.open(marker(arm[0]), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # fired already: a resumed attempt's updates pass
    title = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    record = {"pid": os.getpid(), "time": time.time(), "after_checkpoint": arm[1], "process": title}
    os.write(fd, json.dumps(record).encode())
    os.fsync(fd)
    os.close(fd)
    print(f"kit-fault: SIGKILL of vLLM worker pid {os.getpid()} in a weight update after checkpoint {arm[1]}",
          file=sys.stderr, flush=True)  # fmt: skip
    os.kill(os.getpid(), signal.SIGKILL)


def wrap(module: ModuleType) -> bool:
    """Wrap ``BucketedWeightReceiver.receive_weights`` so each bucket passes :func:`maybe_die` first."""
    receiver = module.BucketedWeightReceiver
    original = receiver.receive_weights
    if getattr(original, _WRAPPED, False):
        return False

    def receive_weights(self: object, on_bucket_received: object) -> object:
        def on_bucket(weights: list, is_last: bool) -> object:
            maybe_die()
            return on_bucket_received(weights, is_last)

        return original(self, on_bucket)

    setattr(receive_weights, _WRAPPED, True)
    receiver.receive_weights = receive_weights
    return True


def _record_verl() -> None:
    arm = armed()
    verl = sys.modules.get("verl")
    if arm is None or verl is None:
        return
    line = f"{os.getpid()} {Path(sys.argv[0]).name if sys.argv else '-'} {getattr(verl, '__file__', None)}\n"
    with open(verl_files(arm[0]), "a") as f:
        f.write(line)


if armed() is not None:
    from platforms.post_import import when_imported

    _record_verl()
    when_imported(TARGET, wrap)
