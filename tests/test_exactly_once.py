"""Exactly-once delivery under random link cuts: two real Managers in memory.

Two :class:`~txdilation.mailbox.manager.Manager` objects (so the real Multiplexer, Inbound, Outbound
and SubChannel code underneath) talk DILATE-n through a mailbox that delivers on a later clock
turn, and records through :class:`MemoryL2Link`, a fake of the selected L2 connections (checked
with ``verifyObject(IDilatedConnection)``) that behaves like a TCP transport where it matters:
its send buffer pauses the registered producer (resumed on a later turn once it drained), a
side that paused reading gets nothing, records move only when the test delivers them, a cut
loses whatever is still in flight (a record is lost whole: a partial frame never reaches the
Manager), and each side hears about the cut on its own later turn (or not before the test
sleeps). Connectors are held (``HeldConnectors``, a Manager that never starts them): the test
decides when the two current generations meet, and which side selects first, so cuts also land
between the two sides' selections, while the Leader waits for ``reconnecting``, or while its
stalled-generation timer runs.

Hypothesis drives applications on both sides over several subchannels (full-close and
half-close protocols, some of them streaming producers paused by L4, random write sizes,
reading paused and resumed, ``stopProducing``, a paused reader flooded past Inbound's bound so
that the whole connection stops reading) and cuts the link at
random points (mid-stream, right after an ACK arrived, during the reconnect handshake, twice in
a row, while reading is paused by flow control). At the end the link is restored, every
subchannel is closed and everything settles; then:

- each direction of each subchannel received exactly the bytes written, in order (a prefix
  of them where the receiver called ``stopProducing``, which discards what comes later);
- nothing was delivered after ``connectionLost`` or ``readConnectionLost`` or while paused;
- once settled (before the closes), no open subchannel's producer was left paused;
- each OPEN built exactly one protocol at the peer; each protocol saw ``connectionMade`` and
  ``connectionLost`` exactly once;
- both sides' outbound queues, inbound buffers and routes are empty.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock, Cooperator
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from txdilation.mailbox.manager import Manager
from txdilation.path.selected_link import SelectedLink
from txdilation.selection.connector import Connector
from txdilation.semantics import TWISTED
from txdilation.settings import Limits, NetworkSettings, ReconnectPolicy, Settings
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ack, Data, Record
from txdilation.wire.roles import LEADER

LEADER_SIDE, FOLLOWER_SIDE = "f" * 16, "0" * 16
SIDES = (0, 1)  # 0: the Leader, 1: the Follower
PING_INTERVAL = 10.0
#: bytes a side may have in flight before its transport pauses the producer (a socket buffer)
SEND_BUFFER = 64 * 1024
#: subchannel names: full-close or half-close protocols, each optionally a streaming producer
NAMES = ("full", "half", "full+producer", "half+producer")


def _size(record: Record) -> int:
    return 9 + len(record.data) if isinstance(record, Data) else 9


class MailboxPipe:
    """One side's ISend: each DILATE-n body reaches the peer's Manager on a later turn, in
    order, with gapless phases."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.peer: Manager | None = None
        self.next_phase = 0

    def send(self, phase: str, plaintext: bytes) -> None:
        assert phase == f"dilate-{self.next_phase}", phase
        self.next_phase += 1
        self.clock.callLater(0, self._deliver, plaintext)

    def _deliver(self, plaintext: bytes) -> None:
        assert self.peer is not None
        self.peer.received_dilation_message(plaintext)


