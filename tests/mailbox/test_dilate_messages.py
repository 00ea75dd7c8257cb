"""DILATE-n message codec (txdilation.mailbox.dilate_messages): parsing, building, hostile
bodies."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.mailbox.dilate_messages import (
    EXTENSIONS,
    SIDE_PREFIX,
    Closing,
    ConnectionHints,
    LinkLost,
    MalformedDilationMessage,
    Please,
    Reconnect,
    Reconnecting,
    build_please,
    hint_type_counts,
    make_side,
    parse_dilation_message,
)
from txdilation.mailbox.manager import Manager

from .test_manager import MailboxPipe, clock_manager


def body(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode("utf-8")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


class ParseTests(SynchronousTestCase):
    def test_stock_please(self) -> None:
        """Stock's please (side + use-version, no extensions) parses with no extensions."""
        message = parse_dilation_message(
            body({"type": "please", "side": "8888888888888888", "use-version": "ged"})
        )
        self.assertEqual(message, Please("8888888888888888", "ged", frozenset()))

    def test_our_please_round_trips(self) -> None:
        """What build_please sends parses back to the same side, version and extensions."""
        side = make_side()
        message = parse_dilation_message(body(build_please(side, "ged")))
        self.assertEqual(message, Please(side, "ged", frozenset(EXTENSIONS)))

    @given(version=json_values.filter(lambda v: not isinstance(v, str)))
    def test_non_string_use_version_is_ignored(self, version: Any) -> None:
        """A use-version that is not a string counts as absent (stock ignores the field)."""
        message = parse_dilation_message(
            body({"type": "please", "side": "s", "use-version": version})
        )
        self.assertEqual(message, Please("s", None, frozenset()))

    def test_please_needs_a_side(self) -> None:
        """A please without a non-empty string side is malformed."""
        for side in (None, "", 7, ["a"]):
            with self.assertRaises(MalformedDilationMessage):
                parse_dilation_message(body({"type": "please", "side": side}))

    def test_extensions_keep_only_strings(self) -> None:
        """Non-string extension names are dropped; a non-list extensions field means none."""
        message = parse_dilation_message(
            body({"type": "please", "side": "s", "extensions": ["closing-v1", 3, None]})
        )
        self.assertEqual(message, Please("s", None, frozenset({"closing-v1"})))
        message = parse_dilation_message(
            body({"type": "please", "side": "s", "extensions": "closing-v1"})
        )
        self.assertEqual(message, Please("s", None, frozenset()))

    def test_hints_keep_good_ones_and_count_all(self) -> None:
        """connection-hints: usable hints kept, bad ones reported, every hint counted by type."""
        message = parse_dilation_message(
            body(
                {
                    "type": "connection-hints",
                    "hints": [
                        {"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": 1},
                        {"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": "x"},
                        "junk",
                    ],
                }
            )
        )
        assert isinstance(message, ConnectionHints)
        self.assertEqual(len(message.hints), 1)
        self.assertEqual(len(message.problems), 2)
        self.assertEqual(message.type_counts, {"direct-tcp-v1": 2, "other": 1})

    def test_simple_types(self) -> None:
        """reconnect, reconnecting, closing and link-lost parse to their classes."""
        self.assertEqual(parse_dilation_message(body({"type": "reconnect"})), Reconnect())
        self.assertEqual(parse_dilation_message(body({"type": "reconnecting"})), Reconnecting())
        self.assertEqual(parse_dilation_message(body({"type": "closing"})), Closing())
        self.assertEqual(
            parse_dilation_message(body({"type": "link-lost", "generation": 3})), LinkLost(3)
        )

    def test_link_lost_generation_must_be_a_count(self) -> None:
        """link-lost with a missing, boolean, negative or non-integer generation is malformed."""
        for generation in (None, True, -1, 1.5, "1"):
            with self.assertRaises(MalformedDilationMessage):
                parse_dilation_message(body({"type": "link-lost", "generation": generation}))

    def test_unknown_and_undecodable(self) -> None:
        """Unknown types, non-objects, bad JSON and bad UTF-8 are malformed, with a reason."""
        for raw in (body({"type": "dance"}), body({"no": 1}), b"[1]", b"nope", b"\xff\xfe"):
            with self.assertRaises(MalformedDilationMessage) as caught:
                parse_dilation_message(raw)
            self.assertTrue(str(caught.exception))

    def test_reason_is_bounded(self) -> None:
        """A huge unknown type does not end up whole in the reason (log flooding)."""
        with self.assertRaises(MalformedDilationMessage) as caught:
            parse_dilation_message(body({"type": "x" * 100_000}))
        self.assertLess(len(str(caught.exception)), 200)

    @settings(max_examples=300)
    @given(
        raw=st.binary(max_size=64)
        | json_values.map(
            lambda v: body({"type": "please", **v}) if isinstance(v, dict) else body(v)
        )
    )
    def test_anything_parses_or_is_malformed(self, raw: bytes) -> None:
        """Arbitrary bodies give a message or MalformedDilationMessage, nothing else."""
        try:
            message = parse_dilation_message(raw)
        except MalformedDilationMessage:
            return
        self.assertIsInstance(
            message, (Please, ConnectionHints, Reconnect, Reconnecting, Closing, LinkLost)
        )

    def test_hint_type_counts_of_non_lists(self) -> None:
        """Counting hints of something that is not a list gives no counts."""
        self.assertEqual(hint_type_counts({"type": "direct-tcp-v1"}), {})
        self.assertEqual(hint_type_counts(None), {})


