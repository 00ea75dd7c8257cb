"""Port mapping: what a mapping is, and how asking for one fails (I/O-free).

A :class:`PortMapping` is one TCP port forward a gateway granted: which protocol asked for it,
the internal address and port it leads to, the external address and port the peer dials, and
for how long (``lifetime`` seconds from ``obtained_at``, the clock's seconds). ``token`` keeps
what the protocol needs to renew or delete it (PCP's nonce, UPnP's control URL and service).

Invariants: a mapping is immutable (a renewal is a new one); :func:`renew_at` is strictly
before the lease ends; asking fails with :class:`NoService` (nothing answers that protocol:
try the next one) or :class:`MappingRefused` (the gateway answered no).
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

from txdilation.errors import LinkFailure

__all__ = [
    "MappingError",
    "MappingProtocol",
    "MappingRefused",
    "NoService",
    "PortMapping",
    "is_public",
    "renew_at",
]

#: lease asked for (seconds); renewed at half of what the gateway grants
REQUESTED_LIFETIME = 7200
#: a lease shorter than this is renewed this long before it ends at the latest
RENEW_MARGIN = 2.0


class MappingProtocol(enum.Enum):
    """The protocols, in the order they are tried."""

    PCP = "pcp"
    NAT_PMP = "nat-pmp"
    UPNP_IGD = "upnp-igd"


@dataclass(frozen=True, slots=True)
class PortMapping:
    """One TCP port forward (see the module docstring)."""

    protocol: MappingProtocol
    internal_address: str
    internal_port: int
    external_address: str
    external_port: int
    lifetime: float
    obtained_at: float
    token: tuple[str, ...] = ()

    @property
    def expires_at(self) -> float:
        return self.obtained_at + self.lifetime

    def describe(self) -> str:
        """``pcp: 198.20.1.2:40000 -> 192.168.1.2:40000 for 7200 s`` (a log line's part)."""
        return (
            f"{self.protocol.value}: {self.external_address}:{self.external_port} -> "
            f"{self.internal_address}:{self.internal_port} for {self.lifetime:.0f} s"
        )


def renew_at(mapping: PortMapping) -> float:
    """When to renew ``mapping``: half-way through its lease (RFC 6886 and 6887 suggest it),
    and at least :data:`RENEW_MARGIN` seconds before it ends (a very short lease: at once)."""
    half = mapping.obtained_at + mapping.lifetime / 2
    return max(mapping.obtained_at, min(half, mapping.expires_at - RENEW_MARGIN))


def is_public(address: str) -> bool:
    """Whether ``address`` is worth advertising as a mapped external address: a global IP
    address (not private, shared by a carrier-grade NAT, documentation, loopback, link-local,
    multicast or unspecified): a gateway behind another NAT maps to an address nobody outside
    can dial."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_global and not ip.is_multicast


class MappingError(LinkFailure):
    """Asking for a mapping failed."""


class NoService(MappingError):
    """Nothing answered this protocol (no answer in time, a port unreachable, no such
    service): the next protocol may do better."""


class MappingRefused(MappingError):
    """The gateway answered this protocol, and refused (``code``: the protocol's result code)."""

    def __init__(self, protocol: MappingProtocol, code: int, what: str) -> None:
        super().__init__(f"{protocol.value} refused: {what} ({code})")
        self.protocol = protocol
        self.code = code