@implementer(IDilatedConnection)
class MemoryL2End:
    """One side of a :class:`MemoryL2Link`: what the Manager sees as its selected L2."""

    def __init__(self, link: MemoryL2Link, side: int) -> None:
        self._link = link
        self._side = side
        self.description = f"memory generation {link.number} side {side}"
        self.is_direct = True
        self.reading_paused = False
        self.producer: IPushProducer | None = None
        self.producer_paused = False
        self.sink: SelectedLink | None = None
        self.in_flight = 0  # bytes this side wrote that the peer has not read yet
        self._resume_call: Any = None

    def send_record(self, record: Any) -> None:
        self._link.send(self._side, (record,))

    def send_records(self, records: Any) -> None:
        self._link.send(self._side, tuple(records))

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming and self.producer is None, (streaming, self.producer)
        self.producer, self.producer_paused = producer, False

    def unregisterProducer(self) -> None:
        self.producer, self.producer_paused = None, False

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def disconnect(self) -> None:
        self._link.cut()

    def abort(self) -> None:
        self._link.cut()

    def fail(self, reason: LinkLoss) -> None:
        """What the Manager calls on a silent link or a Follower's link-lost report."""
        self._link.cut()

    def wrote(self, size: int) -> None:
        self.in_flight += size
        if self.in_flight > SEND_BUFFER and self.producer and not self.producer_paused:
            self.producer_paused = True
            self.producer.pauseProducing()  # synchronously, inside the write (as Twisted)

    def drained(self, size: int, clock: Clock) -> None:
        self.in_flight -= size
        if self.producer_paused and self.in_flight == 0 and self._resume_call is None:
            self._resume_call = clock.callLater(0, self._resume)

    def _resume(self) -> None:
        self._resume_call = None
        if self.producer is not None and self.producer_paused and self._link.alive:
            self.producer_paused = False
            self.producer.resumeProducing()


class MemoryL2Link:
    """One generation's connection between the two Managers (see the module docstring)."""

    def __init__(self, world: World, number: int, connectors: tuple[Connector, ...]) -> None:
        self.world = world
        self.number = number
        self.connectors = connectors
        self.alive = True
        self.ends = (MemoryL2End(self, 0), MemoryL2End(self, 1))
        self.queues: tuple[deque[Record], deque[Record]] = (deque(), deque())  # by sender
        self.notify_delays = (0.0, 0.0)

    def send(self, side: int, records: Iterable[Record]) -> None:
        if not self.alive:
            return
        end = self.ends[side]
        for record in records:
            self.queues[side].append(record)
            end.wrote(_size(record))

    def select(self, side: int) -> bool:
        """``side``'s connector selects this connection (it got the peer's KCM); False when
        that connector is gone (then the connection is cut, as stopping it would)."""
        end, manager = self.ends[side], self.world.managers[side]
        if end.sink is not None:
            return True
        if not self.alive or manager.connector is not self.connectors[side]:
            self.cut()
            return False
        end.sink = manager.connector_reports.link_for(end)
        manager.connector_reports.connector_connection_made(end.sink, 1)
        return True

    def deliver(self, to: int, count: int) -> list[Record]:
        """Deliver up to ``count`` records to side ``to`` (selecting it first, as its KCM comes
        first); return them."""
        queue, sender, receiver = self.queues[1 - to], self.ends[1 - to], self.ends[to]
        moved: list[Record] = []
        if not queue or not self.select(to):
            return moved
        while len(moved) < count and queue and self.alive and not receiver.reading_paused:
            record = queue.popleft()
            sender.drained(_size(record), self.world.clock)
            moved.append(record)
            assert receiver.sink is not None
            receiver.sink.got_record(record)
        return moved

    def cut(self) -> None:
        """Lose what is in flight; each selected side hears it after its notify delay."""
        if not self.alive:
            return
        self.alive = False
        for side in SIDES:
            self.world.lost_in_cuts += len(self.queues[side])
            self.queues[side].clear()
            end = self.ends[side]
            if end.sink is not None:
                self.world.clock.callLater(self.notify_delays[side], self._lost, end)

    def _lost(self, end: MemoryL2End) -> None:
        assert end.sink is not None
        end.sink.connection_lost(end, LinkLoss(Cause.DROPPED, "cut by the test"))


