"""Patch 0.9.1/0016: the rollout's global load balancer is created before the rollout servers start.

verl 0.9.1's ``LLMServerManager.create`` started the servers, waited for them, and only then created the load
balancer, a Ray actor whose fresh process imports verl before it answers: 13 s on a 2-core CPU host after the
servers were up, while the first validation waited (docs/measurements/rl_startup.yaml). Patched, the default
balancer is created first with an empty pool and given the servers with ``add_servers`` once they are up; a router
plugin (``rollout.router_config_path`` without an injected balancer class) is still created after the servers, with
them.

The check runs verl's own ``create`` with the two steps it sequences stubbed: the servers' start (two replicas'
addresses and handles) and the balancer's factory (``router.get_router_handle``), and records their order.
"""

from __future__ import annotations

import asyncio

from kit_testing import UnpatchedVerl, expect_success, needs_verl_09

pytestmark = needs_verl_09()

SERVERS = {"10.0.0.1:8000": "handle-1", "10.0.0.2:8000": "handle-2"}


def _order(router_config_path: str | None) -> list[object]:
    """The steps ``LLMServerManager.create`` took, in order."""
    from omegaconf import OmegaConf
    from verl.workers.rollout import llm_server, router

    steps: list[object] = []

    class Balancer:
        class add_servers:  # noqa: N801 (a Ray actor method: add_servers.remote(...))
            @staticmethod
            def remote(servers: dict[str, str]) -> asyncio.Future:
                steps.append(("add_servers", dict(servers)))
                done = asyncio.get_event_loop().create_future()
                done.set_result(None)
                return done

    def get_router_handle(servers: dict[str, str], **_: object) -> Balancer:
        steps.append(("load balancer", dict(servers)))
        return Balancer()

    class Manager(llm_server.LLMServerManager):
        rollout_replica_class = object

        async def _initialize_llm_servers(self, start_rank: int | None = None) -> None:
            steps.append("servers")
            self.server_addresses, self.server_handles = list(SERVERS), list(SERVERS.values())

    rollout = {"name": "vllm", "nnodes": 0, "router_config_path": router_config_path}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout, "model": {}}})
    original = router.get_router_handle
    router.get_router_handle = get_router_handle
    try:
        manager = Manager.create(config=config, worker_group=object())
    finally:
        router.get_router_handle = original
    assert isinstance(manager.global_load_balancer, Balancer)
    return steps


def check_load_balancer_first() -> None:
    steps = _order(None)
    assert steps[0] != "servers", f"servers before the load balancer: {steps}"
    assert steps == [("load balancer", {}), "servers", ("add_servers", SERVERS)], steps


def check_a_router_plugin_comes_after_the_servers() -> None:
    assert _order("/router.yaml")[0] == "servers"


def test_patched_the_load_balancer_starts_before_the_servers() -> None:
    expect_success(__file__, "check_load_balancer_first")
    expect_success(__file__, "check_a_router_plugin_comes_after_the_servers")


def test_unpatched_the_servers_start_before_the_load_balancer(unpatched_verl: UnpatchedVerl) -> None:
    unpatched_verl.expect_failure(__file__, "check_load_balancer_first", "servers before the load balancer")
