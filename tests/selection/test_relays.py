"""Relay locations, relay hints with WebSocket sub-hints (stock- and magic-wormhole.rs-compatible)
and the racing policy (txdilation.selection.relays, .hints, and the Connector's use of them)."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.trial.unittest import SynchronousTestCase
from wormhole import _hints as stock_hints

from tests.selection.test_connector import make
from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.selection.hints import (
    DirectTCPV1Hint,
    HintError,
    RelayV1Hint,
    WebSocketHint,
    describe_outbound,
    encode_hint,
    parse_hint,
    parse_hints,
    parse_websocket_url,
    websocket_address,
)
from txdilation.selection.relays import (
    RELAY_CONNECT_TIMEOUT,
    RelayUsed,
    parse_relay_location,
    relay_index,
    relay_transport,
    relays_to_dial,
)
from txdilation.wire.roles import FOLLOWER

#: A relay hint as magic-wormhole.rs serializes it (src/transit.rs: RelayHint's Serialize).
RS_RELAY_HINT = {
    "type": "relay-v1",
    "name": "relay.example",
    "hints": [
        {"type": "direct-tcp-v1", "hostname": "relay.example", "port": 4001},
        {"type": "websocket", "url": "wss://relay.example:443/"},
    ],
}


def built(factory: Any, host: str) -> DilatedConnectionProtocol:
    """The L2 protocol a dial's (endpoint-wrapped) factory builds for a connection to host."""
    proto = factory.buildProtocol(IPv4Address("TCP", host, 4001))
    proto = getattr(proto, "_wrappedProtocol", proto)
    assert isinstance(proto, DilatedConnectionProtocol)
    return proto


class LocationTests(SynchronousTestCase):
    """parse_relay_location: a string or a list, one relay-v1 hint per relay."""

    def test_none_and_empty(self) -> None:
        """No relay location (None, empty string, empty list) gives no relay hints."""
        self.assertEqual(parse_relay_location(None), ())
        self.assertEqual(parse_relay_location(""), ())
        self.assertEqual(parse_relay_location([]), ())

    def test_plain_string_is_stocks_hint(self) -> None:
        """One ``tcp:`` string: the hint stock makes of it, encoded as stock encodes it."""
        (hint,) = parse_relay_location("tcp:relay.example:4001")
        self.assertEqual(hint, RelayV1Hint((DirectTCPV1Hint("relay.example", 4001, 0.0),)))
        stock = stock_hints.RelayV1Hint(
            hints=(stock_hints.parse_hint_argv("tcp:relay.example:4001"),)
        )
        self.assertEqual(encode_hint(hint), stock_hints.encode_hint(stock))

    def test_list_keeps_order_and_drops_duplicates(self) -> None:
        """A list of locations keeps its order and drops duplicates and blank entries."""
        hints = parse_relay_location(
            ["tcp:10.0.0.1:4001", "ws://10.0.0.2:4002/", "tcp:10.0.0.1:4001", " "]
        )
        self.assertEqual(
            hints,
            (
                RelayV1Hint((DirectTCPV1Hint("10.0.0.1", 4001),)),
                RelayV1Hint((WebSocketHint("ws://10.0.0.2:4002/"),), "10.0.0.2"),
            ),
        )

    def test_one_relay_with_several_endpoints(self) -> None:
        """Comma-separated endpoints are one relay; with a WebSocket one it gets a name."""
        (hint,) = parse_relay_location("tcp:relay.example:4001, wss://relay.example/")
        self.assertEqual(hint.name, "relay.example")
        self.assertEqual(
            hint.hints,
            (DirectTCPV1Hint("relay.example", 4001), WebSocketHint("wss://relay.example/")),
        )

    def test_bad_locations(self) -> None:
        """Each malformed relay location is refused with a ValueError."""
        for bad in (
            "udp:h:1",
            "http://h/",
            "ws://",
            "ws://h:99999/",
            "ws://user@h/",
            "ws://h/#frag",
            "ws://[zz::1]/",
            "tcp:h",
            ",",
        ):
            self.assertRaises(HintError, parse_relay_location, bad)
        for wrong in (b"tcp:h:1", ["tcp:h:1", 3], 4001):
            self.assertRaises(TypeError, parse_relay_location, wrong)

    def test_websocket_address(self) -> None:
        """A WebSocket URL gives its host, default or explicit port, and path."""
        cases = {
            "ws://h/": ("h", 80, "/"),
            "wss://h": ("h", 443, "/"),
            "ws://[2001:db8::1]:4002/relay?x=1": ("2001:db8::1", 4002, "/relay?x=1"),
        }
        for url, want in cases.items():
            self.assertEqual(websocket_address(parse_websocket_url(url)), want)


