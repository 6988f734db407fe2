"""A stand-in trainer for the restart supervisor's tests: verl's checkpoint/resume contract, no model.

    python fake_trainer.py trainer.default_local_dir=D trainer.total_training_steps=N trainer.save_freq=K
        [trainer.resume_mode=auto|disable]

Prints verl's console lines (``step:N - ...``), writes ``D/global_step_N`` (every file either trainer of either stack
reads from a complete step, :class:`platforms.verl_facts.CheckpointLayout`) and then the tracker every K steps, and
with ``resume_mode=auto`` starts after the tracker's step. Faults (``FAKE_DIE_AT=S``, once per ``FAKE_MARKER`` file):
at step S it starts a child that outlives it (as a local Ray head does) and SIGKILLs itself.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _complete_step(step_dir: Path) -> None:
    """A world-of-one step as the RL trainers (``actor/``, data.pt) and the SFT trainers (the step folder, data.pt or
    0.9.1's data_0.pt) save it: what the launcher's layouts check before they call a step complete."""
    for weights in (step_dir, step_dir / "actor"):
        weights.mkdir(parents=True, exist_ok=True)
        (weights / "fsdp_config.json").write_text('{"world_size": 1}')
        for kind in ("model", "optim", "extra_state"):
            (weights / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"fake")
    for loader in ("data.pt", "data_0.pt"):
        (step_dir / loader).write_bytes(b"fake")


def main() -> None:
    args = dict(word.lstrip("+").split("=", 1) for word in sys.argv[1:])
    ckpt = Path(args["trainer.default_local_dir"])
    total, save = int(args["trainer.total_training_steps"]), int(args["trainer.save_freq"])
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    start = 0
    if args.get("trainer.resume_mode", "auto") == "auto" and tracker.exists():
        start = int(tracker.read_text())
        print(f"Resuming from {ckpt / f'global_step_{start}'}", flush=True)
    die_at, marker = int(os.environ.get("FAKE_DIE_AT", "0")), Path(os.environ.get("FAKE_MARKER", "/nonexistent"))
    for step in range(start + 1, total + 1):
        time.sleep(0.05)
        if step == die_at and not marker.exists():
            marker.write_text("died once\n")
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            Path(os.environ["FAKE_CHILD_PID"]).write_text(str(child.pid))
            os.kill(os.getpid(), signal.SIGKILL)
        print(f"step:{step} - loss:{1.0 / step:.3f}", flush=True)
        if step % save == 0:
            _complete_step(ckpt / f"global_step_{step}")
            tracker.write_text(str(step))
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))


if __name__ == "__main__":
    main()
