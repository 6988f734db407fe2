"""Patch: ``AsyncLLMServerManager`` breaks ties between rollout replicas by its shuffled order (verl PR 4505).

Every ``AgentLoopWorker`` has its own manager over the same replica handles and shuffles them, so that the workers
spread their requests. Unpatched 0.6.1 keeps ``[count, (hash(server), server)]`` in its least-requests heap: ties go to
the smallest hash, and a Ray ``ActorHandle`` hashes its actor id (``ray/actor.py`` ``ActorHandle.__hash__``, ray
2.48.0), the same value in every process. So every manager walks the replicas in the same hash order and the shuffle
does nothing: when each worker has fewer new requests than there are replicas, the same replicas get all of them.

The check uses the 32B recipe's shape (8 rollout replicas, ``rollout.agent.num_workers: 16``) with fake handles that
hash like Ray's: one fixed value per replica, shared by every manager, unrelated to the list order.
"""

from __future__ import annotations

import hashlib
import random

REPLICAS = 8  # a3: 2 nodes x 16 dies / TP 4 (recipes/config/retool_qwen2.5_32b_dapo.yaml)
WORKERS = 16  # rollout.agent.num_workers in the same recipe
NEW_REQUESTS_PER_WORKER = 4  # fewer than the replicas: the tail of a batch, a small validation set


class _FakeReplica:
    """A rollout server handle: only identity and a process-independent hash, like a Ray ActorHandle."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "big")

    def __repr__(self) -> str:
        return self.name


def check_replicas_balanced() -> None:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AsyncLLMServerManager

    random.seed(0)  # the managers' shuffles; any seed shows the bug, this one keeps failures reproducible
    replicas = [_FakeReplica(f"replica-{i}") for i in range(REPLICAS)]
    hash_order = sorted(replicas, key=hash)
    assert hash_order != replicas, "fake hashes must not follow the list order, or the check proves nothing"

    load = {r.name: 0 for r in replicas}
    orders = []
    for worker in range(WORKERS):
        # Ray hands every worker its own copy of the list; the manager shuffles that copy in place.
        handles = list(replicas)
        manager = AsyncLLMServerManager(OmegaConf.create({}), handles)
        picks = [manager._choose_server(f"w{worker}-req{i}") for i in range(REPLICAS)]
        orders.append((worker, picks, handles))
        # a multi-turn request stays on its replica (sticky session, unchanged by the patch)
        assert manager._choose_server(f"w{worker}-req0") is picks[0]
        for replica in picks[:NEW_REQUESTS_PER_WORKER]:
            load[replica.name] += 1

    idle = sorted(name for name, n in load.items() if n == 0)
    assert not idle, (
        f"replicas left idle: {idle}; {WORKERS} workers x {NEW_REQUESTS_PER_WORKER} new requests went {load}"
    )
    for worker, picks, handles in orders:
        # least requests: one new request per replica, then around again - in the order this worker's shuffle gave
        assert picks == handles, f"worker {worker} picked {picks}, not its shuffled order {handles}"


def test_patched() -> None:
    check_replicas_balanced()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_replicas_balanced", match="replicas left idle")
