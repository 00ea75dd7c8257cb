"""A relayed link whose far side died can stay open at the relay forever; the Follower's
'link-lost' report gets a txdilation Leader off it at once.

The real transit relay registers each side's transport as the streaming producer of the
other's. When it has paused side X (because the other side, Y, is not reading) and then
learns that X died (a write to X fails), it calls ``loseConnection()`` on Y; Twisted then
drains Y's buffer, finds the paused producer, resumes it instead of closing, and never
closes Y. The peer on Y sees neither data nor a close: only its liveness check (1.5 ping
intervals) would get it off the link. These tests pin the relay's behaviour (with plain
sockets) and check that a txdilation pair recovers from it through the mailbox: the Follower
reports every lost link with ``link-lost``, and the Leader drops its connection and starts a
new generation without waiting for its liveness check.
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Any

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import TestCase

from tests.mailbox.test_manager import Collector, DilatedPairBase, reactor
from tests.mailbox.test_peer_departure import kinds, role_index
from tests.support.harness import LOOPBACK
from tests.support.waits import sleep
from txdilation.testing.servers import start_transit_relay

MiB = 2**20


def _relay_paused_a_side(transit: Any) -> bool:
    """Whether the relay stopped reading one side of a relayed pair because the other side's
    outbound buffer is full (that side's transport holds the paused producer)."""
    return any(
        getattr(state._client.transport, "producerPaused", False)
        for state in transit.active_connections._connections
    )


class RelayLeavesSurvivorOpenTests(TestCase):
    """The real relay's behaviour that the recovery below is for (plain sockets)."""

    timeout = 30

    @inlineCallbacks
    def test_survivor_stays_open_when_its_paused_partner_dies(self) -> Any:
        """Side B floods while side A does not read, until the relay pauses B and nothing
        moves; B dies with a reset; A writes (so the relay learns of B's death while B is
        paused) and then reads everything the relay holds: no end of stream comes within 3 s."""
        relay = yield Deferred.fromCoroutine(start_transit_relay(reactor))
        self.addCleanup(relay.stop)
        port = int(relay.hint.rsplit(":", 1)[1])
        token = os.urandom(32).hex().encode()
        a, b = (socket.create_connection((LOOPBACK, port)) for _ in range(2))
        self.addCleanup(a.close)
        for sock, side in ((a, b"a" * 16), (b, b"b" * 16)):
            sock.sendall(b"please relay " + token + b" for side " + side + b"\n")
        for sock in (a, b):
            sock.setblocking(False)
            answer = b""
            while len(answer) < 3:
                try:
                    answer += sock.recv(3 - len(answer))
                except BlockingIOError:
                    yield sleep(0.01)
            self.assertEqual(answer, b"ok\n")
        # flood until every buffer on the way to A is full: the relay pauses B and B's own
        # sends have been refused for a while (nothing moves any more)
        flooded, blocked_since = 0, None
        while not (
            _relay_paused_a_side(relay.transit)
            and blocked_since is not None
            and reactor.seconds() - blocked_since > 0.3
        ):
            try:
                flooded += b.send(b"x" * 65536)
                blocked_since = None
            except BlockingIOError:
                if blocked_since is None:
                    blocked_since = reactor.seconds()
                yield sleep(0.01)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        b.close()  # a reset
        yield sleep(0.2)
        for _ in range(10):
            a.send(b"y" * 1000)
            yield sleep(0.02)
        received, ended = 0, False
        deadline = reactor.seconds() + 3.0
        while reactor.seconds() < deadline and not ended:
            try:
                data = a.recv(MiB)
            except BlockingIOError:
                yield sleep(0.01)
                continue
            except ConnectionError:
                ended = True
                break
            received += len(data)
            ended = not data
        self.assertGreater(received, 0)
        self.assertLessEqual(received, flooded)
        self.assertFalse(ended, "the relay closed the survivor: this defect is fixed upstream")


class Sink(Protocol):
    """An application that does not read at first (its subchannel paused), then hashes."""

    def __init__(self) -> None:
        self.received = 0
        self.digest = hashlib.sha256()

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.pauseProducing()  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)
        self.digest.update(data)


class SinkFactory(Factory):
    def __init__(self) -> None:
        self.built: list[Sink] = []

    def buildProtocol(self, addr: object) -> Sink:
        self.built.append(Sink())
        return self.built[-1]


class LinkLostThroughStuckRelayTests(DilatedPairBase):
    """Relay-only txdilation pair, the Leader's application slow, the Follower's link cut."""

    timeout = 40  # the Leader's own liveness would need 1.5 x 60 s

    @inlineCallbacks
    def test_leader_leaves_a_link_the_relay_keeps_open(self) -> Any:
        """The Follower sends 8 MiB to a Leader application that is not reading, until the
        relay pauses the Follower's side; the Follower's link is cut and the Leader's
        application writes (the relay learns of the death while the side is paused, so it
        keeps the Leader's side open). The Follower reports 'link-lost' for generation 0,
        the Leader starts a new generation through the relay, and once the application reads
        again it gets all 8 MiB exactly, while the Follower gets the reply exactly once.
        Both ping intervals are 60 s, so liveness plays no part."""
        relay = yield Deferred.fromCoroutine(start_transit_relay(reactor))
        self.addCleanup(relay.stop)
        pipes, dilators, apis = yield self.dilate_pair(
            transit_relay_location=relay.hint, no_listen=True, ping_interval=60
        )
        follower = role_index(dilators, "FOLLOWER")
        leader = 1 - follower
        sinks = SinkFactory()
        apis[leader].listener_for("bulk").listen(sinks)
        client = yield apis[follower].connector_for("bulk").connect(Factory.forProtocol(Collector))
        payload = os.urandom(32 * MiB)
        for offset in range(0, len(payload), 65536):
            client.transport.write(payload[offset : offset + 65536])
        while not _relay_paused_a_side(relay.transit):
            yield sleep(0.01)
        lm, fm = dilators[leader]._manager, dilators[follower]._manager
        first = lm.connection
        self.assertIsNotNone(first)
        fm.connection.abort()
        reply = b"reply from the Leader"
        sinks.built[0].transport.write(reply)
        while lm.connection is first or lm.connection is None:
            yield sleep(0.01)
        sent = [body for _, body in pipes[follower].sent]
        self.assertIn({"type": "link-lost", "generation": 0}, sent)
        self.assertEqual(kinds(pipes[follower]).count("reconnecting"), 1)
        sinks.built[0].transport.resumeProducing()
        while sinks.built[0].received < len(payload):
            yield sleep(0.01)
        self.assertEqual(sinks.built[0].received, len(payload))
        self.assertEqual(sinks.built[0].digest.digest(), hashlib.sha256(payload).digest())
        yield client.wait_for(len(reply))
        yield sleep(0.1)
        self.assertEqual(b"".join(client.received), reply)
