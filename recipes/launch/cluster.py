"""Ray cluster facts for ``scripts/ray_cluster.sh``: ``ray start`` device arguments, and the "all nodes joined" check.

Why explicit device counts: Ray counts NPUs with pyACL and falls back to ``glob('/dev/davinci?')``, which sees only
davinci0..9, so an A3 node whose CANN environment was not sourced joins with 10 of its 16 dies and verl then waits
forever for a placement group. The kit counts devices itself (:meth:`npu_kernels.platform.npu.NpuPlatform.device_count`)
and passes ``--resources='{"NPU": N}'``; ``status`` then checks what the cluster really has against the profile.

    python -m recipes.launch.cluster start-args --hw a3 [--dry-run]
    python -m recipes.launch.cluster status --hw a3 --nodes 2 [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npu_kernels.platform import PROFILE_NAMES, PROFILES

EXIT_OK, EXIT_FAILED = 0, 1


def start_args(hw: str, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """(``ray start`` arguments that declare this node's devices, notes for the user)."""
    profile = PROFILES[hw]
    platform = profile.platform
    notes: list[str] = []
    if not profile.devices_per_node:  # ranks are processes (cpu): nothing to count
        return platform.ray_start_args(0), notes
    count = platform.device_count()
    expected = profile.devices_per_node
    if count == 0:
        if not dry_run:
            raise RuntimeError(
                f"no {platform.ray_resource} device visible on this node (profile {hw}); "
                "is CANN's set_env.sh sourced and are the /dev/davinci* devices mapped into the container?"
            )
        notes.append(f"no {platform.ray_resource} here (dry run): showing the profile's {expected} per node")
        count = expected
    elif count != expected:
        notes.append(f"this node has {count} {platform.ray_resource} devices, profile {hw} expects {expected}")
    return platform.ray_start_args(count), notes


@dataclass(frozen=True)
class NodeState:
    address: str
    alive: bool
    devices: float
    cpus: float


def node_states(nodes: Sequence[dict[str, Any]], resource: str) -> list[NodeState]:
    """``ray.nodes()`` entries reduced to what the check needs."""
    return [
        NodeState(
            str(node.get("NodeManagerAddress", "?")),
            bool(node.get("Alive")),
            float((node.get("Resources") or {}).get(resource, 0)),
            float((node.get("Resources") or {}).get("CPU", 0)),
        )
        for node in nodes
    ]


def evaluate(states: Sequence[NodeState], hw: str, expected_nodes: int) -> list[str]:
    """Problems with the cluster for ``expected_nodes`` nodes of profile ``hw``; empty when it is ready."""
    profile = PROFILES[hw]
    resource = profile.platform.ray_resource
    alive = [s for s in states if s.alive]
    problems = []
    if len(alive) != expected_nodes:
        problems.append(f"{len(alive)} live node(s) joined, expected {expected_nodes}")
    per_node = profile.devices_per_node
    if per_node:
        for state in alive:
            if state.devices != per_node:
                problems.append(
                    f"node {state.address} offers {state.devices:g} {resource}, expected {per_node} "
                    "(start it with scripts/ray_cluster.sh, which passes the kit's device count)"
                )
        total = sum(s.devices for s in alive)
        if total != per_node * expected_nodes:
            problems.append(f"{total:g} {resource} in the cluster, expected {per_node * expected_nodes}")
    return problems


def reachable_address(address: str | None, timeout_s: float = 3.0) -> str:
    """``host:port`` of the cluster's GCS, checked with a plain TCP connect first.

    Why: ``ray.init`` keeps retrying a GCS that does not answer for minutes; a pre-flight must fail in seconds.
    """
    from ray._private.services import canonicalize_bootstrap_address_or_die

    resolved = canonicalize_bootstrap_address_or_die(address or "auto")
    host, _, port = resolved.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {resolved} ({exc})") from None
    return resolved


def live_states(hw: str, address: str | None) -> list[NodeState]:
    """The nodes of the Ray cluster at ``address`` (default: the one this node belongs to); raises if none."""
    import ray

    ray.init(address=reachable_address(address), logging_level="ERROR", log_to_driver=False)
    try:
        return node_states(ray.nodes(), PROFILES[hw].platform.ray_resource)
    finally:
        ray.shutdown()


def cluster_problems(hw: str, expected_nodes: int, address: str | None) -> list[str]:
    """:func:`evaluate` on the live cluster; an unreachable cluster is a problem too (the launcher's pre-flight)."""
    try:
        states = live_states(hw, address)
    except Exception as exc:  # noqa: BLE001  (ConnectionError, RuntimeError: "no cluster")
        return [
            f"no Ray cluster at {address or 'auto'} ({type(exc).__name__}: {exc}); start one on every node with "
            "scripts/ray_cluster.sh head|worker"
        ]
    return evaluate(states, hw, expected_nodes)


def status(hw: str, expected_nodes: int, address: str | None) -> int:
    profile = PROFILES[hw]
    resource = profile.platform.ray_resource
    try:
        states = live_states(hw, address)
    except Exception as exc:  # noqa: BLE001
        print(f"ray_cluster: error: cannot connect to a Ray cluster at {address or 'auto'}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for state in states:
        cpus = f"  CPU {state.cpus:g}" if profile.devices_per_node else ""
        print(f"node {state.address:<16} {'alive' if state.alive else 'DEAD '}  {resource} {state.devices:g}{cpus}")
    problems = evaluate(states, hw, expected_nodes)
    for problem in problems:
        print(f"ray_cluster: error: {problem}", file=sys.stderr)
    if not problems:
        print(f"cluster ready: {expected_nodes} node(s), profile {hw}")
    return EXIT_FAILED if problems else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.launch.cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start-args", help="print `ray start` device arguments for this node, one per line")
    start.add_argument("--hw", required=True, choices=PROFILE_NAMES)
    start.add_argument("--dry-run", action="store_true", help="no devices here is not an error")
    stat = sub.add_parser("status", help="check that all nodes joined with the expected devices")
    stat.add_argument("--hw", required=True, choices=PROFILE_NAMES)
    stat.add_argument("--nodes", type=int, default=1, help="expected number of nodes (default 1)")
    stat.add_argument("--address", help="Ray address (default: auto, the cluster this node belongs to)")
    args = parser.parse_args(argv)
    if args.command == "status":
        return status(args.hw, args.nodes, args.address)
    try:
        words, notes = start_args(args.hw, args.dry_run)
    except RuntimeError as exc:
        print(f"ray_cluster: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for note in notes:
        print(f"ray_cluster: note: {note}", file=sys.stderr)
    print("\n".join(words))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
