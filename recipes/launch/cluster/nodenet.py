"""This node's address, the interface that carries it, and the socket-interface variables set to it.

One place for both multi-node launchers: ``scripts/ray_cluster.sh`` (Ray: the raylet's environment is what every
verl worker on the node inherits) and the torchrun command of multi-node SFT (:mod:`recipes.launch.planning.plan`). Why
set them at all: unset, HCCL/NCCL, Gloo and TensorPipe each pick an interface by their own rule, and on a multi-NIC
host (management NIC, business NIC, docker0) that can be one the other nodes cannot reach; the job then hangs in
``init_process_group`` (see :mod:`platforms.doctor.network`, which reports the same interface). Which variables
is the platform's fact (``Platform.socket_ifname_vars``).

Machine reads go through :class:`NetProbes` (``ip -o -4 addr show``, the route's source address, ``hostname -I``)
so tests can describe any host; the readers themselves are :mod:`platforms.netprobe`, which the doctor
reads the host with too.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from platforms import Platform
from platforms.netprobe import DEFAULT_ROUTE_PEER, parse_ip_addr, route_source, run_ip_addr

#: Names the interface instead of detecting it (both launchers; ``ray_cluster.sh --ifname`` wins over it).
IFNAME_ENV = "KIT_IFNAME"


def hostname_addresses() -> list[str]:
    """``hostname -I``: this host's addresses in interface order (empty when the tool is missing)."""
    try:
        proc = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


@dataclass(frozen=True)
class NetProbes:
    """Where the network facts come from; tests replace any of them."""

    #: The text of ``ip -o -4 addr show`` (None without iproute2).
    ip_addr_text: Callable[[], str | None] = run_ip_addr
    #: The local address the kernel would use toward a peer (an IP or a name; None: no route, no such name).
    route_source: Callable[[str], str | None] = route_source
    #: ``hostname -I``.
    host_addresses: Callable[[], list[str]] = hostname_addresses


#: The real machine. Module-level so tests can swap it for the launcher's in-process planning.
LOCAL = NetProbes()


def _is_ipv4(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


def head_address(probes: NetProbes | None = None) -> str | None:
    """The Ray head's address: the first IPv4 of ``hostname -I`` (what the script always used), else the source
    address of the default route (Ray's own choice, ``node_ip_address_from_perspective``)."""
    probes = probes or LOCAL
    first = next((a for a in probes.host_addresses() if _is_ipv4(a)), None)
    return first or probes.route_source(DEFAULT_ROUTE_PEER)


def address_toward(peer: str, probes: NetProbes | None = None) -> str | None:
    """This node's address as ``peer`` (the head, MASTER_ADDR) sees it: the source of the route to it. For a
    peer that is this node, that is the peer's own address."""
    return (probes or LOCAL).route_source(peer)


def interface_of(ip: str, probes: NetProbes | None = None) -> str | None:
    """The interface that holds IPv4 address ``ip``; None when none does (or ``ip`` is missing)."""
    text = (probes or LOCAL).ip_addr_text()
    if text is None:
        return None
    return next((item.interface for item in parse_ip_addr(text) if item.ip == ip), None)


def interfaces(probes: NetProbes | None = None, sys_net: str = "/sys/class/net") -> list[str] | None:
    """The interfaces that hold an IPv4 address here, sorted; without ``ip``, every interface the kernel lists
    (``/sys/class/net``); None when neither can tell."""
    text = (probes or LOCAL).ip_addr_text()
    if text is not None:
        return sorted({item.interface for item in parse_ip_addr(text)})
    try:
        return sorted(os.listdir(sys_net))
    except OSError:
        return None


def short_names(platform: Platform) -> str:
    """``HCCL/GLOO/TP``: the platform's socket-interface variables, short, for one-line messages."""
    return "/".join(name.removesuffix("_SOCKET_IFNAME") for name in platform.socket_ifname_vars)


def socket_env(
    platform: Platform, interface: str, environ: Mapping[str, str], *, force: bool = False
) -> dict[str, str]:
    """The platform's socket-interface variables set to ``interface``; variables the user already set are kept
    (left out) unless ``force`` (an explicit ``--ifname``)."""
    return {name: interface for name in platform.socket_ifname_vars if force or not environ.get(name, "").strip()}


@dataclass(frozen=True)
class Interface:
    """The interface collectives should use, or why it is unknown."""

    name: str | None
    node_ip: str | None
    how: str  # "KIT_IFNAME", "--ifname", "holds 10.0.0.2", or the reason it is unknown


def interface_toward(peer: str, environ: Mapping[str, str], probes: NetProbes | None = None) -> Interface:
    """The interface carrying this node's address toward ``peer`` (torchrun: MASTER_ADDR); ``KIT_IFNAME`` wins."""
    named = environ.get(IFNAME_ENV, "").strip()
    if named:
        return Interface(named, None, IFNAME_ENV)
    node_ip = address_toward(peer, probes)
    if not node_ip:
        return Interface(None, None, f"no route from here to {peer}")
    interface = interface_of(node_ip, probes)
    if not interface:
        return Interface(None, node_ip, f"no interface here holds {node_ip} (or `ip` is missing)")
    return Interface(interface, node_ip, f"holds {node_ip}, the route's source toward {peer}")


# -- torchrun's rendezvous variables (multi-node SFT) ------------------------------------------------------------

_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)


def resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True


@dataclass(frozen=True)
class Rendezvous:
    """What is wrong with NODE_RANK / MASTER_ADDR / MASTER_PORT as set (unset ones are the caller's business)."""

    errors: list[str]
    #: A well-formed MASTER_ADDR that does not resolve here: an error on the node, a note when planning elsewhere.
    unresolved: str | None = None


def check_rendezvous(nnodes: int, environ: Mapping[str, str], resolve: Callable[[str], bool] = resolves) -> Rendezvous:
    """torchrun would otherwise wait for a rank that never comes (NODE_RANK=2 of 2), or fail late on a bad value."""
    errors = []
    rank = environ.get("NODE_RANK", "").strip()
    if rank and not (re.fullmatch(r"[0-9]+", rank) and int(rank) < nnodes):
        errors.append(
            f"NODE_RANK={rank!r} must be an integer in 0..{nnodes - 1} (trainer.nnodes={nnodes}; node 0 is the one "
            "at MASTER_ADDR)"
        )
    port = environ.get("MASTER_PORT", "").strip()
    if port and not (re.fullmatch(r"[0-9]+", port) and 1 <= int(port) <= 65535):
        errors.append(f"MASTER_PORT={port!r} must be a TCP port, 1..65535")
    host = environ.get("MASTER_ADDR", "").strip()
    unresolved = None
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOST_NAME.fullmatch(host):
                errors.append(
                    f"MASTER_ADDR={host!r} is not an IP address or host name (node 0's address only: the port goes "
                    "in MASTER_PORT)"
                )
            elif not resolve(host):
                unresolved = f"MASTER_ADDR={host!r} does not resolve on this machine (use node 0's IP address)"
    return Rendezvous(errors, unresolved)
