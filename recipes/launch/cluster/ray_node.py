"""``scripts/ray_cluster.sh head|worker|stop``: bring one node into (or out of) the kit's Ray cluster.

What a node needs before ``ray start``, because Ray workers inherit the raylet's environment, so this is what every
verl worker on the node will see:

* the platform's setup scripts (CANN, ATB) sourced: the shell wrapper sources those present; a real start stops
  here when one of the profile's is missing (a dry run notes it);
* the hardware profile's RL environment (:meth:`HardwareProfile.env`) and ``PYTHONPATH=<kit>``;
* the platform's socket-interface variables set to the interface that carries the node's Ray address
  (:mod:`recipes.launch.cluster.nodenet`), so collectives bootstrap on the network the nodes reach each other on;
* the device count passed explicitly (``Platform.ray_start_args``): Ray's own fallback counts NPUs with
  ``glob('/dev/davinci?')`` and sees 10 of an A3's 16 dies, and verl then waits forever for a placement group.

The head's dashboard listens on 127.0.0.1: it hosts Ray Jobs, and "anybody who can access the associated ports can
execute arbitrary code on your Ray Cluster" (Ray's security page, docs.ray.io/en/latest/ray-security; CVE-2023-48022
is that job-submission API used remotely). ``--dashboard-public`` opts into 0.0.0.0 with a warning.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from platforms import PROFILES, applied
from platforms.cli_errors import KitError, UsageError
from platforms.stacks import Stack
from recipes.launch.cluster import node_sandbox, nodenet

KIT_ROOT = Path(__file__).resolve().parents[3]
PREFIX = "ray_cluster"
DEFAULT_PORT = 6379
DASHBOARD_PORT = 8265  # Ray's default --dashboard-port
LOCAL_DASHBOARD, PUBLIC_DASHBOARD = "127.0.0.1", "0.0.0.0"  # noqa: S104  (the opt-in the warning is about)


class NodeError(KitError):
    """A start that cannot go on (exit 1); a wrong option is a UsageError (exit 2). Either is one line."""


def say(text: str) -> None:
    print(f"{PREFIX}: {text}", flush=True)


def note(text: str) -> None:
    print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)


def ray_binary() -> str:
    """The ``ray`` next to this interpreter (the kit's venv or image), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if os.access(beside, os.X_OK) else "ray"


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
            raise NodeError(
                f"no {platform.ray_resource} device visible on this node (profile {hw}); are the platform's setup "
                "scripts sourced and are the devices mapped into the container?"
            )
        notes.append(f"no {platform.ray_resource} here (dry run): showing the profile's {expected} per node")
        count = expected
    elif count != expected:
        notes.append(f"this node has {count} {platform.ray_resource} devices, profile {hw} expects {expected}")
    return platform.ray_start_args(count), notes


@dataclass(frozen=True)
class NodeRequest:
    """What ``head`` / ``worker`` were asked to do (parsed by :func:`recipes.launch.cluster.ray_cluster.main`)."""

    role: str  # "head" or "worker"
    hw: str
    stack: Stack  # whose environment the raylet (so every verl worker on the node) gets; named in the next steps
    port: int = DEFAULT_PORT
    address: str | None = None  # worker: the head's HOST[:PORT]
    node_ip: str | None = None
    ifname: str | None = None  # --ifname: forces every socket-interface variable
    dry_run: bool = False
    dashboard_public: bool = False
    sandbox: node_sandbox.NodeSandbox | None = None
    num_cpus: int | None = None  # --num-cpus: the Ray CPU slots this node offers, instead of the profile's


def _check_setup_scripts(request: NodeRequest, environ: Mapping[str, str]) -> None:
    platform = PROFILES[request.hw].platform
    for script in platform.setup_script_paths(environ):
        if script.is_file():
            say(f"setup script {script} (sourced by scripts/ray_cluster.sh)")
        elif request.dry_run:
            say(f"note: {script} not found (dry run: a real start stops here)")
        else:
            variable = platform.install_root_env or "its install root"
            raise NodeError(
                f"{script} not found: Ray would count {platform.ray_resource} devices and load the device stack "
                f"without the environment it sets (set {variable} if it is installed elsewhere)"
            )


def _node_ip(request: NodeRequest, probes: nodenet.NetProbes | None) -> tuple[str, str | None]:
    """(this node's address, the head's HOST:PORT for a worker)."""
    head = None
    if request.role == "worker":
        if not request.address:
            raise UsageError("worker needs the head's address", "--address HEAD_IP:PORT (or RAY_HEAD_ADDRESS)")
        head = request.address if ":" in request.address else f"{request.address}:{request.port}"
        node_ip = request.node_ip or nodenet.address_toward(head.rpartition(":")[0], probes)
    else:
        node_ip = request.node_ip or nodenet.head_address(probes)
    if not node_ip:
        raise UsageError("cannot tell this node's address", "pass --node-ip IP")
    return node_ip, head


def _interface(request: NodeRequest, node_ip: str, environ: Mapping[str, str], probes: nodenet.NetProbes | None) -> str:
    """The collectives' socket interface; the dry run refuses what the start refuses (issue 21, finding 9: it printed
    "interface <iface of 1.2.3.4>" for an address no interface here holds, and took ``--ifname nosuch0``)."""
    named = request.ifname or environ.get(nodenet.IFNAME_ENV, "").strip()
    if named:
        held = nodenet.interfaces(probes)
        if held is not None and named not in held:
            what = "--ifname" if request.ifname else nodenet.IFNAME_ENV
            raise UsageError(f"{what} {named}: no interface of that name holds an IPv4 address here", ", ".join(held))
        return named
    found = nodenet.interface_of(node_ip, probes)
    if found:
        return found
    raise UsageError(f"no interface holds {node_ip}", f"pass --ifname IFACE (or set {nodenet.IFNAME_ENV})")


def ray_command(request: NodeRequest, node_ip: str, head: str | None, device_args: list[str]) -> list[str]:
    if request.role == "head":
        dashboard = PUBLIC_DASHBOARD if request.dashboard_public else LOCAL_DASHBOARD
        return [
            ray_binary(),
            "start",
            "--head",
            f"--port={request.port}",
            f"--node-ip-address={node_ip}",
            f"--dashboard-host={dashboard}",
            *device_args,
        ]
    return [ray_binary(), "start", f"--address={head}", f"--node-ip-address={node_ip}", *device_args]


def _with_kit_path(environ: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(KIT_ROOT) not in parts:
        env["PYTHONPATH"] = os.pathsep.join([str(KIT_ROOT), *parts])
    return env


def start_node(
    request: NodeRequest,
    environ: Mapping[str, str] | None = None,
    probes: nodenet.NetProbes | None = None,
    run: Callable[[list[str], dict[str, str]], int] | None = None,
) -> int:
    """Everything ``head``/``worker`` do; raises :class:`NodeError` for what stops a start. ``run`` runs the
    ``ray start`` command (tests replace it)."""
    environ = dict(os.environ if environ is None else environ)
    profile = PROFILES[request.hw]
    platform = profile.platform
    _check_setup_scripts(request, environ)
    env = _with_kit_path(applied(profile.env("rl", request.stack, environ), environ))
    say(f"kit environment for rl on {request.hw} applied ({profile.env_command('rl', request.stack)})")
    if request.dry_run:
        for entry in profile.env("rl", request.stack, environ):  # the reasons: the command in the line above
            say(f"  unset {entry.name}" if entry.value is None else f"  {entry.name}={shlex.quote(entry.value)}")
    node_ip, head = _node_ip(request, probes)
    interface = _interface(request, node_ip, environ, probes)
    sockets = nodenet.socket_env(platform, interface, environ, force=bool(request.ifname))
    env.update(sockets)
    kept = [f"{name}={environ[name]}" for name in platform.socket_ifname_vars if name not in sockets]
    say(
        f"node {node_ip}, {nodenet.short_names(platform)} socket interface {interface}"
        + (f" (kept from the environment: {', '.join(kept)}; --ifname overrides)" if kept else "")
    )
    device_args, notes = start_args(request.hw, request.dry_run)
    if request.num_cpus is not None:
        device_args = [arg for arg in device_args if not arg.startswith("--num-cpus")] + [
            f"--num-cpus={request.num_cpus}"
        ]
    for text in notes:
        note(f"note: {text}")
    command = ray_command(request, node_ip, head, device_args)
    if request.dashboard_public:
        note(
            f"warning: --dashboard-public: Ray's dashboard on {PUBLIC_DASHBOARD}:{DASHBOARD_PORT} serves its job "
            "submission API without authentication: anyone who reaches the port can run code on this cluster. "
            f"Use it on a trusted network only; otherwise keep {LOCAL_DASHBOARD} and tunnel "
            f"(ssh -L {DASHBOARD_PORT}:127.0.0.1:{DASHBOARD_PORT} <head>)"
        )
    box = request.sandbox
    if request.dry_run:
        if box is not None:
            say(f"would start sandbox: {shlex.join(box.command)} (log {box.log_file}, pid {box.pid_file})")
            say(f"  RETOOL_SANDBOX_URL={box.url} is then right on every node started with --with-sandbox")
        say(f"would run: {shlex.join(command)}")
        return 0
    if box is not None:
        try:
            node_sandbox.start(box, _with_kit_path(environ), say)
        except RuntimeError as exc:
            raise NodeError(f"sandbox: {exc}") from None
    rc = (run or _run)(command, env)
    if rc != 0:
        if box is not None:
            node_sandbox.stop(box.run_dir, say, ports=[box.port])
        raise NodeError(f"`ray start` exited with status {rc}")
    _next_steps(request, node_ip)
    return 0


def _run(command: list[str], env: dict[str, str]) -> int:
    try:
        return subprocess.run(command, env=env, check=False).returncode
    except OSError as exc:
        raise NodeError(f"cannot run {command[0]}: {exc}") from None


def _next_steps(request: NodeRequest, node_ip: str) -> None:
    if request.role != "head":
        return
    sandbox = " --with-sandbox" if request.sandbox is not None else ""
    option = request.stack.cli_option
    say(
        f"head up. On each other node: bash scripts/ray_cluster.sh worker --hw {request.hw}{option} "
        f"--address {node_ip}:{request.port}{sandbox}"
    )
    say(f"then here: bash scripts/ray_cluster.sh status --hw {request.hw}{option} --nodes <N>")


def stop_node(
    run_dir: Path, dry_run: bool = False, run: Callable[[list[str], dict[str, str]], int] | None = None
) -> int:
    """The node's kit sandboxes (from ``run_dir``), then ``ray stop`` (every Ray process of this user here)."""
    node_sandbox.stop(run_dir, say, dry_run=dry_run)
    command = [ray_binary(), "stop"]
    if dry_run:
        say(f"would run: {shlex.join(command)}")
        return 0
    return (run or _run)(command, dict(os.environ))
