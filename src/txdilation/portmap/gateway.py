"""Port mapping: which gateway to ask, and our address as it sees us.

:func:`parse_routes` reads the text of ``/proc/net/route`` (Linux; I/O-free);
:func:`find_gateway` reads that file, takes the IPv4 default route with the lowest metric, and
finds the local address that faces its gateway (a UDP socket's ``connect``, which sends
nothing). Elsewhere, or when the file cannot be read, there is no gateway and nothing is asked.

Invariants: a gateway is returned only when it looks like a home router: it and our address
facing it are private IPv4 addresses (RFC 1918; as Tailscale's ``LikelyHomeRouterIP``), so a
host on a public or documentation network, a server, never sends mapping requests anywhere;
nothing here blocks for longer than reading one small file.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

__all__ = ["ROUTES", "Gateway", "Route", "find_gateway", "parse_routes"]

ROUTES = "/proc/net/route"
_RTF_UP, _RTF_GATEWAY = 0x1, 0x2
_HOME_NETWORKS = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


@dataclass(frozen=True, slots=True)
class Route:
    """One IPv4 route: destination network, gateway (None: on-link), interface, metric."""

    network: ipaddress.IPv4Network
    gateway: str | None
    interface: str
    metric: int


@dataclass(frozen=True, slots=True)
class Gateway:
    """The default gateway's address and our address facing it."""

    address: str
    local_address: str


def _address(hex_text: str) -> str:
    # the kernel prints each address as a native-endian integer of its network-order bytes
    return socket.inet_ntoa(struct.pack("=I", int(hex_text, 16)))


def parse_routes(text: str) -> list[Route]:
    """The usable routes in the text of ``/proc/net/route``, lowest metric first."""
    routes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            flags = int(fields[3], 16)
            destination, gateway, mask = (_address(fields[i]) for i in (1, 2, 7))
            network = ipaddress.IPv4Network(f"{destination}/{mask}", strict=False)
            metric = int(fields[6])
        except (ValueError, struct.error):
            continue
        if not flags & _RTF_UP:
            continue
        via = gateway if flags & _RTF_GATEWAY else None
        routes.append(Route(network, via, fields[0], metric))
    return sorted(routes, key=lambda r: r.metric)


def _home(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.version == 4 and any(ip in n for n in _HOME_NETWORKS)


def find_gateway(routes_path: str = ROUTES) -> Gateway | None:
    """The default gateway if it looks like a home router (see the module docstring)."""
    try:
        with open(routes_path, encoding="ascii") as f:
            routes = parse_routes(f.read())
    except (OSError, UnicodeDecodeError):
        return None
    default = [r for r in routes if r.network.prefixlen == 0 and r.gateway is not None]
    if not default or default[0].gateway is None:
        return None
    gateway = default[0].gateway
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((gateway, 9))  # chooses the source address; sends nothing
            local = s.getsockname()[0]
    except OSError:
        return None
    if not (_home(gateway) and _home(local)):
        return None
    return Gateway(gateway, local)