class WireTests(SynchronousTestCase):
    """The relay-v1 hint with WebSocket sub-hints: ours, magic-wormhole.rs's, stock's view."""

    def test_encoding_is_rs_form(self) -> None:
        """A relay hint is encoded in the relay-v1 form and parses back to the same hint."""
        (hint,) = parse_relay_location("tcp:relay.example:4001,wss://relay.example:443/")
        encoded = encode_hint(hint)
        self.assertEqual(encoded["type"], "relay-v1")
        self.assertEqual(encoded["name"], "relay.example")
        self.assertEqual(
            encoded["hints"][1], {"type": "websocket", "url": "wss://relay.example:443/"}
        )
        self.assertEqual(parse_hint(json.loads(json.dumps(encoded))), hint)

    def test_rs_hint_parses(self) -> None:
        """magic-wormhole.rs's relay hint (no priority, name, websocket) is understood."""
        self.assertEqual(
            parse_hint(RS_RELAY_HINT),
            RelayV1Hint(
                (DirectTCPV1Hint("relay.example", 4001), WebSocketHint("wss://relay.example:443/")),
                "relay.example",
            ),
        )
        unnamed = {**RS_RELAY_HINT, "name": None}
        self.assertIsNone(parse_hint(unnamed).name)  # type: ignore[union-attr]

    def test_stock_drops_websocket_sub_hints(self) -> None:
        """Stock's parser (what a stock peer runs on our hints) keeps the TCP endpoint and
        drops the WebSocket one; a WebSocket-only relay becomes an empty relay hint (which
        stock's connector dials nothing for), never an exception."""
        hints = [
            encode_hint(h) for h in parse_relay_location(["tcp:r:4001,ws://r:4002/", "ws://s/"])
        ]
        mixed, ws_only = (stock_hints.parse_hint(json.loads(json.dumps(h))) for h in hints)
        self.assertEqual(list(mixed.hints), [stock_hints.DirectTCPV1Hint("r", 4001, 0.0)])
        self.assertEqual(list(ws_only.hints), [])

    def test_bad_sub_hints_cost_only_themselves(self) -> None:
        """Bad sub-hints of a relay-v1 hint are dropped alone; the good ones are kept."""
        hint = {
            "type": "relay-v1",
            "hints": [
                {"type": "websocket", "url": "http://x/"},
                {"type": "websocket"},
                {"type": "websocket", "url": "ws://ok:1/"},
                {"type": "future-v9", "url": "ws://x/"},
            ],
        }
        self.assertEqual(parse_hint(hint), RelayV1Hint((WebSocketHint("ws://ok:1/"),)))
        only_bad = {"type": "relay-v1", "hints": [{"type": "websocket", "url": 3}]}
        hints, problems = parse_hints([only_bad])
        self.assertEqual((hints, len(problems)), ([], 1))

    def test_describe(self) -> None:
        """Relay hints are described and named by transport (tcp, ws, wss) as the logs show them."""
        ws = WebSocketHint("ws://r:4002/")
        self.assertEqual(describe_outbound(ws, via_relay=True), "->relay:ws://r:4002/")
        self.assertEqual(relay_transport(ws), "ws")
        self.assertEqual(relay_transport(WebSocketHint("wss://r/")), "wss")
        self.assertEqual(relay_transport(DirectTCPV1Hint("r", 1)), "tcp")


