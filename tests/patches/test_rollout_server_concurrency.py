"""Patch: a rollout server actor admits ``max_num_seqs`` concurrent generate calls, not Ray's default 1000 (PR 5402).

Unpatched 0.6.1 ``vLLMReplica.launch_servers`` (and ``SGLangReplica``'s) creates the server actor without
``max_concurrency``, and Ray runs at most 1000 calls of an async actor at once by default (``ActorClass.options``,
``max_concurrency``). Every agent-loop request is one ``generate`` call on that actor, so a replica planned for more
than 1000 trajectories in flight (the 32B recipe on h200: ~4,096 per replica) never lets vLLM see more than 1000,
whatever ``rollout.max_num_seqs`` says.

The check runs verl's real ``vLLMReplica.launch_servers`` on a real local Ray with the server class swapped for a
stand-in actor of the same interface (vLLM's engine is not what is under test), ``max_num_seqs`` = 1,100, and sends
1,100 calls that each wait until all have arrived: the peak of calls running at once is what Ray let through.
"""

from __future__ import annotations

from kit_testing import require_vllm

MAX_NUM_SEQS = 1100
WAIT_S = 10.0  # how long each call waits for the others before it gives up and reports the peak it saw


def _stand_in_server():  # -> a Ray actor class with vLLMHttpServer's launch interface and a counting call
    import asyncio

    import ray

    @ray.remote(num_cpus=0)
    class StandInServer:
        def __init__(self, **kwargs) -> None:
            self.running = 0
            self.peak = 0
            self.all_in = asyncio.Event()

        def get_master_address(self) -> tuple[str, int]:
            return "127.0.0.1", 1

        async def launch_server(self, master_address: str, master_port: int) -> None:
            return None

        def get_server_address(self) -> tuple[str, int]:
            return "127.0.0.1", 1

        async def hold(self, expected: int) -> int:
            self.running += 1
            self.peak = max(self.peak, self.running)
            if self.running >= expected:
                self.all_in.set()
            try:
                await asyncio.wait_for(self.all_in.wait(), WAIT_S)
            except asyncio.TimeoutError:
                pass
            self.running -= 1
            return self.peak

    return StandInServer


def check_server_admits_max_num_seqs() -> None:
    import asyncio

    import ray
    from kit_testing import ppo_config, tiny_model_dir
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig
    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

    config = ppo_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir()}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            f"actor_rollout_ref.rollout.max_num_seqs={MAX_NUM_SEQS}",
        ]
    )
    model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        replica = vLLMReplica(0, config.actor_rollout_ref.rollout, model_config, gpus_per_node=1)
        replica.server_class = _stand_in_server()
        replica.rollout_mode = RolloutMode.STANDALONE
        replica.workers = [_stand_in_server().remote()]  # any actor: launch_servers only asks it for its node
        asyncio.run(replica.launch_servers())
        peaks = ray.get([replica.servers[0].hold.remote(MAX_NUM_SEQS) for _ in range(MAX_NUM_SEQS)])
    finally:
        ray.shutdown()
    peak = max(peaks)
    print(f"rollout.max_num_seqs={MAX_NUM_SEQS}: {peak} generate calls ran at once on the server actor")
    assert peak >= MAX_NUM_SEQS, (
        f"rollout.max_num_seqs={MAX_NUM_SEQS} but the server actor ran only {peak} calls at once (Ray's default "
        f"max_concurrency for async actors): the engine never sees more requests than that"
    )


def test_patched() -> None:
    require_vllm()  # the module under test imports vLLM
    check_server_admits_max_num_seqs()


def test_unpatched_fails(unpatched_verl) -> None:
    require_vllm()
    unpatched_verl.expect_failure(
        __file__, "check_server_admits_max_num_seqs", match="but the server actor ran only 1000 calls at once"
    )
