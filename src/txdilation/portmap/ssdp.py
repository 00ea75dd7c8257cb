"""Port mapping: finding a UPnP Internet Gateway Device with SSDP (I/O-free).

:func:`search_request` is the M-SEARCH datagram (sent to the SSDP multicast group and to the
gateway itself); :func:`parse_search_response` reads an answer's ``LOCATION`` (the device
description's URL), accepted only on the host that answered: a device elsewhere on the LAN
cannot point us at a third host.

Invariants: only ``HTTP/1.1 200`` answers with an ``http://`` location on the answering
host are accepted; anything else raises :class:`SsdpError` (ignored by the client).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from txdilation.errors import ProtocolViolation

__all__ = [
    "SEARCH_TARGET",
    "SSDP_GROUP",
    "SSDP_PORT",
    "SsdpError",
    "parse_search_response",
    "search_request",
]

SSDP_GROUP = "239.255.255.250"
SSDP_PORT = 1900
#: IGD v2 devices answer for v1 too (UPnP Device Architecture 1.1, 1.3.2)
SEARCH_TARGET = "urn:schemas-upnp-org:device:InternetGatewayDevice:1"
MAX_ANSWER = 4096


class SsdpError(ValueError, ProtocolViolation):
    """A datagram that is not a usable answer to our search."""


def search_request(wait: int = 1) -> bytes:
    """The M-SEARCH for an Internet Gateway Device, answered within ``wait`` seconds."""
    return (
        "M-SEARCH * HTTP/1.1\r\n"
        f"HOST: {SSDP_GROUP}:{SSDP_PORT}\r\n"
        'MAN: "ssdp:discover"\r\n'
        f"MX: {wait}\r\n"
        f"ST: {SEARCH_TARGET}\r\n"
        "\r\n"
    ).encode("ascii")


def parse_search_response(data: bytes, sender: str) -> str:
    """The description URL in an answer from ``sender`` (its IP address).

    :raises SsdpError: not a 200 answer, no location, or a location on another host.
    """
    if len(data) > MAX_ANSWER:
        raise SsdpError("SSDP answer too long")
    lines = data.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.1 200"):
        raise SsdpError("not an SSDP answer")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    location = headers.get("location", "")
    parts = urlsplit(location)
    try:
        host = parts.hostname
    except ValueError:
        host = None
    if parts.scheme != "http" or host != sender:
        raise SsdpError(f"SSDP location {location[:80]!r} not on {sender}")
    return location
