"""Malformed DILATE-n messages: bad JSON, unknown types, missing keys, hints with wrong types.

Pinned: whatever the peer sends through the mailbox, in whatever state, nothing raises out of
``Dilator.received_dilate`` (into magic-wormhole's Boss), the message is logged with a reason
and ignored, and a dilation in progress goes on. Includes a regression test for hint hostnames
that could not be turned into an endpoint (``str.encode("idna")`` raised UnicodeError).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import ensureDeferred
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.mailbox.test_manager import Collector, clock_manager
from tests.support.hostile import (
    LOWEST_SIDE,
    LogCapture,
    RogueMailbox,
    rogue_follower_selected,
    use_environment,
)
from tests.support.waits import wait_until
from txdilation.mailbox.manager import Manager
from txdilation.selection.dial_endpoint import tcp_client_endpoint as _tcp_client_endpoint
from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint, TorTCPV1Hint, parse_hints
from txdilation.settings import NetworkSettings
from txdilation.wire.records import Data, Open

LOOPBACK = NetworkSettings("127.0.0.1", ("127.0.0.1",))

#: Hostnames a hint may carry that no endpoint can be built for.
UNUSABLE_HOSTNAMES = ["a" * 64, "a..b", ".", "\udcff", "x" * 300, "b" * 64 + ".example"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

#: Hostnames that never reach a resolver: IP literals, and names no endpoint accepts.
hostnames = st.sampled_from(["127.0.0.1", "::1", "0.0.0.0", "", *UNUSABLE_HOSTNAMES]) | json_values


def hint_dicts(depth: int = 1) -> st.SearchStrategy[Any]:
    tcp = st.fixed_dictionaries(
        {"type": st.sampled_from(["direct-tcp-v1", "tor-tcp-v1", "bogus"]) | json_values},
        optional={
            "hostname": hostnames,
            "port": st.integers(-5, 70000) | json_values,
            "priority": st.floats(allow_nan=True) | json_values,
        },
    )
    if depth == 0:
        return tcp | json_values
    relay = st.fixed_dictionaries(
        {"type": st.just("relay-v1")},
        optional={"hints": st.lists(hint_dicts(depth - 1), max_size=3) | json_values},
    )
    return tcp | relay | json_values


def message_bodies() -> st.SearchStrategy[bytes]:
    structured = st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["please", "connection-hints", "reconnect", "reconnecting", "dance", "PLEASE"]
            )
            | json_values
        },
        optional={
            "side": st.sampled_from([LOWEST_SIDE, "f" * 16, ""]) | json_values,
            "use-version": st.sampled_from(["ged", "other"]) | json_values,
            "hints": st.lists(hint_dicts(), max_size=4) | json_values,
        },
    )
    as_json = (structured | json_values).map(
        lambda v: json.dumps(v, allow_nan=True).encode("utf-8")
    )
    return as_json | st.binary(max_size=40) | st.sampled_from([b"", b"{", b"\xff\xfe{}", b"[]"])


def manager(side: str = "8" * 16) -> tuple[Manager, list[dict[str, Any]], MemoryReactorClock]:
    sent: list[dict[str, Any]] = []

    class Sender:
        def send(self, phase: str, plaintext: bytes) -> None:
            sent.append(json.loads(plaintext))

    m, clock = clock_manager(Sender(), side)
    return m, sent, clock


class HintHostnameTests(SynchronousTestCase):
    """Regression: hint hostnames that cannot become an endpoint are dropped while parsing."""

    def test_unusable_hostnames_are_dropped_with_a_reason(self) -> None:
        """A label over 63 characters, an empty label, a lone surrogate or a name over 253
        bytes is refused by parse_hints (with a reason), directly or inside a relay hint."""
        for hostname in UNUSABLE_HOSTNAMES:
            for kind in ("direct-tcp-v1", "tor-tcp-v1"):
                hint = {"type": kind, "hostname": hostname, "port": 4001}
                relay = {"type": "relay-v1", "hints": [hint]}
                hints, problems = parse_hints([hint, relay])
                self.assertEqual(hints, [], hostname)
                self.assertEqual(len(problems), 2)
                self.assertIn("hostname", problems[0])

    @settings(max_examples=100, deadline=None)
    @given(st.lists(hint_dicts(), max_size=5))
    def test_every_accepted_hint_makes_an_endpoint(self, items: list[Any]) -> None:
        """For any list of hint dicts, every hint parse_hints accepts can be turned into a
        client endpoint without raising; the rest come back as reasons."""
        hints, problems = parse_hints(items)
        self.assertLessEqual(len(hints) + len(problems), max(len(items), 1))
        reactor = MemoryReactorClock()
        for hint in hints:
            inner = hint.hints if isinstance(hint, RelayV1Hint) else (hint,)
            for h in inner:
                self.assertIsInstance(h, DirectTCPV1Hint | TorTCPV1Hint)
                _tcp_client_endpoint(reactor, h, 5.0)

    def test_manager_survives_unusable_hostnames(self) -> None:
        """A connecting Manager given such hints logs them and goes on (before the fix the
        UnicodeError escaped into the caller: magic-wormhole's Boss)."""
        m, _sent, clock = manager()
        log = LogCapture(self)
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        m.received_dilation_message(json.dumps({"type": "please", "side": LOWEST_SIDE}).encode())
        for hostname in UNUSABLE_HOSTNAMES:
            body = {
                "type": "connection-hints",
                "hints": [{"type": "direct-tcp-v1", "hostname": hostname, "port": 1}],
            }
            m.received_dilation_message(json.dumps(body).encode())
        self.assertEqual(sum("bad hostname" in t for t in log.texts()), len(UNUSABLE_HOSTNAMES))
        self.assertEqual(clock.tcpClients, [])
        m.stop()


class MalformedMessageFuzzTests(SynchronousTestCase):
    """Hypothesis: arbitrary DILATE-n bodies in every phase of a Manager's life."""

    @settings(max_examples=100, deadline=None)
    @given(
        side=st.sampled_from(["0" * 15 + "1", "f" * 16]),
        bodies=st.lists(message_bodies(), max_size=12),
        start_at=st.integers(0, 3),
    )
    def test_nothing_escapes_and_each_bad_message_is_logged(
        self, side: str, bodies: list[bytes], start_at: int
    ) -> None:
        """Any sequence of bodies (bad JSON, non-objects, unknown types, missing or mistyped
        keys, hints of every wrong shape), arriving before, during or after the key and the
        versions: nothing raises, phases stay gapless, and a body that is not even a JSON
        object is logged."""
        m, sent, _clock = manager(side)
        log = LogCapture(self)
        for index, body in enumerate(bodies):
            if index == start_at:
                m.got_dilation_key(b"k" * 32)
                m.got_wormhole_versions({"can-dilate": ["ged"]})
            before = len(log.events)
            m.received_dilation_message(body)
            try:
                is_object = isinstance(json.loads(body), dict)
            except ValueError:
                is_object = False
            if not is_object:
                self.assertGreater(len(log.events), before, body)
        self.assertLessEqual([b.get("type") for b in sent].count("please"), 1)
        m.stop()
        self.assertIsNone(self.successResultOf(m.when_stopped()))


class MalformedMessagesDuringDilationTests(TestCase):
    """A real Leader, its peer played by the test, malformed messages in the middle."""

    timeout = 30

    def setUp(self) -> None:
        use_environment(self)

    def test_session_carries_on(self) -> Any:
        """Malformed bodies before and after selection are logged and ignored: the rogue
        Follower's connection stays selected and a subchannel opened afterwards works."""
        return ensureDeferred(self._session_carries_on())

    async def _session_carries_on(self) -> None:
        mailbox = RogueMailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        log = LogCapture(self)
        api = mailbox.start(LOWEST_SIDE)
        garbage = [
            b"not json",
            b"[1, 2]",
            b'{"type": 7}',
            b'{"type": "please"}',
            b'{"type": "connection-hints"}',
            b'{"type": "connection-hints", "hints": [{"type": "direct-tcp-v1", "port": "x"}]}',
            b'{"type": "reconnecting"}',
            b'{"type": "dance"}',
        ]
        for body in garbage:
            mailbox.dilator.received_dilate(body)
        raw = await rogue_follower_selected(mailbox)
        await api.when_dilated()
        for body in garbage:
            mailbox.dilator.received_dilate(body)
        received: list[bytes] = []

        class Keep(Factory):
            def buildProtocol(self, addr: Any) -> Any:
                p = Collector()
                p.dataReceived = received.append  # type: ignore[method-assign]
                return p

        await api.listener_for("x").listen(Keep())
        raw.send_record(Open(0, 2, "x"))
        raw.send_record(Data(1, 2, b"after the garbage"))
        await wait_until(lambda: received, 5, "data delivered")
        self.assertEqual(received, [b"after the garbage"])
        self.assertEqual(mailbox.count("reconnect"), 0)
        self.assertGreaterEqual(len(log.events), 2 * len(garbage) - 2)
        raw.abort()
        await raw.closed
