"""``scripts/ray_cluster.sh`` (``python -m recipes.launch.cluster.ray_cluster``): the kit's multi-node Ray, in Python.

    bash scripts/ray_cluster.sh head|worker [--hw PROFILE] [--with-sandbox] [--dry-run] ...
    bash scripts/ray_cluster.sh status --hw a3 --nodes 2 [--address HOST:PORT]
    bash scripts/ray_cluster.sh stop

``head``/``worker``/``stop`` are :mod:`recipes.launch.cluster.ray_node`; this module holds the checks on a running
cluster, which the launcher's multi-node RL pre-flight also calls (:mod:`recipes.launch.planning.plan`):

* every node joined with the profile's devices. Ray counts NPUs with pyACL and falls back to
  ``glob('/dev/davinci?')``, which sees only davinci0..9, so an A3 node whose CANN environment was not sourced joins
  with 10 of its 16 dies and verl then waits forever for a placement group; ``ray_cluster.sh`` passes the kit's own
  count and ``status`` checks what the cluster really has against the profile;
* every node reaches the code sandbox (:func:`sandbox_reach_problems`): verl 0.6.1 runs agent-loop workers on every
  node, so a sandbox URL only the head can reach turns half the tool calls into "sandbox unavailable" (issue 14).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from platforms import PROFILES, default_hardware, stacks
from platforms.cli_errors import EXIT_FAILED, EXIT_OK, entry_point, fail, port_arg

PROG = "ray_cluster"
START_RAY = "start one on every node with scripts/ray_cluster.sh head|worker"


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


#: How long a supervised multi-node run waits for its cluster before a restart (``--max-restarts``), in seconds.
NODE_WAIT_ENV = "KIT_RESTART_NODE_WAIT_S"
NODE_WAIT_DEFAULT_S = 600.0


def whole_cluster_problems(hw: str, expected_nodes: int, address: str | None, sandbox_url: str | None) -> list[str]:
    """The launcher's multi-node pre-flight again: every node live, and each reaches the sandbox. The sandbox probe
    runs a task on every listed node, so it also catches a node that died but that Ray still lists as alive (its
    health checks take seconds to notice)."""
    problems = cluster_problems(hw, expected_nodes, address)
    if not problems and sandbox_url:
        problems = sandbox_reach_problems(sandbox_url, address)
    return problems


def wait_for_nodes(
    check: Callable[[], list[str]],
    hw: str,
    expected_nodes: int,
    wait_s: float,
    say: Callable[[str], None],
    *,
    stack: stacks.Stack,
    poll_s: float = 10.0,
) -> str | None:
    """None once ``check`` (:func:`whole_cluster_problems`) finds nothing, else (after ``wait_s``) why not, with
    the fix.

    Why: a run whose worker node died (its container killed, the host rebooted) ends within seconds (the surviving
    ranks' collectives fail: "Connection closed by peer [node]"), but relaunching it onto a cluster with a node
    missing starts a trainer whose placement group can never be scheduled: verl waits forever without a word. The
    node's own restart (``ray_cluster.sh worker`` again) is the operator's; this waits for it, bounded. ``stack``:
    the run's, named in the commands the message gives."""
    deadline = time.monotonic() + wait_s
    problems = check()
    if problems:
        say(f"restart: waiting up to {wait_s:.0f} s for the Ray cluster ({'; '.join(problems)})")
    while problems and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        problems = check()
    if not problems:
        return None
    option = stack.cli_option
    return (
        f"the Ray cluster is not whole after {wait_s:.0f} s: {'; '.join(problems)}. A node left it: start Ray on it "
        f"again (bash scripts/ray_cluster.sh worker --hw {hw}{option} --address HEAD:PORT --with-sandbox), check "
        f"with `bash scripts/ray_cluster.sh status --hw {hw}{option} --nodes {expected_nodes}`, then re-run the same "
        f"command: it resumes from the newest checkpoint ({NODE_WAIT_ENV} sets the wait)"
    )


def status(hw: str, expected_nodes: int, address: str | None) -> int:
    profile = PROFILES[hw]
    resource = profile.platform.ray_resource
    try:
        states = live_states(hw, address)
    except Exception as exc:  # noqa: BLE001
        return fail(PROG, f"cannot connect to a Ray cluster at {address or 'auto'}: {exc}", START_RAY)
    for state in states:
        cpus = f"  CPU {state.cpus:g}" if profile.devices_per_node else ""
        print(f"node {state.address:<16} {'alive' if state.alive else 'DEAD '}  {resource} {state.devices:g}{cpus}")
    problems = evaluate(states, hw, expected_nodes)
    for problem in problems:
        fail(PROG, problem)
    if not problems:
        print(f"cluster ready: {expected_nodes} node(s), profile {hw}")
    return EXIT_FAILED if problems else EXIT_OK


# -- every node reaches the sandbox ------------------------------------------------------------------------------

#: (the sandbox's /health URL, Ray address, seconds per GET) -> {node: None if it answered, else why not}.
NodeProbe = Callable[[str, str | None, float], dict[str, str | None]]


def health_url_of(url: str) -> str:
    """The /health URL of the sandbox serving ``url`` (a /run_code URL)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/health"


def probe_every_node(health_url: str, address: str | None, timeout_s: float) -> dict[str, str | None]:
    """GET ``health_url`` from every live node of the Ray cluster, one task pinned to each node.

    The task is a nested function so Ray ships it by value (the nodes need not import the kit), asks no CPU (it runs
    next to anything), and answers None when any HTTP answer came back (the sandbox is reachable) or the error.
    """
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def get(url: str, timeout: float) -> str | None:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310  (the recipe's own sandbox URL)
                return None
        except urllib.error.HTTPError:
            return None  # it answered: reachable (a SandboxFusion without /health answers 404)
        except Exception as exc:  # noqa: BLE001  (refused, timeout, no route, no such name: all "cannot reach")
            return f"{type(exc).__name__}: {exc}"

    ray.init(address=reachable_address(address), logging_level="ERROR", log_to_driver=False)
    try:
        task = ray.remote(num_cpus=0, max_retries=0)(get)
        pending = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            label = f"{node.get('NodeManagerAddress', '?')} ({node.get('NodeManagerHostname', '?')})"
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            pending[label] = task.options(scheduling_strategy=strategy).remote(health_url, timeout_s)
        deadline = time.monotonic() + timeout_s + 60  # + a worker process starting on each node
        answers: dict[str, str | None] = {}
        for label, ref in pending.items():
            try:
                answers[label] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except GetTimeoutError:
                ray.cancel(ref, force=True)
                answers[label] = f"the check did not finish within {timeout_s + 60:.0f} s"
            except Exception as exc:  # noqa: BLE001  (the task itself failed on that node)
                answers[label] = f"the check failed there: {type(exc).__name__}: {exc}"
        return answers
    finally:
        ray.shutdown()


def sandbox_reach_problems(
    url: str, address: str | None, timeout_s: float = 10.0, probe: NodeProbe | None = None
) -> list[str]:
    """One line per Ray node that cannot GET the sandbox's /health (the launcher's multi-node RL pre-flight)."""
    from recipes.launch.sizing.capacity import is_loopback

    health = health_url_of(url)
    try:
        answers = (probe or probe_every_node)(health, address, timeout_s)
    except Exception as exc:  # noqa: BLE001  (no cluster, ray.init failed: one line, not a traceback)
        return [f"could not ask the Ray nodes whether they reach {health} ({type(exc).__name__}: {exc})"]
    if not answers:
        return [f"no live Ray node to check {health} from"]
    fix = (
        "start one sandbox per node (scripts/ray_cluster.sh head|worker --with-sandbox)"
        if is_loopback(url)
        else "serve the sandbox on an address every node reaches (retool-sandbox serve --host 0.0.0.0) or start one "
        "per node (scripts/ray_cluster.sh head|worker --with-sandbox) and use http://127.0.0.1:<port>/run_code"
    )
    return [
        f"node {node} cannot reach the sandbox: GET {health}: {why}; {fix}"
        for node, why in sorted(answers.items())
        if why is not None
    ]


# -- the CLI -----------------------------------------------------------------------------------------------------

EPILOG = """\
Typical 2 x A3 session (Qwen2.5-32B RL), one sandbox per node:
  node0$ bash scripts/ray_cluster.sh head --hw a3 --with-sandbox
  node1$ bash scripts/ray_cluster.sh worker --hw a3 --address <node0-ip>:6379 --with-sandbox
  node0$ bash scripts/ray_cluster.sh status --hw a3 --nodes 2
  node0$ RETOOL_SANDBOX_URL=http://127.0.0.1:8080/run_code bash recipes/run_qwen2.5_32b_dapo_npu.sh --hw a3

