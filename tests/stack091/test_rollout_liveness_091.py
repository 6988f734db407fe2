"""Patch 0.9.1/0013: the V1 sync trainer's sampler fails the step when a rollout actor is dead, instead of waiting.

In verl 0.9.1 the V1 trainer (``main_ppo``) hands each batch's prompts to the agent loop workers, which run them
against the vLLM servers in the background and put each finished trajectory into TransferQueue; the trainer's
``ReplayBuffer.sample`` (verl/trainer/ppo/v1/replay_buffer.py:421-509) polls TransferQueue until the batch is there.
Nothing checks that those workers and servers are still alive. The kit's two-container run on 0.9.1 killed the worker
node mid-rollout: the trainer logged "pending: 0, running: 2" every minute from then on (docs/images.md, the 0.9.1
two-node run), a run that never fails and so never restarts (the fault index's scenario d on the current stack).
verl #7155 (a prompt that never leaves "running" after a lost update, closed) is the same wait from another cause.

The check builds the sampler as the real V1 ``sync`` trainer does (its ``_build_replay_buffer``, verl 0.9.1's own
config), its producers two real Ray actors of which one is killed, and a TransferQueue whose two prompts stay
"running". Patched, ``sample`` raises within :data:`BOUND_S`, naming the dead actor; unpatched it is still waiting.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from kit_testing import UnpatchedVerl, expect_success, needs_verl_09, ppo_config

pytestmark = [needs_verl_09(), pytest.mark.faults]

#: The patched sampler asks for liveness every second here (default 30 s: VERL_REPLAY_BUFFER_LIVENESS_INTERVAL_SECONDS).
LIVENESS_INTERVAL_S = "1"
#: How long the check waits for ``sample`` to end: a few liveness intervals and Ray's answer for a dead actor.
BOUND_S = 20.0


def _running_prompts() -> SimpleNamespace:
    """TransferQueue as the sampler sees it after its producers died: two prompts of step 1 "running" for ever."""
    tags = {f"uid{i}": {"is_prompt": True, "status": "running", "global_steps": 1} for i in range(2)}
    return SimpleNamespace(kv_list=lambda: {"train": dict(tags)}, kv_clear=lambda **_: None)


def _sampler_with_a_dead_producer(root: Path) -> object:
    """The V1 sync trainer's replay buffer, its agent loop workers and rollout server real Ray actors, one killed."""
    import ray
    from verl.trainer.ppo.v1 import get_trainer_cls, replay_buffer

    @ray.remote(num_cpus=0)
    class Producer:
        async def ping(self) -> int:
            return 1

    alive, doomed = Producer.remote(), Producer.remote()
    ray.get([alive.ping.remote(), doomed.ping.remote()])
    ray.kill(doomed, no_restart=True)
    trainer = object.__new__(get_trainer_cls("sync"))
    trainer.config = ppo_config([f"trainer.default_local_dir={root}"])
    trainer.trainer_mode = "sync"
    trainer.agent_loop_manager = SimpleNamespace(agent_loop_workers=[alive, doomed])
    trainer.llm_server_manager = SimpleNamespace(server_handles=[alive])
    replay_buffer.tq = _running_prompts()
    return trainer._build_replay_buffer()


def check_dead_producer_fails_the_sample() -> None:
    """``sample`` must end within BOUND_S with an error that names the dead agent loop worker."""
    os.environ["VERL_REPLAY_BUFFER_LIVENESS_INTERVAL_SECONDS"] = LIVENESS_INTERVAL_S  # read at import
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    outcome: list[str] = []

    def sample(buffer: object) -> None:
        try:
            buffer.sample(global_steps=1, partition_id="train", batch_size=2)
        except Exception as error:  # noqa: BLE001  (the point: which error)
            outcome.append(f"{type(error).__name__}: {error}")
        else:
            outcome.append("returned")

    with tempfile.TemporaryDirectory() as root:
        buffer = _sampler_with_a_dead_producer(Path(root))
        start = time.monotonic()
        thread = threading.Thread(target=sample, args=(buffer,), daemon=True)
        thread.start()
        thread.join(BOUND_S)
        waited = time.monotonic() - start
    if thread.is_alive():
        raise AssertionError(
            f"the sampler still waits {waited:.0f} s after one of its two agent loop workers was killed "
            f"(pending: {len(buffer.pending_keys['train'])}, running: {len(buffer.running_keys['train'])}): "
            "it waits for ever"
        )
    assert outcome[0].startswith(
        "RuntimeError: replay buffer: sampling partition 'train' waits for 0 pending and "
        "2 running trajectories that can no longer arrive: 1 of 3 rollout actors are dead: "
        "agent loop worker 1 (ActorDiedError"
    ), outcome
    print(f"sample failed {waited:.1f} s after the start: {outcome[0]}")


def test_patched_dead_producer_fails_the_sample() -> None:
    expect_success(__file__, "check_dead_producer_fails_the_sample", timeout=180)


def test_unpatched_dead_producer_leaves_the_sample_waiting(unpatched_verl: UnpatchedVerl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_dead_producer_fails_the_sample",
        "after one of its two agent loop workers was killed (pending: 0, running: 2): it waits for ever",
        timeout=180,
    )
