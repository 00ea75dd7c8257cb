"""Port mapping: NAT-PMP's requests and responses, RFC 6886 (I/O-free).

Two exchanges: the gateway's external address (:func:`address_request`,
:func:`parse_address_response`) and a TCP mapping (:func:`map_request`,
:func:`parse_map_response`; a lifetime of 0 and a suggested port of 0 delete it).

Invariants: requests are 2 and 12 bytes; an answer is checked against its request (version 0,
opcode plus 128, the internal port) and :class:`NatPmpError` raised otherwise, for the client
to ignore; a result code other than 0 is returned, not raised (the client decides).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from txdilation.errors import ProtocolViolation

__all__ = [
    "NATPMP_PORT",
    "RESULTS",
    "AddressResponse",
    "MapResponse",
    "NatPmpError",
    "address_request",
    "map_request",
    "parse_address_response",
    "parse_map_response",
]

NATPMP_PORT = 5351
VERSION = 0
OP_ADDRESS = 0
OP_MAP_TCP = 2
RESPONSE_BIT = 128

_ADDRESS_RESPONSE = struct.Struct("!BBHI4s")  # version, op, result, epoch, address
_MAP_REQUEST = struct.Struct("!BBHHHI")  # version, op, reserved, internal, suggested, lifetime
_MAP_RESPONSE = struct.Struct("!BBHIHHI")  # version, op, result, epoch, internal, mapped, life

#: result codes (RFC 6886, section 3.5)
RESULTS = {
    0: "success",
    1: "unsupported version",
    2: "not authorized or refused",
    3: "network failure",
    4: "out of resources",
    5: "unsupported opcode",
}


class NatPmpError(ValueError, ProtocolViolation):
    """A datagram that is not an answer to our request."""


@dataclass(frozen=True, slots=True)
class AddressResponse:
    """``result`` 0: the gateway's external IPv4 address."""

    result: int
    epoch: int
    external_address: str


@dataclass(frozen=True, slots=True)
class MapResponse:
    """``result`` 0: ``external_port`` is mapped for ``lifetime`` seconds."""

    result: int
    epoch: int
    internal_port: int
    external_port: int
    lifetime: int


def address_request() -> bytes:
    """Ask for the gateway's external address."""
    return bytes((VERSION, OP_ADDRESS))


def map_request(internal_port: int, suggested_port: int, lifetime: int) -> bytes:
    """Map TCP ``internal_port`` (ours), suggesting external ``suggested_port`` (0: any).

    :raises ValueError: a port or lifetime out of range.
    """
    if not (0 < internal_port < 65536 and 0 <= suggested_port < 65536 and 0 <= lifetime < 2**32):
        raise ValueError("port or lifetime out of range")
    return _MAP_REQUEST.pack(VERSION, OP_MAP_TCP, 0, internal_port, suggested_port, lifetime)


def _header(data: bytes, op: int, size: int) -> None:
    if len(data) < size:
        raise NatPmpError(f"NAT-PMP answer of {len(data)} bytes")
    if data[0] != VERSION or data[1] != RESPONSE_BIT + op:
        raise NatPmpError(f"not a NAT-PMP answer to opcode {op}")


def parse_address_response(data: bytes) -> AddressResponse:
    """The answer to :func:`address_request`.

    :raises NatPmpError: not such an answer.
    """
    if len(data) >= 4 and data[:2] == bytes((VERSION, RESPONSE_BIT + OP_ADDRESS)):
        result = struct.unpack_from("!H", data, 2)[0]
        if result:  # an error answer may be short
            return AddressResponse(result, 0, "")
    _header(data, OP_ADDRESS, _ADDRESS_RESPONSE.size)
    _, _, result, epoch, address = _ADDRESS_RESPONSE.unpack_from(data)
    return AddressResponse(result, epoch, str(ipaddress.IPv4Address(address)))


def parse_map_response(data: bytes, internal_port: int) -> MapResponse:
    """The answer to :func:`map_request` for ``internal_port``.

    :raises NatPmpError: not such an answer, or one for another port.
    """
    if len(data) >= 4 and data[:2] == bytes((VERSION, RESPONSE_BIT + OP_MAP_TCP)):
        result = struct.unpack_from("!H", data, 2)[0]
        if result and len(data) < _MAP_RESPONSE.size:
            return MapResponse(result, 0, internal_port, 0, 0)
    _header(data, OP_MAP_TCP, _MAP_RESPONSE.size)
    _, _, result, epoch, port, external_port, lifetime = _MAP_RESPONSE.unpack_from(data)
    if port != internal_port:
        raise NatPmpError("NAT-PMP answer for another port")
    return MapResponse(result, epoch, port, external_port, lifetime)