head/worker set, before `ray start`: the profile's RL environment and PYTHONPATH (what every Ray worker inherits),
the platform's socket-interface variables (HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME/TP_SOCKET_IFNAME on NPU,
NCCL_SOCKET_IFNAME/... on CUDA) to the interface that carries the node address, and the device count explicitly.
"""


def build_parser() -> argparse.ArgumentParser:
    from platforms.cli import add_profile_option, add_stack_option

    parser = argparse.ArgumentParser(
        prog="bash scripts/ray_cluster.sh",
        description="Multi-node Ray for the kit's RL recipes: start the head, join workers, check that every node "
        "joined with its devices, stop.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        choices=("head", "worker", "status", "stop"),
        help="head: start the Ray head here (run first, on the node that launches the recipe); worker: join the "
        "head (--address); status: live nodes == --nodes, each with the profile's devices, else exit 1; stop: this "
        "node's kit sandbox, then `ray stop` (every Ray process of this user here)",
    )
    add_profile_option(parser, "hardware profile (default: KIT_HW, else this machine's)")
    add_stack_option(parser)
    _add_node_options(parser)
    _add_sandbox_options(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="head/worker/stop: print what would be done; start nothing"
    )
    return parser


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    """Where this node and the head are, and how many nodes status expects."""
    from recipes.launch.cluster import ray_node

    parser.add_argument(
        "--address",
        default=os.environ.get("RAY_HEAD_ADDRESS", "").strip() or None,
        help="worker: the head's HOST[:PORT]; status: the cluster (default $RAY_HEAD_ADDRESS, else this node's)",
    )
    parser.add_argument(
        "--port",
        type=port_arg,
        default=os.environ.get("RAY_PORT", "").strip() or str(ray_node.DEFAULT_PORT),  # a string: argparse checks it
        help="head: GCS port; worker: the head's when --address has none (default $RAY_PORT, else %(default)s)",
    )
    parser.add_argument(
        "--node-ip",
        help="this node's address (default: head: the first of `hostname -I`; worker: the source address of the "
        "route to the head)",
    )
    parser.add_argument(
        "--ifname",
        help="socket interface for collectives (default: $KIT_IFNAME, else the interface that holds the node "
        "address); sets every socket-interface variable, even ones already set",
    )
    parser.add_argument("--nodes", type=int, default=1, help="status: expected number of nodes (default 1)")
    parser.add_argument(
        "--num-cpus",
        type=int,
        metavar="N",
        help="head/worker: the Ray CPU slots this node offers (default: the profile's; cpu: 8). On CPU nodes every "
        "trainer rank and rollout server holds one, and Ray places a run's one-rank groups on the least-used node: "
        "give nodes different counts to spread them, or fewer slots to keep a node light",
    )
    parser.add_argument(
        "--dashboard-public",
        action="store_true",
        help="head: Ray dashboard on 0.0.0.0 instead of 127.0.0.1. Its job API runs code without authentication "
        "for anyone who reaches the port: trusted networks only",
    )


def _add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """The per-node kit sandbox that head/worker can start beside Ray (recipes.launch.cluster.node_sandbox)."""
    from recipes.launch.cluster import node_sandbox

    parser.add_argument(
        "--with-sandbox",
        action="store_true",
        help="head/worker: also start a kit sandbox on 127.0.0.1:--sandbox-port here, so a loopback "
        "RETOOL_SANDBOX_URL is right on every node (stop ends it)",
    )
    parser.add_argument(
        "--sandbox-port",
        type=port_arg,
        default=node_sandbox.DEFAULT_PORT,
        help="the per-node sandbox's port (%(default)s)",
    )
    parser.add_argument(
        "--sandbox-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an option for `retool-sandbox serve` (repeatable), e.g. --sandbox-arg=--max-queue=1024",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        help=f"node-local directory for the sandbox's pid and log files (default ${node_sandbox.RUN_DIR_ENV}, else "
        f"{node_sandbox.default_run_dir()})",
    )


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    from recipes.launch.cluster import node_sandbox, ray_node

    parser = build_parser()
    args = parser.parse_args(argv)
    stack = stacks.export(stacks.resolve(args.stack))  # the raylet's environment, and what its workers serve
    hw = args.profile or default_hardware()  # a bad KIT_HW raises a UsageError
    if args.dashboard_public and args.command != "head":
        parser.error("--dashboard-public is for head only")
    if args.with_sandbox and args.command not in ("head", "worker"):
        parser.error("--with-sandbox is for head and worker (stop ends the sandbox it started)")
    if any(arg.split("=")[0] in ("--host", "--port") for arg in args.sandbox_arg):
        parser.error("--sandbox-arg cannot move the sandbox: it listens on 127.0.0.1:--sandbox-port")
    if args.num_cpus is not None and (args.command not in ("head", "worker") or args.num_cpus < 1):
        parser.error("--num-cpus is for head and worker, and at least 1")
    if args.command == "status":
        return status(hw, args.nodes, args.address)
    run_dir = args.run_dir or node_sandbox.default_run_dir()
    if args.command == "stop":
        return ray_node.stop_node(run_dir, args.dry_run)
    box = node_sandbox.NodeSandbox(args.sandbox_port, run_dir, tuple(args.sandbox_arg)) if args.with_sandbox else None
    request = ray_node.NodeRequest(
        role=args.command,
        hw=hw,
        stack=stack,
        port=args.port,
        address=args.address,
        node_ip=args.node_ip,
        ifname=args.ifname,
        dry_run=args.dry_run,
        dashboard_public=args.dashboard_public,
        sandbox=box,
        num_cpus=args.num_cpus,
    )
    return ray_node.start_node(request)


if __name__ == "__main__":
    sys.exit(main())