@implementer(IPushProducer)
class Peer(Protocol):
    """An application protocol: records what arrives and every violation of the contract.

    With ``producer``, it registers itself as its transport's streaming producer and writes
    only while not paused (as a well-behaved producer does).
    """

    def __init__(self, world: World, producer: bool = False) -> None:
        self.world = world
        self.producer = producer
        self.received = bytearray()
        self.made = self.lost = self.read_closed = self.write_closed = 0
        self.paused = False  # our reading, paused by us
        self.discarded = False  # we called stopProducing: later data may be dropped
        self.write_paused = self.stopped = False  # our writing, paused by the transport

    @property
    def scid(self) -> int:
        return int(self.transport._scid)  # type: ignore[union-attr]

    def connectionMade(self) -> None:
        self.made += 1
        self.world.violation_if(self.made != 1, "connectionMade twice", self)
        if self.producer:
            self.transport.registerProducer(self, True)  # type: ignore[union-attr]

    def pauseProducing(self) -> None:
        self.write_paused = True

    def resumeProducing(self) -> None:
        self.world.violation_if(self.stopped, "producer resumed after stopProducing", self)
        self.write_paused = False

    def stopProducing(self) -> None:
        self.stopped = True

    def dataReceived(self, data: bytes) -> None:
        self.world.violation_if(self.lost > 0, "data after connectionLost", self)
        self.world.violation_if(self.read_closed > 0, "data after readConnectionLost", self)
        self.world.violation_if(self.paused, "data while paused", self)
        self.received += data

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.lost += 1
        self.world.violation_if(self.lost != 1, "connectionLost twice", self)

    @property
    def writable(self) -> bool:
        transport: Any = self.transport
        return self.lost == 0 and not transport.disconnecting and not self.write_paused

    def close(self) -> None:
        if self.writable:
            self.transport.loseConnection()  # type: ignore[union-attr]


@implementer(IHalfCloseableProtocol)
class HalfPeer(Peer):
    """A half-closeable application protocol."""

    def readConnectionLost(self) -> None:
        self.read_closed += 1
        self.world.violation_if(self.read_closed != 1, "readConnectionLost twice", self)

    def writeConnectionLost(self) -> None:
        self.write_closed += 1
        self.world.violation_if(self.write_closed != 1, "writeConnectionLost twice", self)

    def close(self) -> None:
        if self.writable:
            self.transport.loseWriteConnection()  # type: ignore[union-attr]


class PeerFactory(Factory):
    def __init__(self, world: World, side: int, name: str) -> None:
        self.world, self.side, self.name = world, side, name

    def buildProtocol(self, addr: object) -> Peer:
        protocol = _protocol(self.world, self.name)
        self.world.accepted[self.side].append(protocol)
        return protocol


def _protocol(world: World, name: str) -> Peer:
    """The protocol for subchannels named ``name`` (one of NAMES)."""
    return (HalfPeer if name.startswith("half") else Peer)(world, name.endswith("producer"))


class Channel:
    """One subchannel as the test sees it: both protocols and what each side wrote."""

    def __init__(self, opener_side: int, opener: Peer) -> None:
        self.opener_side = opener_side
        self.ends: dict[int, Peer] = {opener_side: opener}
        self.written: dict[int, bytearray] = {0: bytearray(), 1: bytearray()}
        self.writes = 0


class _ImmediateQueue:
    """An eventual queue that calls at once."""

    def eventually(self, f: Any, *args: Any) -> None:
        f(*args)


class HeldConnectors(Manager):
    """A Manager whose connectors are never started: the test joins the generations itself
    (``connect``), through the seam the stock-facing Manager's ``_debug_stall_connector`` uses."""

    def _launch_connector(self, connector: Connector) -> None:
        return None


