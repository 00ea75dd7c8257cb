"""Port mapping: PCP's MAP request and response, RFC 6887 (I/O-free).

:func:`map_request` builds a MAP request for one TCP port (a lifetime of 0 deletes the mapping
made with the same nonce); :func:`parse_map_response` checks an answer against the request it
answers (version, opcode, nonce, protocol, internal port) and returns a :class:`MapResponse`.
A NAT-PMP gateway answers a PCP request with version 0 and its own "unsupported version"
(RFC 6887, section 9): :class:`WrongVersion` says so, and the client falls back to NAT-PMP.

Invariants: requests are 60 bytes (header and MAP opcode, no options); addresses travel as
16-byte IPv6 or IPv4-mapped IPv6 addresses; a response that does not match its request raises
:class:`PcpError` and is ignored by the client (someone else's answer, or a forgery).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from txdilation.errors import ProtocolViolation

__all__ = [
    "PCP_PORT",
    "RESULTS",
    "MapResponse",
    "PcpError",
    "WrongVersion",
    "map_request",
    "parse_map_response",
]

PCP_PORT = 5351
VERSION = 2
OPCODE_MAP = 1
RESPONSE_BIT = 0x80
TCP = 6
NONCE_SIZE = 12

_HEADER = struct.Struct("!BBHI16s")  # version, R|opcode, reserved, lifetime, client address
_MAP = struct.Struct("!12sB3sHH16s")  # nonce, protocol, reserved, internal, external, address
_RESPONSE = struct.Struct("!BBBBII12s")  # version, R|opcode, reserved, result, lifetime, epoch

#: result codes (RFC 6887, section 7.4)
RESULTS = {
    0: "success",
    1: "unsupported version",
    2: "not authorized",
    3: "malformed request",
    4: "unsupported opcode",
    5: "unsupported option",
    6: "malformed option",
    7: "network failure",
    8: "no resources",
    9: "unsupported protocol",
    10: "user exceeded quota",
    11: "cannot provide external",
    12: "address mismatch",
    13: "excessive remote peers",
}


class PcpError(ValueError, ProtocolViolation):
    """A datagram that is not an answer to our request."""


class WrongVersion(PcpError):
    """The gateway answered in another version (a NAT-PMP gateway answers version 0)."""


@dataclass(frozen=True, slots=True)
class MapResponse:
    """A MAP answer to our request: ``result`` 0 is success, then the external address and
    port are assigned for ``lifetime`` seconds; ``epoch`` is the server's epoch time."""

    result: int
    lifetime: int
    epoch: int
    external_address: str
    external_port: int


def _as_16_bytes(address: str) -> bytes:
    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        return ipaddress.IPv6Address(f"::ffff:{ip}").packed
    return ip.packed


def _from_16_bytes(packed: bytes) -> str:
    ip = ipaddress.IPv6Address(packed)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else str(ip)


def map_request(
    client_address: str, nonce: bytes, internal_port: int, suggested_port: int, lifetime: int
) -> bytes:
    """A MAP request for TCP ``internal_port`` of ``client_address`` (our address as the
    gateway sees it), suggesting the same family's any external address and
    ``suggested_port`` (0: any).

    :raises ValueError: a nonce not of 12 bytes, or a port or lifetime out of range.
    """
    if len(nonce) != NONCE_SIZE:
        raise ValueError("a PCP nonce has 12 bytes")
    if not (0 < internal_port < 65536 and 0 <= suggested_port < 65536 and 0 <= lifetime < 2**32):
        raise ValueError("port or lifetime out of range")
    any_address = "0.0.0.0" if ipaddress.ip_address(client_address).version == 4 else "::"
    header = _HEADER.pack(VERSION, OPCODE_MAP, 0, lifetime, _as_16_bytes(client_address))
    body = _MAP.pack(
        nonce, TCP, b"\0\0\0", internal_port, suggested_port, _as_16_bytes(any_address)
    )
    return header + body


def parse_map_response(data: bytes, nonce: bytes, internal_port: int) -> MapResponse:
    """The MAP answer in ``data`` to our request with ``nonce`` for ``internal_port``.

    :raises WrongVersion: a version other than 2 (the gateway speaks NAT-PMP only).
    :raises PcpError: too short, not a MAP answer, or for another request.
    """
    if len(data) >= 2 and data[0] != VERSION:
        raise WrongVersion(f"PCP answer of version {data[0]}")
    if len(data) < _RESPONSE.size + _MAP.size or len(data) % 4:
        raise PcpError(f"PCP answer of {len(data)} bytes")
    _, op, _, result, lifetime, epoch, _ = _RESPONSE.unpack_from(data)
    if op != RESPONSE_BIT | OPCODE_MAP:
        raise PcpError(f"PCP answer to opcode {op:#x}")
    their_nonce, protocol, _, port, external_port, external = _MAP.unpack_from(data, _RESPONSE.size)
    if their_nonce != nonce:
        raise PcpError("PCP answer with another nonce")
    if result == 0 and (protocol != TCP or port != internal_port):
        raise PcpError("PCP answer for another protocol or port")
    return MapResponse(result, lifetime, epoch, _from_16_bytes(external), external_port)
