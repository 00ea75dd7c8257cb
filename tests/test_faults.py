"""Tests of the fault-injection proxy and schedules in tests/support/faults.py, over real loopback
TCP (a recording server behind the proxy, a recording client in front of it)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial import unittest
from zope.interface import implementer

from tests.support.faults import (
    DOWN,
    QUEUE_LIMIT,
    UP,
    Every,
    FaultProxy,
    free_port,
    run_timeline,
    start_fault_proxy,
)
from tests.support.waits import sleep, wait_until

LOOPBACK = "127.0.0.1"


class Recorder(Protocol):
    """Keeps what it receives; ``wait_for(n)`` fires once ``n`` bytes have arrived; ``lost``
    fires with the close reason (the exception)."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.data = bytearray()
        self.lost: defer.Deferred[BaseException] = defer.Deferred()
        self.made: defer.Deferred[None] = defer.Deferred()
        self._waiters: list[tuple[int, defer.Deferred[None]]] = []

    def connectionMade(self) -> None:
        self.made.callback(None)

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if self.echo:
            self.transport.write(data)
        ready = [w for w in self._waiters if len(self.data) >= w[0]]
        self._waiters = [w for w in self._waiters if len(self.data) < w[0]]
        for _, d in ready:
            d.callback(None)

    def wait_for(self, count: int) -> defer.Deferred[None]:
        d: defer.Deferred[None] = defer.Deferred()
        if len(self.data) >= count:
            d.callback(None)
        else:
            self._waiters.append((count, d))
        return d

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(reason.value)


