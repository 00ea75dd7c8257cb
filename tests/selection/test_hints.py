"""Hint parsing and encoding (txdilation.selection.hints), including malformed hints from the
peer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.hints import (
    DirectTCPV1Hint,
    HintError,
    RelayV1Hint,
    TorTCPV1Hint,
    describe_inbound,
    describe_outbound,
    encode_hint,
    parse_hint,
    parse_hint_argv,
    parse_hints,
)

# (names with an empty or over-long label cannot be resolved: parse_hint refuses them)
hostnames = st.text(
    st.characters(codec="ascii", exclude_characters=":[] "), min_size=1, max_size=40
).filter(lambda h: all(0 < len(label) < 64 for label in h.split(".")))
ports = st.integers(1, 65535)
priorities = st.floats(-10, 10, allow_nan=False)
tcp_hints = st.builds(DirectTCPV1Hint, hostnames, ports, priorities) | st.builds(
    TorTCPV1Hint, hostnames, ports, priorities
)
any_hint = tcp_hints | st.builds(
    RelayV1Hint, st.lists(tcp_hints, min_size=1, max_size=3).map(tuple)
)


class HintCodecTests(SynchronousTestCase):
    def test_stock_layout(self) -> None:
        """Encoded hints use exactly stock's dict layout and key names."""
        self.assertEqual(
            encode_hint(DirectTCPV1Hint("10.0.0.5", 41233, 0.0)),
            {"type": "direct-tcp-v1", "priority": 0.0, "hostname": "10.0.0.5", "port": 41233},
        )
        self.assertEqual(
            encode_hint(RelayV1Hint((DirectTCPV1Hint("relay.example", 4001, 0.0),))),
            {
                "type": "relay-v1",
                "hints": [
                    {
                        "type": "direct-tcp-v1",
                        "priority": 0.0,
                        "hostname": "relay.example",
                        "port": 4001,
                    }
                ],
            },
        )

    @given(any_hint)
    def test_round_trip(self, hint: object) -> None:
        """parse_hint(encode_hint(h)) == h for every hint kind."""
        self.assertEqual(parse_hint(encode_hint(hint)), hint)  # type: ignore[arg-type]

    def test_stock_encoder_agrees(self) -> None:
        """Stock's own hint parser reads what we encode (both hint kinds)."""
        from wormhole import _hints as stock

        ours = encode_hint(RelayV1Hint((DirectTCPV1Hint("127.0.0.1", 4001, 1.5),)))
        parsed = stock.parse_hint(ours)
        self.assertEqual(parsed.hints[0].hostname, "127.0.0.1")
        self.assertEqual(parsed.hints[0].port, 4001)

    def test_priority_defaults_to_zero(self) -> None:
        """A hint without 'priority' gets 0.0, as in stock."""
        h = parse_hint({"type": "direct-tcp-v1", "hostname": "h", "port": 1})
        self.assertEqual(h, DirectTCPV1Hint("h", 1, 0.0))

    def test_malformed_hints_are_dropped_with_reasons(self) -> None:
        """Bad hints (wrong types, unknown kinds, not objects) are dropped one by one with a
        reason; the good ones in the same list survive."""
        good = {"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": 5}
        items = [
            good,
            {"type": "direct-tcp-v1", "hostname": 7, "port": 5},
            {"type": "direct-tcp-v1", "hostname": "h", "port": "5"},
            {"type": "direct-tcp-v1", "hostname": "h", "port": True},
            {"type": "direct-tcp-v1", "hostname": "h", "port": 70000},
            {"type": "carrier-pigeon-v1"},
            {"type": "relay-v1"},
            {"type": "relay-v1", "hints": []},
            "not a dict",
            None,
        ]
        hints, problems = parse_hints(items)
        self.assertEqual(hints, [DirectTCPV1Hint("127.0.0.1", 5, 0.0)])
        self.assertEqual(len(problems), len(items) - 1)

    def test_hints_not_a_list(self) -> None:
        """A 'hints' value that is not a list yields no hints and one reason."""
        self.assertEqual(parse_hints({"a": 1})[0], [])
        self.assertEqual(len(parse_hints("x")[1]), 1)


class ArgvAndDescriptionTests(SynchronousTestCase):
    def test_parse_hint_argv(self) -> None:
        """Relay locations: tcp:HOST:PORT, with priority, and bracketed IPv6."""
        self.assertEqual(
            parse_hint_argv("tcp:relay.example:4001"), DirectTCPV1Hint("relay.example", 4001, 0.0)
        )
        self.assertEqual(parse_hint_argv("tcp:h:1:priority=2.5"), DirectTCPV1Hint("h", 1, 2.5))
        self.assertEqual(parse_hint_argv("tcp:[::1]:4001"), DirectTCPV1Hint("::1", 4001, 0.0))
        for bad in ("udp:h:1", "tcp:h", "tcp:h:0", "tcp:h:1:color=red", "tcp:h:x"):
            self.assertRaises(HintError, parse_hint_argv, bad)

    def test_descriptions_match_stock(self) -> None:
        """Connection descriptions use stock's formats for status hint_description."""
        h = DirectTCPV1Hint("127.0.0.1", 4001)
        self.assertEqual(describe_outbound(h, via_relay=False), "->tcp:127.0.0.1:4001")
        self.assertEqual(describe_outbound(h, via_relay=True), "->relay:tcp:127.0.0.1:4001")
        self.assertEqual(describe_outbound(h, via_relay=False, tor=True), "tor->tcp:127.0.0.1:4001")
        self.assertEqual(
            describe_outbound(TorTCPV1Hint("x.onion", 80), via_relay=False), "->tor:x.onion:80"
        )
        self.assertEqual(describe_inbound(IPv4Address("TCP", "10.0.0.1", 5)), "<-tcp:10.0.0.1:5")
        self.assertEqual(describe_inbound(IPv6Address("TCP", "::1", 5)), "<-tcp:[::1]:5")
        # an IPv4 client of the dual-stack listener
        mapped = IPv6Address("TCP", "::ffff:10.0.0.1", 5)
        self.assertEqual(describe_inbound(mapped), "<-tcp:10.0.0.1:5")
