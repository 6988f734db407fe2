"""Faults (a), (f) and (h) end to end on the current stack: a real verl 0.9.1 GRPO run (``main_ppo``, its V1 sync
trainer, an FSDP2 engine worker, a vLLM CPU rollout server) under the launcher's restart supervisor, on CPU.

The counterpart of tests/cpu/test_cpu_rl.py::test_sync_grpo_survives_a_killed_worker_and_a_killed_driver (faults
(f) and (a)) and tests/cpu/test_cpu_rl_resume.py (the resumed run serves the uninterrupted run's prompts), plus
fault (h), new on this stack: the vLLM worker that receives the trainer's weights killed in the middle of the weight
update (verl 0.9.1's bucketed ZMQ transfer). One supervised run carries all three (tests/stack091/rl_fault_run_091.py:
(f) after checkpoint 1, (a) after checkpoint 2, (h) in the weight update after checkpoint 3, 4 steps), so the two
cores pay for one run's startups, not three runs'.

Each fault must end its attempt within a bound, the supervisor must kill the attempt's leftovers and resume from the
newest complete checkpoint, the run must reach step 4, and every step dumped must have served the prompts an
uninterrupted run serves at that step (verl's own sampler and loader iterated without a stop; step 3's dump is
written after the weight update that fault (h) breaks, so that step is not dumped).

Unpatched 0.9.1 hangs at fault (h) for ever: the sender waits on its ZMQ REQ socket for an ack the dead receiver
never sends (``workers/rollout/vllm_rollout/bucketed_weight_transfer.py:137-140``, no timeout), and nothing restarts
a trainer that does not exit. Patch 0010 (weight-transfer timeouts, following verl PR #7366) is what ends it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest
from kit_testing import needs_verl_09

# the helper beside this file (pyproject's pythonpath has tests/ only; --import-mode=importlib adds no folder)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_fault_run_091 import (  # noqa: E402
    DEATH_BOUND_S,
    STEPS,
    WEIGHT_BOUND_S,
    Run,
    expected_order,
    overrides,
    run_env,
    served,
    supervise_with_faults,
    weight_timeout_overrides,
    write_assets,
)

pytestmark = [needs_verl_09(), pytest.mark.slow, pytest.mark.faults]

#: a verl clone to run instead of the installed one (a patch under test); the Ray workers inherit PYTHONPATH
CLONE_ENV = "KIT_FAULTS_VERL_CLONE"


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("rl-faults-091")
    assets = write_assets(root)
    run_dir = root / "run"
    run_dir.mkdir()
    clone = Path(os.environ[CLONE_ENV]) if os.environ.get(CLONE_ENV) else None
    package = clone / "verl" if clone else Path(importlib.util.find_spec("verl").origin).parent
    timeout = weight_timeout_overrides(package)
    print(f"\n[rl-faults-091] verl {package}, weight-transfer timeout override {timeout or 'none (unpatched)'}")
    trainer = overrides(assets, run_dir / "ckpt", run_dir / "dump")
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *trainer, *timeout]
    t0 = time.perf_counter()
    run = supervise_with_faults(run_dir, command, run_env(run_dir, run_dir / "ckpt", STEPS - 1, clone))
    print(f"\n[rl-faults-091] wall {time.perf_counter() - t0:.0f} s, log {run.log}")
    for fault in run.faults:
        print(f"[rl-faults-091] {fault}")
    return run


def _text(run: Run) -> str:
    return run.log.read_text(errors="replace")


def _fault(run: Run, target: str):  # noqa: ANN202 (rl_fault_run_091.Fault)
    found = [f for f in run.faults if f.target == target]
    assert found, f"fault {target} was never injected:\n{_text(run)[-6000:]}"
    return found[0]


def test_f_killed_fsdp_worker_fails_the_attempt_which_resumes(faulted: Run) -> None:
    """(f): the FSDP worker actor SIGKILLed after checkpoint 1: the driver exits non-zero naming the dead actor,
    the supervisor resumes from global_step_1."""
    fault, text = _fault(faulted, "worker"), _text(faulted)
    assert fault.driver_exit_s is not None and fault.driver_exit_s < DEATH_BOUND_S, text[-6000:]
    assert "ActorDiedError" in text or "actor died" in text.lower(), text[-6000:]
    assert "restart 1/3: trainer exited with status 1" in text and "resuming from global_step_1" in text, text[-6000:]
    assert fault.resumed_s is not None, f"checkpoint 2 never written after the worker was killed:\n{text[-6000:]}"
    print(f"\n[rl-faults-091] (f) driver out {fault.driver_exit_s:.0f} s, checkpoint 2 {fault.resumed_s:.0f} s after")


def test_a_killed_driver_is_cleaned_up_and_resumes(faulted: Run) -> None:
    """(a): the ``main_ppo`` driver SIGKILLed after checkpoint 2: its leftovers (the local Ray head, the workers)
    are killed by the supervisor, which resumes from global_step_2."""
    fault, text = _fault(faulted, "driver"), _text(faulted)
    assert "restart 2/3: trainer exited with status -9" in text and "resuming from global_step_2" in text, text[-6000:]
    assert fault.resumed_s is not None, f"checkpoint 3 never written after the driver was killed:\n{text[-6000:]}"
    with pytest.raises(ProcessLookupError):
        os.killpg(fault.driver, 0)  # its session's group: the driver and the Ray head it started
    print(f"\n[rl-faults-091] (a) checkpoint 3 written {fault.resumed_s:.0f} s after the driver was killed")


def test_h_vllm_worker_killed_during_the_weight_update_fails_the_step_and_resumes(faulted: Run) -> None:
    """(h): the vLLM worker killed while it receives step 3's weights: the attempt fails in bounded time with an
    error that names the weight transfer, the supervisor resumes from global_step_3, step 4 runs."""
    fault, text = _fault(faulted, "weights"), _text(faulted)
    assert not fault.hung, (
        f"the driver was still running {WEIGHT_BOUND_S:.0f} s after the vLLM worker (pid {fault.victim}) died in the "
        f"weight update after checkpoint {fault.after_step}: the trainer waits for ever (no weight-transfer "
        f"timeout):\n{text[-6000:]}"
    )
    assert "restart 3/3: trainer exited with status" in text and "resuming from global_step_3" in text, text[-6000:]
    assert "TimeoutError" in text and "weight transfer" in text, text[-6000:]  # patch 0010's error names it
    assert fault.resumed_s is not None, f"checkpoint 4 never written after the weight update failed:\n{text[-6000:]}"
    print(
        f"\n[rl-faults-091] (h) driver out {fault.driver_exit_s:.0f} s after the vLLM worker died mid-transfer, "
        f"checkpoint 4 {fault.resumed_s:.0f} s after"
    )


def test_the_run_ends_at_its_last_step_serving_the_uninterrupted_order(faulted: Run) -> None:
    """After the three restarts the run finishes (exit 0, checkpoint 4), and each dumped step served the prompts of
    an uninterrupted run, across the epoch end at step 3 (6 prompts, 2 a step)."""
    text = _text(faulted)
    assert faulted.returncode == 0, f"supervised run ended with {faulted.returncode}:\n{text[-6000:]}"
    ckpt = faulted.log.parent / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    for step in (1, 2, 3):
        assert f"Resuming from {ckpt / f'global_step_{step}'}" in text, text[-6000:]
    got, expected = served(faulted.log.parent / "dump"), expected_order()
    assert expected[3] not in expected[:3] and expected[1] != expected[0], f"the order cannot show a replay: {expected}"
    assert sorted(got) == [1, 2, 4], f"dumped steps {sorted(got)}"
    wrong = {step: (got[step], expected[step - 1]) for step in got if got[step] != expected[step - 1]}
    assert not wrong, f"steps that served other prompts than an uninterrupted run (got, expected): {wrong}"
    print(f"\n[rl-faults-091] prompts per step {[got.get(s) for s in range(1, STEPS + 1)]}, expected {expected}")
