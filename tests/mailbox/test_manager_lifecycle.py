"""Tests for txdilation.mailbox.manager_lifecycle: the Manager's machine through its facade on
a MemoryReactorClock, for what the machine orders (a new generation starts after what the
transition into it sent) and the Leader's stall rule."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.task import Cooperator
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.mailbox.test_manager import LOOPBACK, MailboxPipe
from txdilation.mailbox.manager import Manager
from txdilation.mailbox.manager_core import GENERATION_RETRY
from txdilation.settings import Settings
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss

RELAY = "tcp:127.0.0.1:4001"


def started(
    side: str, peer: str, extensions: tuple[str, ...] = ()
) -> tuple[Manager, MailboxPipe, MemoryReactorClock]:
    """A Manager with a relay (so each generation sends its hints at once), its key, the
    versions and the peer's please (stock's, or a txdilation peer's with ``extensions``): in
    its first generation."""
    pipe = MailboxPipe()
    clock = MemoryReactorClock()
    m = Manager(
        pipe,
        side,
        RELAY,
        clock,
        None,
        Cooperator(scheduler=lambda f: clock.callLater(0, f)),
        ["ged"],
        30.0,
        None,
        True,
        None,
        settings=Settings(network=LOOPBACK),
    )
    m.got_dilation_key(b"k" * 32)
    m.got_wormhole_versions({"can-dilate": ["ged"]})
    please: dict[str, Any] = {"type": "please", "side": peer, "use-version": "ged"}
    if extensions:
        please["extensions"] = list(extensions)
    m.received_dilation_message(json.dumps(please).encode())
    return m, pipe, clock


def types(pipe: MailboxPipe) -> list[str]:
    return [message["type"] for _, message in pipe.sent]


class GenerationOrderTests(SynchronousTestCase):
    def test_first_generation_follows_please(self) -> None:
        """please goes out, then the first generation's hints; its connector is running."""
        m, pipe, _ = started("0000000000000000", "ffffffffffffffff")
        self.assertEqual(types(pipe), ["please", "connection-hints"])
        self.assertIsNotNone(m.connector)
        m.stop()

    def test_follower_sends_reconnecting_before_the_new_hints(self) -> None:
        """A Follower told to reconnect drops its link, answers 'reconnecting', and only
        then does the new generation's connector publish its hints."""
        m, pipe, _ = started("0000000000000000", "ffffffffffffffff")
        first_connector = m.connector
        connection = FakeDilatedConnection("->relay")
        link = m.connector_reports.link_for(connection)
        m.connector_reports.connector_connection_made(link, 1)
        del pipe.sent[:]
        m.received_dilation_message(b'{"type": "reconnect"}')
        link.connection_lost(connection, LinkLoss(Cause.DROPPED, "aborted"))  # type: ignore[arg-type]
        self.assertEqual(types(pipe), ["reconnecting", "connection-hints"])
        self.assertIsNotNone(m.connector)
        self.assertIsNot(m.connector, first_connector)
        m.stop()

    def test_leader_restarts_a_stalled_generation(self) -> None:
        """A Leader whose generation has nothing in flight asks for a new one after
        GENERATION_RETRY seconds ('reconnect'), and starts it once the Follower answers."""
        m, pipe, clock = started("ffffffffffffffff", "0000000000000000")
        connector = m.connector
        assert connector is not None
        connector._core.dialer.cancel_attempts()
        connector._core.dialer.cancel_timers()
        del pipe.sent[:]
        clock.advance(GENERATION_RETRY)
        self.assertEqual(types(pipe), ["reconnect"])
        self.assertIsNone(m.connector)
        m.received_dilation_message(b'{"type": "reconnecting"}')
        self.assertEqual(types(pipe), ["reconnect", "connection-hints"])
        self.assertIsNotNone(m.connector)
        m.stop()

    def test_stop_while_connecting(self) -> None:
        """stop() in a generation's connecting phase stops its connector and the Manager."""
        m, _, _ = started("0000000000000000", "ffffffffffffffff")
        stopped: list[Any] = []
        m.when_stopped().addCallback(stopped.append)
        m.stop()
        self.assertIsNone(m.connector)
        self.assertEqual(stopped, [None])
