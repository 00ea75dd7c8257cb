"""L3: transit relay locations and the policy for racing several relays (I/O-free).

A relay location is one string or a list; each string names one relay at one or more
comma-separated endpoints (``tcp:HOST:PORT``, stock's form, or ``ws[s]://HOST[:PORT][/PATH]``)
and becomes one ``relay-v1`` hint (:mod:`txdilation.selection.hints`). Once relays are due,
every endpoint of every relay (ours first, then the peer's) is dialed at once; the first to
finish its handshake carries the link and the others are closed, so a refusing or black-holed
relay (:data:`RELAY_CONNECT_TIMEOUT`) delays no other. Examples: docs/connectivity.md, "Relays".

Invariants: parsing a location never touches the network; the same endpoint is dialed at most
once per generation, however many hints name it; a relay's position in our list
(:func:`relay_index`) is what telemetry records, never its address.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from txdilation.selection.hints import (
    HintError,
    RelayEndpoint,
    RelayV1Hint,
    WebSocketHint,
    parse_hint_argv,
    parse_websocket_url,
    websocket_address,
)

__all__ = [
    "RELAY_CONNECT_TIMEOUT",
    "RelayLocation",
    "RelayUsed",
    "parse_relay_location",
    "relay_index",
    "relay_transport",
    "relays_to_dial",
]

#: Seconds a relay's TCP connect (and, for WebSocket, its opening handshake) may take.
RELAY_CONNECT_TIMEOUT: Final = 10.0

RelayLocation = str | Sequence[str] | None
"""What ``transit_relay_location`` accepts: None, one location string, or a list of them."""


@dataclass(frozen=True, slots=True)
class RelayUsed:
    """The relay endpoint that carries a selected link.

    :ivar location: ``HOST:PORT`` for TCP, the URL for WebSocket (for status, never telemetry).
    :ivar transport: ``tcp``, ``ws`` or ``wss``.
    :ivar index: its relay's position in our own relay list; None when only the peer named it.
    """

    location: str
    transport: str
    index: int | None


def _parse_endpoint(text: str) -> RelayEndpoint:
    if text.startswith(("ws://", "wss://")):
        return parse_websocket_url(text)
    if text.startswith("tcp:"):
        return parse_hint_argv(text)
    raise HintError(f"unknown relay location {text!r}: expected tcp:HOST:PORT or ws[s]://HOST/")


def _parse_one(text: str) -> RelayV1Hint:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise HintError(f"empty relay location {text!r}")
    endpoints = tuple(dict.fromkeys(_parse_endpoint(p) for p in parts))
    name = None
    if any(isinstance(e, WebSocketHint) for e in endpoints):
        first = endpoints[0]
        name = websocket_address(first)[0] if isinstance(first, WebSocketHint) else first.hostname
    return RelayV1Hint(endpoints, name)


def parse_relay_location(location: RelayLocation) -> tuple[RelayV1Hint, ...]:
    """One ``relay-v1`` hint per relay named (see the module docstring); None or ``""``: none.

    :raises HintError: for a location that is not of a form above.
    :raises TypeError: for something that is neither a string nor a list of strings.
    """
    if location is None or location == "":
        return ()
    items: Iterable[object] = [location] if isinstance(location, str) else location
    if isinstance(location, bytes | bytearray) or not isinstance(items, Sequence):
        raise TypeError(f"transit_relay_location: a string or a list of strings, not {location!r}")
    hints: list[RelayV1Hint] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"transit_relay_location: not a string: {item!r}")
        if item.strip():
            hint = _parse_one(item.strip())
            if hint not in hints:
                hints.append(hint)
    return tuple(hints)


def relays_to_dial(
    hints: Iterable[RelayV1Hint], already: Iterable[RelayEndpoint] = ()
) -> list[RelayEndpoint]:
    """The endpoints of ``hints`` to dial, in order, each once, leaving out ``already``."""
    seen = set(already)
    out: list[RelayEndpoint] = []
    for hint in hints:
        for endpoint in hint.hints:
            if endpoint not in seen:
                seen.add(endpoint)
                out.append(endpoint)
    return out


def relay_index(ours: Sequence[RelayV1Hint], endpoint: RelayEndpoint) -> int | None:
    """The position in our own relay list of the relay ``endpoint`` belongs to (None: a relay
    only the peer named)."""
    for i, hint in enumerate(ours):
        if endpoint in hint.hints:
            return i
    return None


def relay_transport(endpoint: RelayEndpoint) -> str:
    """``tcp``, ``ws`` or ``wss``: how we reach that relay endpoint."""
    if isinstance(endpoint, WebSocketHint):
        return "wss" if endpoint.secure else "ws"
    return "tcp"