hex16 = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


class SideTests(SynchronousTestCase):
    """The dilation side decides the roles (the higher side leads, in stock and in
    txdilation alike): we lead a stock peer, and between two txdilation peers it stays a coin."""

    def test_a_side_is_sixteen_hex_digits(self) -> None:
        """Every side is 16 lowercase hex digits (stock's relay handshake asserts the length),
        SIDE_PREFIX and then random ones."""
        sides = {make_side() for _ in range(100)}
        self.assertEqual(len(sides), 100)
        for side in sides:
            self.assertRegex(side, r"\A[0-9a-f]{16}\Z")
            self.assertTrue(side.startswith(SIDE_PREFIX))

    @given(stock=hex16)
    def test_we_lead_a_stock_side_below_the_prefix(self, stock: str) -> None:
        """Against any stock side (stock's make_side: 8 random bytes as hex) that does not
        start with SIDE_PREFIX, 65,535 in 65,536 of them, our side is the higher: we lead."""
        if not stock.startswith(SIDE_PREFIX):
            self.assertGreater(make_side(), stock)

    def test_between_us_the_random_digits_decide(self) -> None:
        """Two of our sides share the prefix, so the comparison is that of their random
        digits: 48 random bits each, drawn afresh (the roles stay a fair coin)."""
        tails = [make_side()[len(SIDE_PREFIX) :] for _ in range(200)]
        self.assertEqual(len(set(tails)), 200)
        self.assertEqual({len(t) for t in tails}, {16 - len(SIDE_PREFIX)})
        self.assertEqual(len(SIDE_PREFIX), 4)


class ManagerPleaseTests(SynchronousTestCase):
    def _wanting(self, side: str) -> tuple[Manager, Any]:
        pipe = MailboxPipe()
        m, _clock = clock_manager(pipe, side)
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        return m, pipe

    def test_non_string_use_version_still_dilates(self) -> None:
        """A please whose use-version is not a string is answered like stock: the Manager
        chooses a role and sends hints instead of failing dilation."""
        m, pipe = self._wanting("ffffffffffffffff")
        m.received_dilation_message(
            body({"type": "please", "side": "0000000000000000", "use-version": {"v": 1}})
        )
        kinds = [b["type"] for _, b in pipe.sent]
        self.assertEqual(kinds[0], "please")
        self.assertIn("connection-hints", kinds)
        m.stop()

    def test_unknown_string_version_fails(self) -> None:
        """A please naming a version string we do not speak fails dilation (no hints sent)."""
        m, pipe = self._wanting("ffffffffffffffff")
        m.received_dilation_message(
            body({"type": "please", "side": "0000000000000000", "use-version": "zzz"})
        )
        self.assertNotIn("connection-hints", [b["type"] for _, b in pipe.sent])
        m.stop()