class World:
    """Two Managers on one Clock, their mailbox, the current link and the applications."""

    def __init__(self, limits: Limits) -> None:
        self.clock = Clock()
        self.violations: list[str] = []
        pipes = MailboxPipe(self.clock), MailboxPipe(self.clock)
        self.managers = tuple(
            HeldConnectors(
                pipe,
                side,
                None,
                self.clock,
                # answers (connect(), listen()) at once: this models exactly-once delivery,
                # not when the application hears (test_multiplexer pins the later turn)
                _ImmediateQueue(),
                Cooperator(scheduler=lambda f: self.clock.callLater(0, f)),
                ["ged"],
                PING_INTERVAL,
                None,
                True,
                None,
                settings=Settings(
                    network=NetworkSettings("127.0.0.1", ("127.0.0.1",)),
                    limits=limits,
                    policy=ReconnectPolicy(peer_timeout=None),
                    # every protocol, half-closeable ones too, must end with one connectionLost
                    semantics=TWISTED,
                ),
            )
            for pipe, side in zip(pipes, (LEADER_SIDE, FOLLOWER_SIDE), strict=True)
        )
        pipes[0].peer, pipes[1].peer = self.managers[1], self.managers[0]
        self.link: MemoryL2Link | None = None
        self.links = 0
        self.lost_in_cuts = 0  # records a cut dropped in flight
        self.channels: list[Channel] = []
        self.accepted: tuple[list[Peer], list[Peer]] = ([], [])
        for manager in self.managers:
            manager.got_dilation_key(b"k" * 32)
            manager.got_wormhole_versions({"can-dilate": ["ged"]})
        self.turns()
        assert self.managers[0].role is LEADER
        self.connect(first=0)
        assert self.link is not None
        self.link.select(1)
        for side, manager in enumerate(self.managers):
            for name in NAMES:
                manager.api.listener_for(name).listen(PeerFactory(self, side, name))
        self.turns()

    def violation_if(self, condition: bool, what: str, protocol: Peer) -> None:
        if condition:
            self.violations.append(f"{what}: {type(protocol).__name__} {protocol.scid}")

    # --- time and the link ---

    def turns(self, limit: int = 10_000) -> None:
        """Run everything due now (ACKs, mailbox, drains, resumed producers, cooperator)."""
        for _ in range(limit):
            now = self.clock.seconds()
            due = [c.getTime() for c in self.clock.getDelayedCalls() if c.getTime() <= now + 1e-6]
            if not due:
                return
            self.clock.advance(max(0.0, min(due) - now))
        raise AssertionError("zero-delay calls never stopped")

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (timers: liveness, the Leader's generation retry, late cut
        notifications), running what becomes due on the way."""
        end = self.clock.seconds() + seconds
        while True:
            self.turns()
            later = [c.getTime() for c in self.clock.getDelayedCalls() if c.getTime() <= end]
            if not later:
                self.clock.advance(end - self.clock.seconds())
                self.turns()
                return
            self.clock.advance(min(later) - self.clock.seconds())

    @property
    def link_up(self) -> bool:
        return self.link is not None and self.link.alive

    def connect(self, first: int) -> bool:
        """If both Managers have a generation waiting, join them; side ``first`` selects now,
        the other when its first record is delivered."""
        pending = [m.connector for m in self.managers]
        if self.link_up or pending[0] is None or pending[1] is None:
            return False
        self.links += 1
        self.link = MemoryL2Link(self, self.links, (pending[0], pending[1]))
        verifyObject(IDilatedConnection, self.link.ends[0])
        self.link.select(first)
        return True

    def reconnect(self, first: int) -> None:
        """Let time pass (in tenths of a second, at most 5 s) until the two Managers have
        started a generation each, then join them."""
        for _ in range(50):
            if self.connect(first) or self.link_up:
                return
            self.sleep(0.1)

    def deliver(self, to: int, count: int) -> list[Record]:
        if self.link is None:
            return []
        return self.link.deliver(to, count)

    def cut(self, notify_delays: tuple[float, float]) -> None:
        if self.link is not None:
            self.link.notify_delays = notify_delays
            self.link.cut()

    def cut_after_ack(self, to: int) -> None:
        """Deliver records to ``to`` up to and including the first ACK, then cut."""
        for _ in range(1000):
            moved = self.deliver(to, 1)
            if not moved or isinstance(moved[0], Ack):
                break
        self.cut((0.0, 0.0))

    # --- the applications ---

    def open(self, side: int, name: str) -> None:
        endpoint = self.managers[side].api.connector_for(name)
        d = endpoint.connect(Factory.forProtocol(lambda: _protocol(self, name)))
        protocols: list[Peer] = []
        d.addCallback(protocols.append)
        assert protocols, "connect() is synchronous once dilated"
        self.channels.append(Channel(side, protocols[0]))

    def end(self, channel: Channel, side: int) -> Peer | None:
        """The protocol of ``channel`` on ``side`` (the acceptor's once its OPEN arrived)."""
        if side not in channel.ends:
            scid = channel.ends[channel.opener_side].scid
            found = [p for p in self.accepted[side] if p.scid == scid]
            if not found:
                return None
            channel.ends[side] = found[0]
        return channel.ends[side]

    def write(self, side: int, index: int, size: int) -> None:
        if not self.channels:
            return
        channel = self.channels[index % len(self.channels)]
        protocol = self.end(channel, side)
        if protocol is None or not protocol.writable:
            return
        channel.writes += 1
        marker = b"<%d:%d:%d>" % (protocol.scid, side, channel.writes)
        data = (marker * (size // len(marker) + 1))[:size]
        protocol.transport.write(data)  # type: ignore[union-attr]
        channel.written[side] += data

    def close(self, side: int, index: int) -> None:
        if self.channels:
            protocol = self.end(self.channels[index % len(self.channels)], side)
            if protocol is not None:
                protocol.close()

    def discard(self, side: int, index: int) -> None:
        """The application wants no more data (``stopProducing``, as a splice does when its
        local connection is gone): what arrives later is dropped, our side closes."""
        if self.channels:
            protocol = self.end(self.channels[index % len(self.channels)], side)
            if protocol is not None and not protocol.lost:
                protocol.discarded = True
                protocol.transport.stopProducing()  # type: ignore[union-attr]

    def pause(self, side: int, index: int, paused: bool) -> None:
        if not self.channels:
            return
        protocol = self.end(self.channels[index % len(self.channels)], side)
        if protocol is None or protocol.lost or protocol.paused == paused:
            return
        protocol.paused = paused
        transport: Any = protocol.transport
        transport.pauseProducing() if paused else transport.resumeProducing()

    def pause_and_fill(self, side: int, index: int, size: int) -> None:
        """Pause reading on ``side``, the peer writes ``size`` bytes, and they are delivered:
        they wait in Inbound (past its bound, the whole connection stops reading)."""
        self.pause(side, index, True)
        self.write(1 - side, index, size)
        self.deliver(side, 5)

    # --- the end ---

    def quiet(self) -> bool:
        muxes = [m.multiplexer for m in self.managers]
        return (
            self.link_up
            and all(e.sink is not None for e in self.link.ends)  # type: ignore[union-attr]
            and not any(self.link.queues)  # type: ignore[union-attr]
            and all(m.unacknowledged_records == 0 for m in muxes)
            and all(m._inbound.buffered_bytes == 0 for m in muxes)
        )

    def settle(self, rounds: int = 2000) -> None:
        """Restore the link and move everything until nothing is left in flight or queued."""
        for index in range(len(self.channels)):
            for side in SIDES:
                self.pause(side, index, False)
        for _ in range(rounds):
            self.turns()
            if not self.link_up:
                if not self.connect(first=0):
                    self.sleep(0.25)  # mailbox round trips, cut notices, the generation retry
                continue
            moved = self.deliver(1, 10_000) + self.deliver(0, 10_000)
            if not moved:
                self.turns()
                if self.quiet():
                    return
                if not any(self.link.queues):  # type: ignore[union-attr]
                    self.sleep(0.25)
        raise AssertionError(f"did not settle: {self.describe()}")

    def protocols(self) -> list[Peer]:
        return [p for c in self.channels for p in c.ends.values()]

    def check_producers_running(self) -> None:
        """Settled (link up, nothing queued or in flight): no open subchannel's producer may
        be left paused."""
        for protocol in self.protocols():
            transport: Any = protocol.transport
            if protocol.producer and not protocol.lost and not transport.disconnecting:
                self.violation_if(protocol.write_paused, "producer left paused", protocol)

    def close_everything(self) -> None:
        for index, channel in enumerate(self.channels):
            for side in SIDES:
                if self.end(channel, side) is not None:
                    self.close(side, index)
        self.settle()

    def describe(self) -> str:
        muxes = [m.multiplexer for m in self.managers]
        return json.dumps(
            {
                "peers": [type(m.status.peer_connection).__name__ for m in self.managers],
                "link_up": self.link_up,
                "queued": [m.unacknowledged_records for m in muxes],
                "buffered": [m._inbound.buffered_bytes for m in muxes],
            }
        )


#: What one operation's first number selects (repeats weight the choice). Operations are
#: drawn as flat integer triples and decoded (:func:`decode`): several times cheaper to generate
#: than nested strategies, so many more examples fit in the same time.
KINDS = (
    *("open",) * 2, *("write",) * 8, "close", *("pause",) * 2, "pause_and_fill",
    *("deliver",) * 6,
    "turn", "sleep", *("cut",) * 2, "cut_after_ack", *("connect",) * 3, "discard",
)  # fmt: skip
WRITE_SIZES = (1, 65536, 70_000, 300_000, 4096, 9000)
SLEEPS = (0.1, 0.6, 1.2, 4.0, 16.0)
NOTIFY_DELAYS = ((0.0, 0.0), (0.0, 0.5), (0.5, 0.0), (2.0, 0.0))


def decode(raw: tuple[int, int, int]) -> tuple[Any, ...]:
    """One operation from three numbers: ``(kind, a, b)`` with ``a``, ``b`` in 0..255."""
    kind, a, b = KINDS[raw[0]], raw[1], raw[2]
    side = a % 2
    if kind == "open":
        return (kind, side, NAMES[b % len(NAMES)])
    if kind == "write":
        size = b * b + 1 if b < 250 else WRITE_SIZES[b - 250]
        return (kind, side, a // 2 % 8, size)
    if kind == "pause_and_fill":
        return (kind, side, a // 2 % 8, b * 100 + 1)
    if kind in ("close", "discard"):
        return (kind, side, a // 2 % 8)
    if kind == "pause":
        return (kind, side, a // 2 % 8, b % 4 != 0)  # mostly pausing: resumed in the end
    if kind == "deliver":
        return (kind, side, b % 4 if a // 2 % 2 else b % 41)
    if kind == "sleep":
        return (kind, SLEEPS[b % len(SLEEPS)])
    if kind == "cut":
        return (kind, NOTIFY_DELAYS[b % len(NOTIFY_DELAYS)])
    if kind in ("cut_after_ack", "connect"):
        return (kind, side, bool(b % 2))
    return (kind,)


raw_op = st.tuples(st.integers(0, len(KINDS) - 1), st.integers(0, 255), st.integers(0, 255))


def _round(ops: list[tuple[int, int, int]], end: int) -> list[tuple[Any, ...]]:
    """``ops`` decoded, then a cut, then (mostly) the reconnection."""
    cut = [("cut", NOTIFY_DELAYS[end % 4])]
    return [*map(decode, ops), *cut] + ([] if end & 4 else [("reconnect", end >> 3 & 1)])


#: a few subchannels first, then rounds of anything ending in a cut
scenarios = st.tuples(
    st.lists(st.tuples(st.just(0), st.integers(0, 255), st.integers(0, 255)), min_size=1,
             max_size=4),
    st.lists(st.tuples(st.lists(raw_op, min_size=2, max_size=16), st.integers(0, 15)), min_size=1,
             max_size=5),
).map(
    lambda parts: [decode(op) for op in parts[0]]
    + [op for ops, end in parts[1] for op in _round(ops, end)]
)  # fmt: skip

SMALL_LIMITS = Limits(
    max_unacked_bytes=256 * 1024,
    max_buffered_inbound_bytes=16 * 1024,
    max_pending_open_bytes=1024 * 1024,
)


def run(test: SynchronousTestCase, ops: list[tuple[Any, ...]]) -> World:
    """Play ``ops``, settle, close every subchannel, settle, and check every invariant."""
    world = World(SMALL_LIMITS)
    for op in ops:
        kind, *args = op
        if kind == "open":
            world.open(*args)
        elif kind == "write":
            world.write(*args)
        elif kind == "close":
            world.close(*args)
        elif kind == "discard":
            world.discard(*args)
        elif kind == "pause_and_fill":
            world.pause_and_fill(*args)
        elif kind == "pause":
            world.pause(*args)
        elif kind == "deliver":
            world.deliver(*args)
        elif kind == "turn":
            world.turns()
        elif kind == "sleep":
            world.sleep(*args)
        elif kind == "cut":
            world.cut(*args)
        elif kind == "cut_after_ack":
            world.cut_after_ack(args[0])
        elif kind == "reconnect":
            world.reconnect(*args)
        elif kind == "connect":
            first, after_turns = args
            if after_turns:
                world.turns()
            world.connect(first)
    world.settle()
    world.check_producers_running()
    world.close_everything()
    check(test, world)
    event(f"generations: {min(world.links, 6)}{'+' if world.links > 6 else ''}")
    event(f"records lost in cuts: {'some' if world.lost_in_cuts else 'none'}")
    event(f"subchannels: {min(len(world.channels), 4)}{'+' if len(world.channels) > 4 else ''}")
    return world


def check(test: SynchronousTestCase, world: World) -> None:
    test.assertEqual(world.violations, [])
    for channel in world.channels:
        ends = [world.end(channel, s) for s in SIDES]
        test.assertNotIn(None, ends, "an OPEN never reached the peer")
        for s in SIDES:
            peer = ends[1 - s]
            assert peer is not None
            got, sent = bytes(peer.received), bytes(channel.written[s])
            if got != sent and not (peer.discarded and sent.startswith(got)):
                test.fail(
                    f"subchannel {peer.scid}, side {s} -> {1 - s}: wrote {len(sent)} bytes, "
                    f"the peer received {len(got)} (common prefix "
                    f"{_common_prefix(got, sent)})"
                )
            test.assertEqual((peer.made, peer.lost), (1, 1))
    opened = [sorted(c.ends[c.opener_side].scid for c in world.channels if c.opener_side == s)
              for s in SIDES]  # fmt: skip
    for s in SIDES:
        test.assertEqual(sorted(p.scid for p in world.accepted[s]), opened[1 - s])
    for manager in world.managers:
        mux = manager.multiplexer
        test.assertEqual(mux.unacknowledged_records, 0)
        test.assertEqual(mux.traffic_stats().queue_bytes, 0)
        test.assertEqual(mux._inbound.buffered_bytes, 0)
        test.assertEqual(mux._inbound.pending_bytes, 0)
        test.assertEqual(mux._inbound._routes, {})


#: examples in the default run (a few seconds) and in the slow class
EXAMPLES = 800
SLOW_EXAMPLES = 3000


def _common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class ExactlyOnceTests(SynchronousTestCase):
    """Random traffic and random link cuts: every byte once, in order, on every subchannel."""

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenarios)
    def test_exactly_once_under_cuts(self, ops: list[tuple[Any, ...]]) -> None:
        """Any sequence of opens, writes, closes, pauses, partial deliveries, cuts (also right
        after an ACK, between the two sides' selections, twice in a row, with late cut
        notices) and time passing: after the link is restored and every subchannel closed,
        each direction received exactly what was written, every OPEN built exactly one peer
        protocol, each protocol connected and lost exactly once with nothing after, and both
        sides' queues are empty."""
        run(self, ops)

    def test_the_fake_link_is_an_l2(self) -> None:
        """The fake provides IDilatedConnection; its send buffer pauses the producer inside
        the write and resumes it on a later turn once the peer read everything."""
        world = World(SMALL_LIMITS)
        assert world.link is not None
        end = world.link.ends[0]
        verifyObject(IDilatedConnection, end)
        world.open(0, "full")
        world.write(0, 0, SEND_BUFFER + 1)
        self.assertTrue(end.producer_paused)
        world.deliver(1, 100)
        self.assertTrue(end.producer_paused)
        world.turns()
        self.assertFalse(end.producer_paused)

    def test_a_cut_loses_what_is_in_flight_and_replay_restores_it(self) -> None:
        """The harness can fail: a cut really drops records in flight (the peer did not get
        them before the replay) and the replay after reconnection delivers them once."""
        world = World(SMALL_LIMITS)
        world.open(0, "half")
        world.write(0, 0, 1000)
        world.deliver(1, 1)  # the OPEN only
        world.cut((0.0, 0.0))
        world.turns()
        self.assertFalse(world.link_up)
        peer = world.end(world.channels[0], 1)
        self.assertIsNotNone(peer)
        assert peer is not None
        self.assertEqual(bytes(peer.received), b"")
        world.settle()
        self.assertEqual(bytes(peer.received), bytes(world.channels[0].written[0]))
        self.assertGreaterEqual(world.links, 2)


@pytest.mark.slow
class ExactlyOnceSlowTests(SynchronousTestCase):
    """The same property with many more examples (about 30 s of CPU)."""

    @settings(
        max_examples=SLOW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(scenarios)
    def test_exactly_once_under_cuts_long(self, ops: list[tuple[Any, ...]]) -> None:
        """As ``ExactlyOnceTests.test_exactly_once_under_cuts``, with SLOW_EXAMPLES examples."""
        run(self, ops)
