"""The sockets of hole punching (selection.punch_dial) on the real reactor, over loopback: a
punched dial from our listening port whose first SYN's TTL is restored once it has left, its
failures as connectTCP reports them, its timeout and cancellation, and the expiry probe's
verdicts (the one loopback cannot show, a connect aborted by an ICMP time exceeded, is in the
namespace tests: tests/test_netns_support.py, tests/test_reach.py)."""

from __future__ import annotations

import os
import socket
import stat
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectBindError, ConnectionRefusedError, TimeoutError
from twisted.internet.interfaces import IWriteDescriptor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from tests.support.waits import sleep
from txdilation.selection.punch import listen, sockets_reusable
from txdilation.selection.punch_dial import ExpiryProbe, PunchEndpoint, _Connecting
from txdilation.selection.punch_schedule import Verdict

reactor: Any = _reactor
LOOPBACK = "127.0.0.1"


class Peers(Factory):
    """Records the peer address of every connection it accepts."""

    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []

    def buildProtocol(self, addr: Any) -> Protocol:
        self.peers.append((addr.host, addr.port))
        return Protocol()


class Client(Factory):
    protocol = Protocol


def system_ttl() -> int:
    with socket.socket() as s:
        return int(s.getsockopt(socket.IPPROTO_IP, socket.IP_TTL))


class Fixture(TestCase):
    timeout = 10

    def setUp(self) -> None:
        if not sockets_reusable(reactor):
            self.skipTest("no SO_REUSEPORT here")

    def our_port(self) -> int:
        """Our listening port (SO_REUSEPORT, as hole punching listens), on loopback."""
        listener = listen(reactor, Peers(), 0, LOOPBACK, reuse_port=True)
        self.addCleanup(listener.stopListening)
        port: int = listener.getHost().port
        return port

    def server(self) -> tuple[Peers, int]:
        peers = Peers()
        listener = reactor.listenTCP(0, peers, interface=LOOPBACK)
        self.addCleanup(listener.stopListening)
        return peers, listener.getHost().port

    def bound_socket(self) -> int:
        """A port held by a socket that does not listen (connecting to it is refused) and has
        no SO_REUSEPORT (binding it again fails)."""
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port

    def hanging(self) -> int:
        """A port whose SYNs go unanswered: a listener whose accept queue is full."""
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind((LOOPBACK, 0))
        s.listen(0)
        filler = socket.create_connection(s.getsockname(), timeout=2)
        self.addCleanup(filler.close)
        port: int = s.getsockname()[1]
        return port

    def assertOffTheReactor(self) -> None:
        self.assertFalse([w for w in reactor.getWriters() if w.logPrefix() == "punch"])


class PunchEndpointTests(Fixture):
    @inlineCallbacks
    def test_connects_from_our_port_with_the_ttl_restored(self) -> Any:
        """The dial starts from our listening port; once its first SYN (TTL 1 here: loopback
        does not forward) has left, the socket has the system's TTL again, so a connection
        made by it travels normally."""
        ours = self.our_port()
        peers, port = self.server()
        endpoint = PunchEndpoint(reactor, LOOPBACK, port, (LOOPBACK, ours), ttl=1, timeout=5)
        protocol = yield endpoint.connect(Client())
        self.addCleanup(protocol.transport.loseConnection)
        self.assertEqual(protocol.transport.getHost().port, ours)
        handle = protocol.transport.getHandle()
        self.assertEqual(handle.getsockopt(socket.IPPROTO_IP, socket.IP_TTL), system_ttl())
        yield _soon()
        self.assertEqual(peers.peers, [(LOOPBACK, ours)])
        self.assertOffTheReactor()

    @inlineCallbacks
    def test_refused(self) -> Any:
        """A refused dial fails as connectTCP's does."""
        endpoint = PunchEndpoint(
            reactor, LOOPBACK, self.bound_socket(), (LOOPBACK, self.our_port()), ttl=2, timeout=5
        )
        with self.assertRaises(ConnectionRefusedError):
            yield endpoint.connect(Client())
        self.assertOffTheReactor()

    @inlineCallbacks
    def test_unbindable(self) -> Any:
        """A local port that cannot be bound: ConnectBindError (the dial is not retried)."""
        taken = (LOOPBACK, self.bound_socket())
        endpoint = PunchEndpoint(reactor, LOOPBACK, self.bound_socket(), taken, ttl=None, timeout=5)
        with self.assertRaises(ConnectBindError):
            yield endpoint.connect(Client())

    @inlineCallbacks
    def test_timeout_and_cancel(self) -> Any:
        """A dial nobody answers ends at its timeout; one cancelled ends at once; either way
        its socket is off the reactor."""
        port, ours = self.hanging(), self.our_port()
        slow = PunchEndpoint(reactor, LOOPBACK, port, (LOOPBACK, ours), ttl=None, timeout=0.3)
        with self.assertRaises(TimeoutError):
            yield slow.connect(Client())
        self.assertOffTheReactor()
        d = slow.connect(Client())
        d.cancel()
        with self.assertRaises(CancelledError):
            yield d
        self.assertOffTheReactor()

    def test_a_stopped_dial_holds_its_number_for_a_turn(self) -> Any:
        """A dial stopped while the reactor handles other events (a new generation starting):
        its socket is closed at once (the same dial can start again right away), but its
        descriptor number stays taken, by /dev/null, until the reactor's next turn, so that
        a stale event of the batch being handled can never reach a socket that got the
        number meanwhile (CI saw ``doWrite called on a Port``: the new listener lost)."""
        port = self.hanging()
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((LOOPBACK, port))
        number = sock.fileno()
        attempt = _Connecting(reactor, sock, lambda error: None)
        attempt.stop()
        self.assertEqual(sock.fileno(), -1)
        self.assertOffTheReactor()
        held = os.fstat(number)
        self.assertTrue(stat.S_ISCHR(held.st_mode))  # /dev/null, no longer the socket
        self.assertEqual(held.st_rdev, os.stat(os.devnull).st_rdev)
        calls = [c for c in reactor.getDelayedCalls() if c.func is os.close]
        self.assertEqual([c.args for c in calls], [(number,)])
        return sleep(0)


