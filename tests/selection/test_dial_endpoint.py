"""Tests for txdilation.selection.dial_endpoint: the route one try of a dial takes to its hint
(nothing is connected: the routes' endpoints are only built, on a MemoryReactorClock), and the
telemetry hint type of a try."""

from __future__ import annotations

from typing import Any

from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.selection.dial_endpoint import TryRoute, hint_type, route_for
from txdilation.selection.hints import DirectTCPV1Hint, TorTCPV1Hint, WebSocketHint
from txdilation.selection.punch import PUNCH_PRIORITY

PUNCHED = DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)
DIRECT = DirectTCPV1Hint("198.51.100.8", 6001)


class Tor:
    """What a dial asks of a Tor client: a stream to a host and port."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def stream_via(self, host: str, port: int) -> object:
        self.asked.append((host, port))
        return object()


def route(hint: Any, listen_port: int | None = None, tor: Any = None) -> TryRoute:
    return route_for(
        MemoryReactorClock(),
        hint,
        via_relay=False,
        listen_port=listen_port,
        listen_interface=None,
        tor=tor,
        timeout=5.0,
    )


class RouteTests(SynchronousTestCase):
    def test_without_a_listening_port_a_plain_endpoint(self) -> None:
        """No listening port: an IP literal of either family gets its TCP endpoint, a host
        name a HostnameEndpoint; nothing is punched or bound."""
        self.assertIsInstance(route(DIRECT).endpoint, TCP4ClientEndpoint)
        self.assertIsInstance(route(DirectTCPV1Hint("2001:db8::1", 1)).endpoint, TCP6ClientEndpoint)
        named = route(DirectTCPV1Hint("peer.example", 1))
        self.assertIsInstance(named.endpoint, HostnameEndpoint)
        self.assertEqual((named.local, named.punched), (None, False))

    def test_from_the_listening_port(self) -> None:
        """With a listening port, a direct IP literal is dialled from it; a punched hint has
        no endpoint (its plan connects it) and is marked punched."""
        bound = route(DIRECT, listen_port=4000)
        self.assertIsInstance(bound.endpoint, TCP4ClientEndpoint)
        self.assertEqual((bound.local, bound.punched), (("0.0.0.0", 4000), False))
        punched = route(PUNCHED, listen_port=4000)
        self.assertEqual(
            (punched.endpoint, punched.punchable, punched.punched), (None, PUNCHED, True)
        )

    def test_tor_is_never_punched(self) -> None:
        """Through Tor even a punched hint is a Tor stream, not punched."""
        tor = Tor()
        via_tor = route(PUNCHED, listen_port=4000, tor=tor)
        self.assertIsNotNone(via_tor.endpoint)
        self.assertFalse(via_tor.punched)
        self.assertEqual(tor.asked, [("198.51.100.7", 6000)])

    def test_a_websocket_relay(self) -> None:
        """A WebSocket hint gets a WebSocket endpoint, never bound to the listening port."""
        ws = route(WebSocketHint("wss://relay.example:443/"), listen_port=4000)
        self.assertIsInstance(ws.endpoint, WebSocketClientEndpoint)
        self.assertEqual((ws.local, ws.punched), (None, False))


class HintTypeTests(SynchronousTestCase):
    def test_hint_types(self) -> None:
        """A try's telemetry hint type: relay, Tor or direct (never an address)."""
        self.assertEqual(hint_type(DIRECT, via_relay=True), "relay-v1")
        self.assertEqual(hint_type(TorTCPV1Hint("x.onion", 1), via_relay=False), "tor-tcp-v1")
        self.assertEqual(hint_type(DIRECT, via_relay=False), "direct-tcp-v1")