@implementer(IPushProducer)
class Writer(Recorder):
    """A recorder that writes ``total`` bytes through a registered push producer."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.payload = os.urandom(total)
        self.offset = 0
        self.paused = False
        self.pauses = 0

    def start_writing(self) -> None:
        self.transport.registerProducer(self, True)
        self.resumeProducing()

    def pauseProducing(self) -> None:
        self.paused = True
        self.pauses += 1

    def resumeProducing(self) -> None:
        self.paused = False
        while not self.paused and self.offset < len(self.payload):
            self.transport.write(self.payload[self.offset : self.offset + 65536])
            self.offset += 65536

    def stopProducing(self) -> None:
        self.paused = True


class ProxyTestBase(unittest.TestCase):
    """A recording (optionally echoing) server on loopback with a FaultProxy in front of it."""

    timeout = 30
    echo = False

    def setUp(self) -> defer.Deferred[None]:
        self.servers: list[Recorder] = []
        return defer.ensureDeferred(self._start())

    async def _start(self) -> None:
        def build() -> Recorder:
            r = Recorder(echo=self.echo)
            self.servers.append(r)
            return r

        listening = await TCP4ServerEndpoint(reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(build)
        )
        self.addCleanup(listening.stopListening)
        self.proxy: FaultProxy = await start_fault_proxy(reactor, listening.getHost().port)
        self.addCleanup(self.proxy.stop)

    async def client(self, protocol: Recorder | None = None) -> Recorder:
        """Connect a client through the proxy (it is reset at cleanup if still open)."""
        proto = protocol or Recorder()
        endpoint = TCP4ClientEndpoint(reactor, LOOPBACK, self.proxy.port)
        await endpoint.connect(Factory.forProtocol(lambda: proto))

        async def close() -> None:
            if not proto.lost.called:
                proto.transport.abortConnection()
                await proto.lost

        self.addCleanup(lambda: defer.ensureDeferred(close()))
        return proto

    async def server_for(self, index: int) -> Recorder:
        await wait_until(lambda: len(self.servers) > index, 5.0)
        server = self.servers[index]
        await server.made

        async def close() -> None:
            if not server.lost.called:
                server.transport.abortConnection()
                await server.lost

        self.addCleanup(lambda: defer.ensureDeferred(close()))
        return server


class ForwardingTests(ProxyTestBase):
    """Without faults the proxy is a transparent, order-keeping, back-pressured pipe."""

    echo = True

    @defer.inlineCallbacks
    def test_echo_through_proxy(self) -> Any:
        """4 MiB written through the proxy come back from the echo server byte for byte, and
        the counters add up in both directions."""
        writer = Writer(4 << 20)
        yield defer.ensureDeferred(self.client(writer))
        writer.start_writing()
        yield writer.wait_for(len(writer.payload))
        self.assertEqual(
            hashlib.sha256(writer.data).digest(), hashlib.sha256(writer.payload).digest()
        )
        self.assertEqual(self.proxy.stats.bytes_up, 4 << 20)
        self.assertEqual(self.proxy.stats.bytes_down, 4 << 20)
        self.assertEqual(self.proxy.stats.accepted, 1)

    @defer.inlineCallbacks
    def test_close_is_passed_on(self) -> Any:
        """A client that closes after writing: the server gets every byte, then a clean
        close (FIN, not RST), and the proxy forgets the connection."""
        client = yield defer.ensureDeferred(self.client())
        client.transport.write(b"x" * 100_000)
        client.transport.loseConnection()
        server = yield defer.ensureDeferred(self.server_for(0))
        reason = yield server.lost
        self.assertEqual(len(server.data), 100_000)
        self.assertIsInstance(reason, ConnectionDone)
        yield defer.ensureDeferred(wait_until(lambda: self.proxy.live_connections == 0, 5.0))


class BackPressureTests(ProxyTestBase):
    """A reader that stops reading slows the writer down; the proxy holds a bounded amount."""

    @defer.inlineCallbacks
    def test_slow_reader_pauses_writer(self) -> Any:
        """The server stops reading: the client's producer is paused and the proxy's queue
        stays within QUEUE_LIMIT; once reading resumes, all 32 MiB arrive in order."""
        writer = Writer(32 << 20)
        yield defer.ensureDeferred(self.client(writer))
        server = yield defer.ensureDeferred(self.server_for(0))
        server.transport.pauseProducing()
        writer.start_writing()
        yield defer.ensureDeferred(wait_until(lambda: writer.paused, 5.0))
        (link,) = self.proxy._links
        self.assertLessEqual(link.pipes[UP].queued, QUEUE_LIMIT + 65536)
        self.assertLess(writer.offset, len(writer.payload))
        server.transport.resumeProducing()
        yield server.wait_for(len(writer.payload))
        self.assertEqual(bytes(server.data), writer.payload)
        self.assertGreaterEqual(writer.pauses, 1)


class CutTests(ProxyTestBase):
    """``cut()`` resets every connection, both halves, and leaves the proxy usable."""

    @defer.inlineCallbacks
    def test_cut_resets_both_ends(self) -> Any:
        """Both ends see their connection lost with an error (not a clean close); the
        counters say one cut of one connection; a new connection still gets through."""
        client = yield defer.ensureDeferred(self.client())
        server = yield defer.ensureDeferred(self.server_for(0))
        self.assertEqual(self.proxy.cut(), 1)
        client_reason = yield client.lost
        server_reason = yield server.lost
        for reason in (client_reason, server_reason):
            self.assertNotIsInstance(reason, ConnectionDone)
        self.assertEqual((self.proxy.stats.cuts, self.proxy.stats.connections_cut), (1, 1))
        self.assertEqual(self.proxy.cut(), 0)
        self.assertEqual(self.proxy.stats.cuts, 1)
        again = yield defer.ensureDeferred(self.client())
        again.transport.write(b"after the cut")
        server2 = yield defer.ensureDeferred(self.server_for(1))
        yield server2.wait_for(13)
        self.assertEqual(bytes(server2.data), b"after the cut")


class CutCarriedTests(ProxyTestBase):
    """``cut(carried=...)`` spares connections that have not forwarded that much each way."""

    echo = True

    @defer.inlineCallbacks
    def test_only_connections_past_the_bytes_are_cut(self) -> Any:
        """A connection that forwarded 2 KiB each way is cut; one that forwarded 100 bytes
        each way and one that forwarded nothing yet are not, however long they are open."""
        busy = yield defer.ensureDeferred(self.client())
        yield defer.ensureDeferred(self.server_for(0))
        quiet = yield defer.ensureDeferred(self.client())
        yield defer.ensureDeferred(self.server_for(1))
        silent = yield defer.ensureDeferred(self.client())
        yield defer.ensureDeferred(self.server_for(2))
        busy.transport.write(b"b" * 2048)
        quiet.transport.write(b"q" * 100)
        yield busy.wait_for(2048)
        yield quiet.wait_for(100)
        self.assertEqual(self.proxy.cut(carried=1024), 1)
        yield busy.lost
        self.assertEqual(self.proxy.live_connections, 2)
        self.assertFalse(quiet.lost.called)
        self.assertFalse(silent.lost.called)
        self.assertEqual(self.proxy.cut(), 2)  # the first cut left both others live
        yield quiet.lost
        yield silent.lost


class BlackholeTests(ProxyTestBase):
    """``blackhole()`` stops everything on the live connections and closes nothing."""

    @defer.inlineCallbacks
    def test_nothing_passes_nothing_closes(self) -> Any:
        """After blackhole(), bytes and even a close from the client do not reach the server;
        heal() then delivers the held bytes in order and passes the close on."""
        client = yield defer.ensureDeferred(self.client())
        client.transport.write(b"before ")
        server = yield defer.ensureDeferred(self.server_for(0))
        yield server.wait_for(7)
        self.assertEqual(self.proxy.blackhole(), 1)
        client.transport.write(b"during")
        # held, not timed: the proxy no longer reads the client, so neither the bytes nor the
        # close can pass it (a wait would only show they had not passed yet)
        (link,) = self.proxy._links
        self.assertFalse(link.pipes[UP].reading)
        self.assertEqual(link.pipes[UP].forwarded, 7)
        client.transport.loseConnection()
        yield client.lost
        self.assertFalse(link.pipes[UP].reading)
        self.assertEqual(bytes(server.data), b"before ")
        self.assertFalse(server.lost.called)
        self.proxy.heal()
        yield server.wait_for(13)
        reason = yield server.lost
        self.assertEqual(bytes(server.data), b"before during")
        self.assertIsInstance(reason, ConnectionDone)

    @defer.inlineCallbacks
    def test_new_connections_pass(self) -> Any:
        """A connection made after blackhole() is forwarded normally."""
        yield defer.ensureDeferred(self.client())
        yield defer.ensureDeferred(self.server_for(0))
        self.proxy.blackhole()
        fresh = yield defer.ensureDeferred(self.client())
        fresh.transport.write(b"fresh")
        server = yield defer.ensureDeferred(self.server_for(1))
        yield server.wait_for(5)
        self.assertEqual(bytes(server.data), b"fresh")

    @defer.inlineCallbacks
    def test_drain_discards(self) -> Any:
        """With drain=True the proxy keeps reading and throws the bytes away: the writer is
        never held back, nothing is delivered, even after heal()."""
        writer = Writer(8 << 20)
        yield defer.ensureDeferred(self.client(writer))
        server = yield defer.ensureDeferred(self.server_for(0))
        self.proxy.blackhole(drain=True)
        writer.start_writing()
        yield defer.ensureDeferred(
            wait_until(lambda: self.proxy.stats.bytes_discarded == len(writer.payload), 5.0)
        )
        self.proxy.heal()
        yield defer.ensureDeferred(sleep(0.1))
        self.assertEqual(len(server.data), 0)


class StallThrottleDelayTests(ProxyTestBase):
    """Link conditions: one direction stalled, bandwidth limited, latency added."""

    echo = True

    @defer.inlineCallbacks
    def test_stall_one_direction(self) -> Any:
        """stall(DOWN): the server receives (and echoes) but the echo is held; unstall(DOWN)
        delivers it in order. The client-to-server direction kept flowing meanwhile."""
        client = yield defer.ensureDeferred(self.client())
        server = yield defer.ensureDeferred(self.server_for(0))
        self.proxy.stall(DOWN)
        client.transport.write(b"one ")
        client.transport.write(b"two")
        yield server.wait_for(7)
        (link,) = self.proxy._links
        self.assertFalse(link.pipes[DOWN].reading)  # the echo is held, not timed
        self.assertEqual(link.pipes[DOWN].forwarded, 0)
        self.assertEqual(bytes(client.data), b"")
        self.proxy.unstall(DOWN)
        yield client.wait_for(7)
        self.assertEqual(bytes(client.data), b"one two")

    @defer.inlineCallbacks
    def test_stall_applies_to_new_connections(self) -> Any:
        """A stall is a property of the link: connections made later are stalled too."""
        self.proxy.stall(UP)
        client = yield defer.ensureDeferred(self.client())
        client.transport.write(b"held")
        server = yield defer.ensureDeferred(self.server_for(0))
        (link,) = self.proxy._links
        self.assertFalse(link.pipes[UP].reading)  # held, not timed
        self.assertEqual(link.pipes[UP].forwarded, 0)
        self.assertEqual(bytes(server.data), b"")
        self.proxy.heal()
        yield client.wait_for(4)
        self.assertEqual(bytes(client.data), b"held")

    @defer.inlineCallbacks
    def test_throttle(self) -> Any:
        """At 1 MB/s each way, a 512 KiB echo takes at least about half a second (the first
        chunk of each direction goes at once), and arrives whole."""
        self.proxy.throttle(1_000_000)
        client = yield defer.ensureDeferred(self.client())
        started = reactor.seconds()
        payload = os.urandom(512 * 1024)
        client.transport.write(payload)
        yield client.wait_for(len(payload))
        self.assertGreaterEqual(reactor.seconds() - started, 0.4)
        self.assertEqual(bytes(client.data), payload)

    @defer.inlineCallbacks
    def test_delay(self) -> Any:
        """With a 0.2 s delay, an echo takes at least 0.4 s (delayed each way)."""
        self.proxy.delay(0.2)
        client = yield defer.ensureDeferred(self.client())
        started = reactor.seconds()
        client.transport.write(b"ping")
        yield client.wait_for(4)
        self.assertGreaterEqual(reactor.seconds() - started, 0.4)

    def test_bad_conditions(self) -> None:
        """A rate that is not positive or a negative delay is refused."""
        self.assertRaises(ValueError, self.proxy.throttle, 0)
        self.assertRaises(ValueError, self.proxy.delay, -1)


class DownTests(ProxyTestBase):
    """``down()`` cuts everything and holds (or refuses) new connections until ``up()``."""

    @defer.inlineCallbacks
    def test_down_holds_then_up_connects(self) -> Any:
        """While down, a new connection is accepted but not connected onward (the server sees
        nothing); up() connects it and the held bytes arrive."""
        first = yield defer.ensureDeferred(self.client())
        yield defer.ensureDeferred(self.server_for(0))
        self.assertEqual(self.proxy.down(), 1)
        yield first.lost
        held = yield defer.ensureDeferred(self.client())
        held.transport.write(b"waited")
        yield defer.ensureDeferred(wait_until(lambda: self.proxy.stats.accepted == 2, 5.0))
        (link,) = self.proxy._links
        self.assertIsNone(link.connecting)  # not connected onward while down
        self.assertEqual(len(self.servers), 1)
        self.proxy.up()
        server = yield defer.ensureDeferred(self.server_for(1))
        yield server.wait_for(6)
        self.assertEqual(bytes(server.data), b"waited")

    @defer.inlineCallbacks
    def test_down_refusing(self) -> Any:
        """down(refuse=True): a new connection is reset at once and never reaches the server."""
        self.proxy.down(refuse=True)
        client = yield defer.ensureDeferred(self.client())
        reason = yield client.lost
        self.assertNotIsInstance(reason, ConnectionDone)
        self.assertEqual(self.servers, [])


class LifetimeTests(unittest.TestCase):
    """A proxy stops by itself at the end of its lifetime."""

    timeout = 10

    @defer.inlineCallbacks
    def test_lifetime(self) -> Any:
        """After ``lifetime`` seconds the port is closed: connecting fails."""
        proxy = yield defer.ensureDeferred(start_fault_proxy(reactor, free_port(), lifetime=0.1))
        self.addCleanup(proxy.stop)
        yield defer.ensureDeferred(sleep(0.3))
        endpoint = TCP4ClientEndpoint(reactor, LOOPBACK, proxy.port)
        with self.assertRaises(Exception):  # noqa: B017 (ConnectionRefusedError on Linux)
            yield endpoint.connect(Factory.forProtocol(Recorder))


class ScheduleTests(unittest.SynchronousTestCase):
    """Bounded schedules on a Clock."""

    def test_every_count(self) -> None:
        """Every(count=3) calls three times, one interval apart, then fires done with 3."""
        clock = Clock()
        calls: list[float] = []
        every = Every(clock, 0.25, lambda: calls.append(clock.seconds()), count=3)
        clock.advance(0.25)
        clock.advance(0.25)
        clock.advance(0.25)
        clock.advance(1)
        self.assertEqual(calls, [0.25, 0.5, 0.75])
        self.assertEqual(self.successResultOf(every.done), 3)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_every_duration(self) -> None:
        """Every(duration=1) stops after one second of calls."""
        clock = Clock()
        every = Every(clock, 0.25, lambda: None, duration=1.0)
        clock.pump([0.25] * 8)
        self.assertEqual(self.successResultOf(every.done), 4)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_every_stop_and_bounds(self) -> None:
        """stop() ends the schedule at once; a schedule without a bound is refused."""
        clock = Clock()
        every = Every(clock, 1.0, lambda: None, count=100)
        clock.advance(1)
        every.stop()
        every.stop()
        self.assertEqual(self.successResultOf(every.done), 1)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertRaises(ValueError, Every, clock, 1.0, lambda: None)
        self.assertRaises(ValueError, Every, clock, 0, lambda: None, count=1)

    def test_every_action_raises(self) -> None:
        """An exception in the action fails done and stops the schedule."""
        clock = Clock()

        def boom() -> None:
            raise RuntimeError("boom")

        every = Every(clock, 1.0, boom, count=5)
        clock.advance(1)
        self.failureResultOf(every.done, RuntimeError)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_timeline(self) -> None:
        """run_timeline runs the steps at their offsets, in offset order."""
        clock = Clock()
        seen: list[str] = []
        d = defer.ensureDeferred(
            run_timeline(clock, [(2.0, lambda: seen.append("b")), (1.0, lambda: seen.append("a"))])
        )
        clock.advance(1)
        self.assertEqual(seen, ["a"])
        clock.advance(1)
        self.assertEqual(self.successResultOf(d), [1.0, 2.0])
        self.assertEqual(seen, ["a", "b"])