@implementer(IWriteDescriptor)
class _Writable:
    """A socket-pair end on the reactor as a writer; on its first write event it closes
    ``other`` (off the reactor first, as Twisted's own connections do) and opens a listener
    (a new generation starting while the previous link's loss is handled)."""

    def __init__(self, sock: socket.socket, opened: list[Any]) -> None:
        self.sock = sock
        self.other: _Writable | None = None
        self.opened = opened
        self.writes = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def logPrefix(self) -> str:
        return "writable"

    def doWrite(self) -> None:
        self.writes += 1
        reactor.removeWriter(self)
        if self.opened or self.other is None:
            return
        freed = self.other.sock.fileno()
        reactor.removeWriter(self.other)
        self.other.sock.close()
        listener = listen(reactor, Peers(), 0, LOOPBACK, reuse_port=True)
        self.opened.append((freed, listener))

    def connectionLost(self, reason: Any) -> None:
        reactor.removeWriter(self)


class FreshTurnListenerTests(Fixture):
    @inlineCallbacks
    def test_a_listener_opened_mid_batch_never_sees_a_stale_event(self) -> Any:
        """Two writers ready in the same poll; the first one handled closes the other and
        opens a listener, which gets the freed descriptor number while the other's write
        event is still to be handed out. The listener watches from the next turn on: the
        stale event reaches nobody, and it accepts connections (it was lost to ``doWrite
        called on a Port`` before)."""
        self.our_port()  # Twisted's first listener takes a descriptor it keeps in reserve
        opened: list[Any] = []
        pairs = [socket.socketpair() for _ in range(2)]
        for pair in pairs:
            self.addCleanup(lambda pair=pair: [s.close() for s in pair])
        ends = [_Writable(pair[0], opened) for pair in pairs]
        ends[0].other, ends[1].other = ends[1], ends[0]
        # numbers are given lowest first: take every free one below ours, so that the
        # listener's socket gets the number the first handled writer frees
        spare = []
        while True:
            number = os.open(os.devnull, os.O_RDONLY)
            if number > max(e.fileno() for e in ends):
                os.close(number)
                break
            spare.append(number)
        self.addCleanup(lambda: [os.close(n) for n in spare])
        for end in ends:
            reactor.addWriter(end)
        yield sleep(0.05)
        [(freed, listener)] = opened
        self.addCleanup(listener.stopListening)
        self.assertEqual(listener.fileno(), freed)
        self.assertTrue(listener.connected)
        self.assertIn(listener, reactor.getReaders())
        self.assertEqual(sorted(e.writes for e in ends), [0, 1])
        client = yield TCP4ClientEndpoint(reactor, LOOPBACK, listener.getHost().port).connect(
            Client()
        )
        client.transport.loseConnection()
        self.assertEqual(len(listener.factory.peers), 1)
        self.assertEqual(self.flushLoggedErrors(), [])

    @inlineCallbacks
    def test_stopped_before_its_turn(self) -> Any:
        """A listener stopped before its first turn is never put on the reactor."""
        listener = listen(reactor, Peers(), 0, LOOPBACK, reuse_port=True)
        yield listener.stopListening()
        yield sleep(0)
        self.assertNotIn(listener, reactor.getReaders())


class ExpiryProbeTests(Fixture):
    @inlineCallbacks
    def test_reached(self) -> Any:
        """A low-TTL connect that reaches a host, refused or accepted: REACHED (no TTL dies
        between here and there); the verdict is kept for the family."""
        _peers, port = self.server()
        for target in (self.bound_socket(), port):
            probe = ExpiryProbe(reactor, 2)
            verdict = yield probe.verdict(LOOPBACK, target, LOOPBACK)
            self.assertEqual(verdict, Verdict.REACHED)
            again = probe.verdict(LOOPBACK, 1, LOOPBACK)
            self.assertEqual(self.successResultOf(again), Verdict.REACHED)
        self.assertOffTheReactor()

    @inlineCallbacks
    def test_survives(self) -> Any:
        """A low-TTL connect with no outcome within the wait: SURVIVES; a waiter cancelled
        meanwhile is not told, the others are."""
        probe = ExpiryProbe(reactor, 2, wait=0.3)
        port = self.hanging()
        first = probe.verdict(LOOPBACK, port, LOOPBACK)
        second = probe.verdict(LOOPBACK, port, LOOPBACK)
        first.addErrback(lambda f: f.trap(CancelledError))
        first.cancel()
        verdict = yield second
        self.assertEqual(verdict, Verdict.SURVIVES)
        self.assertOffTheReactor()

    def test_not_a_real_reactor(self) -> None:
        """Without real sockets (a MemoryReactor): ABORTED at once (the system's TTL)."""
        probe = ExpiryProbe(MemoryReactorClock(), 2)
        verdict = probe.verdict("198.51.100.7", 6000, "0.0.0.0")
        self.assertEqual(self.successResultOf(verdict), Verdict.ABORTED)


def _soon() -> Deferred[None]:
    d: Deferred[None] = Deferred()
    reactor.callLater(0.05, d.callback, None)
    return d
