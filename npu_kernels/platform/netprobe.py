"""This host's network as the multi-node launchers and the doctor read it: its IPv4 addresses with their
interfaces (``ip -o -4 addr show``) and the local address of the route toward a peer.

Why here, below both users: ``recipes/launch/nodenet.py`` (the launchers' node address and interface) and
``npu_kernels/doctor/network.py`` (the doctor's check of the same interface) must read the host the same way, and
the launcher reaching into the doctor's internals made the recipes depend on the doctor (issue 22 item 5). Stdlib
only; no platform branches (the socket-interface variables are the platform's, ``Platform.socket_ifname_vars``).
"""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass

#: The peer whose route tells this node's address when MASTER_ADDR is unset (Ray's default: get_node_ip_address).
DEFAULT_ROUTE_PEER = "8.8.8.8"

_ADDR_LINE = re.compile(r"^\d+:\s+(?P<iface>[^\s@]+)\S*\s+inet\s+(?P<ip>\d+\.\d+\.\d+\.\d+)(?:/\d+)?")


@dataclass(frozen=True)
class InterfaceAddress:
    interface: str
    ip: str


def parse_ip_addr(text: str) -> list[InterfaceAddress]:
    """Interfaces and IPv4 addresses from ``ip -o -4 addr show`` (one line per address)."""
    found = []
    for line in text.splitlines():
        match = _ADDR_LINE.match(line.strip())
        if match:
            found.append(InterfaceAddress(match["iface"], match["ip"]))
    return found


def run_ip_addr() -> str | None:
    """``ip -o -4 addr show``: every IPv4 address with its interface, one line each; None without iproute2."""
    try:
        proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def route_source(peer: str) -> str | None:
    """The local address the kernel would use to reach ``peer``: what the other nodes see as this node's address.

    Ray's own choice of the node IP (``node_ip_address_from_perspective`` in ray/_private/services.py): connect a
    UDP socket, which sends nothing and only picks the route, and read its local end.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((peer, 53))
            return str(sock.getsockname()[0])
    except OSError:  # no route (an offline node without default route), or a host name that does not resolve
        return None