class PolicyTests(SynchronousTestCase):
    """Every relay endpoint, ours and the peer's, is dialed at once and once; the one that
    carries the link is reported."""

    def test_relays_to_dial(self) -> None:
        """Both sides' relay endpoints, once each in first-seen order, less those dialed."""
        ours = parse_relay_location(["tcp:a:1", "tcp:b:1,ws://b:2/"])
        theirs = parse_relay_location(["ws://b:2/", "tcp:c:1"])
        self.assertEqual(
            relays_to_dial([*ours, *theirs]),
            [
                DirectTCPV1Hint("a", 1),
                DirectTCPV1Hint("b", 1),
                WebSocketHint("ws://b:2/"),
                DirectTCPV1Hint("c", 1),
            ],
        )
        self.assertEqual(
            relays_to_dial(theirs, [WebSocketHint("ws://b:2/")]), [DirectTCPV1Hint("c", 1)]
        )
        self.assertEqual(relay_index(ours, WebSocketHint("ws://b:2/")), 1)
        self.assertIsNone(relay_index(ours, DirectTCPV1Hint("c", 1)))

    def dial_all(self) -> tuple[Any, Any, Any]:
        ours = parse_relay_location(["tcp:10.0.0.1:4001", "tcp:10.0.0.2:4001,ws://10.0.0.2:4002/"])
        c, owner, reactor = make(FOLLOWER, no_listen=True, relay_hints=ours)
        c.start()
        c.got_hints(list(parse_relay_location(["tcp:10.0.0.2:4001", "tcp:10.0.0.3:4001"])))
        return c, owner, reactor

    def test_all_dialed_at_once_each_once_with_the_relay_timeout(self) -> None:
        """Every relay endpoint is dialed at once, once, with the relay connect timeout."""
        _c, owner, reactor = self.dial_all()
        dialed = [(h, p, t) for h, p, _f, t, _b in reactor.tcpClients]
        self.assertEqual(
            dialed,
            [
                ("10.0.0.1", 4001, RELAY_CONNECT_TIMEOUT),
                ("10.0.0.2", 4001, RELAY_CONNECT_TIMEOUT),
                ("10.0.0.2", 4002, RELAY_CONNECT_TIMEOUT),  # the WebSocket endpoint's TCP
                ("10.0.0.3", 4001, RELAY_CONNECT_TIMEOUT),
            ],
        )
        self.assertIn(
            ("ws://10.0.0.2:4002/", False), {(s.url, s.is_direct) for s in owner.statuses}
        )
        (published,) = owner.hint_messages
        self.assertEqual([h.get("name") for h in published], [None, "10.0.0.2"])

    def test_refused_relay_does_not_hold_back_another(self) -> None:
        """The first relay refuses at once; the second's connection is selected, reported
        as our relay 1 over TCP; the peer-only relay would report no index."""
        from twisted.internet.error import ConnectionRefusedError
        from twisted.python.failure import Failure

        c, owner, reactor = self.dial_all()
        reactor.tcpClients[0][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        factory = reactor.tcpClients[1][2]
        proto = built(factory, "10.0.0.2")
        c.candidate_ready(proto)
        self.assertEqual(owner.relays, [RelayUsed("10.0.0.2:4001", "tcp", 1)])

    def test_peer_only_relay_has_no_index(self) -> None:
        """A relay only the peer named is reported without an index into our relay list."""
        c, owner, reactor = self.dial_all()
        factory = reactor.tcpClients[3][2]
        c.candidate_ready(built(factory, "10.0.0.3"))
        self.assertEqual(owner.relays, [RelayUsed("10.0.0.3:4001", "tcp", None)])
