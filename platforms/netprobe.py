"""This host's network as the multi-node launchers and the doctor read it: its IPv4 addresses with their
interfaces (``ip -o -4 addr show``) and the local address of the route toward a peer.

Why here, below both users: ``recipes/launch/cluster/nodenet.py`` (the launchers' node address and interface) and
``platforms/doctor/network.py`` (the doctor's check of the same interface) must read the host the same way, and
the launcher reaching into the doctor's internals made the recipes depend on the doctor (issue 22 item 5). Stdlib
only; no platform branches (the socket-interface variables are the platform's, ``Platform.socket_ifname_vars``).
"""

from __future__ import annotations

import fcntl
import re
import socket
import struct
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
    """``ip -o -4 addr show``: every IPv4 address with its interface, one line each. Without iproute2 (the slim
    images: python:3.11-slim has no ``ip``, and ``scripts/test_images.sh --two-node`` found ray_cluster.sh refusing
    to start there) the same lines from the kernel (:func:`ioctl_ip_addr`); None when neither answers."""
    try:
        proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ioctl_ip_addr()
    return proc.stdout if proc.returncode == 0 else ioctl_ip_addr()


#: ``SIOCGIFADDR`` (linux/sockios.h): an interface's primary IPv4 address.
_SIOCGIFADDR = 0x8915


def ioctl_ip_addr(names: list[tuple[int, str]] | None = None) -> str | None:
    """Each interface's primary IPv4 address asked of the kernel (``SIOCGIFADDR``), written as ``ip -o -4 addr
    show`` lines so one parser reads both; interfaces without IPv4 are left out. None when none has one.
    ``names``: (index, name) pairs, default ``socket.if_nameindex()``. Secondary addresses are not seen (iproute2
    needed for those)."""
    lines = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for index, name in socket.if_nameindex() if names is None else names:
            try:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it (or gone)
                continue
            lines.append(f"{index}: {name}    inet {socket.inet_ntoa(packed[20:24])} scope global {name}")
    return "\n".join(lines) + "\n" if lines else None


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
