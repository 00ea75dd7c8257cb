"""Tests for txdilation.subchannels.subchannel: the SubChannel transport, its machine,
SubchannelAddress."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IHalfCloseableProtocol,
    IPushProducer,
    ITransport,
)
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from txdilation.semantics import STOCK, TWISTED, Semantics
from txdilation.subchannels.subchannel import SubChannel, SubchannelAddress, _WormholeAddress
from txdilation.subchannels.subchannel_lifecycle import subchannel_machine
from txdilation.testing import missing_transitions
from txdilation.testing.fakes import FakePushProducer
from txdilation.wire.dilation_errors import (
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
)


class RecordingSender:
    """The outbound half of L4, as a SubChannel sees it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.producers: dict[object, object] = {}

    def send_data(self, scid: int, data: bytes) -> None:
        self.calls.append(("data", scid, data))

    def send_close(self, scid: int) -> None:
        self.calls.append(("close", scid))

    def register_producer(self, key: object, producer: object, streaming: bool) -> None:
        if key in self.producers:
            raise ValueError("already registered")
        self.producers[key] = producer

    def unregister_producer(self, key: object, *, stop: bool = False) -> None:
        producer = self.producers.pop(key, None)
        if producer is not None and stop:
            producer.stopProducing()  # type: ignore[attr-defined]


class RecordingReceiver:
    """The inbound half of L4, as a SubChannel sees it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def pause_subchannel(self, scid: int) -> None:
        self.calls.append(("pause", scid))

    def resume_subchannel(self, scid: int) -> None:
        self.calls.append(("resume", scid))

    def discard_subchannel(self, scid: int) -> None:
        self.calls.append(("discard", scid))

    def subchannel_closed(self, scid: int, *, expect_close: bool) -> None:
        self.calls.append(("closed", scid, expect_close))


class RecordingProtocol(Protocol):
    """Records connectionMade / dataReceived / connectionLost; can be told to raise."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.reasons: list[Failure] = []
        self.raise_in: set[str] = set()

    def _maybe_raise(self, where: str) -> None:
        if where in self.raise_in:
            self.raise_in.discard(where)
            raise ZeroDivisionError(where)

    def connectionMade(self) -> None:
        self.events.append("made")
        self._maybe_raise("made")

    def dataReceived(self, data: bytes) -> None:
        self.events.append(data)
        self._maybe_raise("data")

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:  # noqa: B008
        self.events.append("lost")
        self.reasons.append(reason)
        self._maybe_raise("lost")


@implementer(IHalfCloseableProtocol)
class HalfProtocol(RecordingProtocol):
    """A half-closeable protocol; ``on_read_lost`` runs inside readConnectionLost."""

    on_read_lost = None

    def readConnectionLost(self) -> None:
        self.events.append("read_lost")
        if self.on_read_lost is not None:
            self.on_read_lost()

    def writeConnectionLost(self) -> None:
        self.events.append("write_lost")


class SubchannelTestsMixin:
    #: the semantics ``make()`` uses unless told (test classes pinning Twisted's transport
    #: behaviour set TWISTED; StockSemanticsTests pins stock's)
    semantics: Semantics = TWISTED

    def make(
        self,
        protocol: RecordingProtocol | None = None,
        scid: int = 1,
        semantics: Semantics | None = None,
    ) -> SubChannel:
        self.sender = RecordingSender()
        self.receiver = RecordingReceiver()
        self.host = _WormholeAddress()
        self.protocol = protocol if protocol is not None else RecordingProtocol()
        self.log_events: list[dict] = []
        sc = SubChannel(
            scid,
            self.protocol,
            peer=SubchannelAddress("proto"),
            host=self.host,
            sender=self.sender,
            receiver=self.receiver,
            manager="the manager",
            log=Logger(observer=self.log_events.append),
            semantics=self.semantics if semantics is None else semantics,
        )
        sc.start()
        return sc

    def logged_failures(self, kind: type[Exception]) -> list[Failure]:
        failures = [e["log_failure"] for e in self.log_events if "log_failure" in e]
        return [f for f in failures if f.check(kind)]


class AddressTests(SynchronousTestCase):
    """SubchannelAddress as stock defines it (field ``subprotocol``, value equality, frozen)."""

    def test_address(self) -> None:
        """An IAddress with value equality, immutable, insisting on a str."""
        a = SubchannelAddress("x")
        verifyObject(IAddress, a)
        self.assertEqual(a, SubchannelAddress("x"))
        self.assertNotEqual(a, SubchannelAddress("y"))
        self.assertEqual(a.subprotocol, "x")
        self.assertRaises(AttributeError, setattr, a, "subprotocol", "y")
        self.assertEqual(hash(a), hash(SubchannelAddress("x")))
        self.assertEqual(repr(a), "SubchannelAddress(subprotocol='x')")
        self.assertRaises(TypeError, SubchannelAddress, b"x")
        verifyObject(IAddress, _WormholeAddress())


class TransportTests(SubchannelTestsMixin, SynchronousTestCase):
    """The ITransport / IPushProducer / IConsumer surface (TWISTED semantics where it
    matters; StockSemanticsTests has stock's)."""

    def test_interfaces_and_addresses(self) -> None:
        """SubChannel provides its three interfaces; getPeer/getHost; _manager is kept."""
        sc = self.make()
        verifyObject(ITransport, sc)
        verifyObject(IPushProducer, sc)
        verifyObject(IConsumer, sc)
        self.assertEqual(sc.getPeer(), SubchannelAddress("proto"))
        self.assertIs(sc.getHost(), self.host)
        self.assertEqual(sc._manager, "the manager")
        self.assertIs(self.protocol.transport, sc)
        self.assertEqual(self.protocol.events, ["made"])

    def test_one_write_one_record(self) -> None:
        """write() is one DATA; writeSequence joins into one; empty writes send nothing."""
        sc = self.make(scid=5)
        sc.write(b"abc")
        sc.write(b"")
        sc.writeSequence([b"d", b"e", b"f"])
        self.assertEqual(self.sender.calls, [("data", 5, b"abc"), ("data", 5, b"def")])
        self.assertRaises(TypeError, sc.write, "text")

    def test_producer_calls_route_to_inbound(self) -> None:
        """pause/resumeProducing pause and resume our delivery of inbound data."""
        sc = self.make()
        sc.pauseProducing()
        sc.resumeProducing()
        self.assertEqual(self.receiver.calls, [("pause", 1), ("resume", 1)])

    def test_stop_producing_discards_and_closes(self) -> None:
        """stopProducing: inbound data is discarded and our side closes (CLOSE sent)."""
        sc = self.make()
        sc.stopProducing()
        sc.stopProducing()
        self.assertEqual(self.receiver.calls, [("discard", 1), ("discard", 1)])
        self.assertEqual(self.sender.calls, [("close", 1)])

    def test_register_producer(self) -> None:
        """registerProducer goes to L4; closing stops it; after close it is stopped at once."""
        sc = self.make()
        p = FakePushProducer()
        sc.registerProducer(p, True)
        self.assertIs(self.sender.producers[1], p)
        sc.unregisterProducer()
        sc.unregisterProducer()
        sc.registerProducer(p, True)
        sc.remote_close()
        self.assertTrue(p.stopped)
        late = FakePushProducer()
        sc.registerProducer(late, True)
        self.assertTrue(late.stopped)
        self.assertEqual(self.sender.producers, {})


class FullCloseTests(SubchannelTestsMixin, SynchronousTestCase):
    """Protocols that are not half-closeable (TWISTED semantics)."""

    def test_close_by_us(self) -> None:
        """loseConnection sends CLOSE once; writes then raise; DATA is still delivered (spec);
        the peer's CLOSE brings connectionLost(ConnectionDone), exactly once."""
        sc = self.make()
        sc.loseConnection()
        sc.loseConnection()  # harmless
        self.assertEqual(self.sender.calls, [("close", 1)])
        self.assertRaises(AlreadyClosedError, sc.write, b"x")
        sc.remote_data(b"still")
        sc.remote_close()
        sc.loseConnection()
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", b"still", "lost"])
        self.assertTrue(self.protocol.reasons[0].check(ConnectionDone))
        self.assertEqual(self.receiver.calls, [("closed", 1, False)])
        self.assertEqual(self.sender.calls, [("close", 1)])
        self.assertRaises(AlreadyClosedError, sc.write, b"x")

    def test_close_by_peer(self) -> None:
        """The peer's CLOSE is answered with CLOSE, then connectionLost."""
        sc = self.make()
        sc.remote_close()
        self.assertEqual(self.sender.calls, [("close", 1)])
        self.assertEqual(self.protocol.events, ["made", "lost"])
        sc.loseConnection()
        self.assertEqual(self.sender.calls, [("close", 1)])

    def test_half_close_is_refused(self) -> None:
        """loseWriteConnection on a full-close protocol raises (stock's error)."""
        sc = self.make()
        self.assertRaises(HalfCloseUsedOnNonHalfCloseable, sc.loseWriteConnection)
        self.assertEqual(self.sender.calls, [])

    def test_abandon(self) -> None:
        """The wormhole closing delivers connectionLost(reason) once and sends nothing."""
        sc = self.make()
        reason = Failure(ConnectionDone("wormhole closed"))
        sc.abandon(reason)
        sc.abandon(reason)
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", "lost"])
        self.assertIs(self.protocol.reasons[0], reason)
        self.assertEqual(self.sender.calls, [])

    def test_protocol_exception_closes_only_this_subchannel(self) -> None:
        """dataReceived raising is logged; we send CLOSE, deliver connectionLost with that
        failure and expect the peer's CLOSE. Nothing propagates to the caller."""
        sc = self.make()
        self.protocol.raise_in.add("data")
        sc.remote_data(b"boom")
        self.assertEqual(len(self.logged_failures(ZeroDivisionError)), 1)
        self.assertEqual(self.sender.calls, [("close", 1)])
        self.assertEqual(self.protocol.events, ["made", b"boom", "lost"])
        self.assertTrue(self.protocol.reasons[0].check(ZeroDivisionError))
        self.assertEqual(self.receiver.calls, [("closed", 1, True)])

    def test_exception_in_connection_made_or_lost(self) -> None:
        """connectionMade raising closes the subchannel; connectionLost raising is logged."""
        protocol = RecordingProtocol()
        protocol.raise_in.update({"made", "lost"})
        self.make(protocol)
        self.assertEqual(protocol.events, ["made", "lost"])
        self.assertEqual(len(self.logged_failures(ZeroDivisionError)), 2)
        self.assertEqual(self.sender.calls, [("close", 1)])


class HalfCloseTests(SubchannelTestsMixin, SynchronousTestCase):
    """IHalfCloseableProtocol support (TWISTED semantics)."""

    def test_peer_closes_first(self) -> None:
        """Peer CLOSE: readConnectionLost, we may still write; loseWriteConnection then sends
        CLOSE, writeConnectionLost and connectionLost."""
        sc = self.make(HalfProtocol())
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", "read_lost"])
        self.assertEqual(self.sender.calls, [])
        sc.write(b"reply")
        sc.remote_data(b"late")  # after the peer's CLOSE: dropped, logged
        self.assertEqual(len(self.log_events), 1)
        self.assertRaises(NormalCloseUsedOnHalfCloseable, sc.loseConnection)
        sc.loseWriteConnection()
        self.assertEqual(self.sender.calls, [("data", 1, b"reply"), ("close", 1)])
        self.assertEqual(self.protocol.events, ["made", "read_lost", "write_lost", "lost"])
        sc.loseWriteConnection()
        sc.loseConnection()

    def test_we_close_first(self) -> None:
        """loseWriteConnection: CLOSE and writeConnectionLost; writes raise, reads go on;
        the peer's CLOSE then delivers readConnectionLost and connectionLost."""
        sc = self.make(HalfProtocol())
        sc.loseWriteConnection()
        sc.loseWriteConnection()
        sc.loseConnection()  # our write side is closed already: a no-op
        self.assertEqual(self.sender.calls, [("close", 1)])
        self.assertRaises(AlreadyClosedError, sc.write, b"x")
        sc.remote_data(b"more")
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", "write_lost", b"more", "read_lost", "lost"])
        self.assertEqual(self.receiver.calls, [("closed", 1, False)])

    def test_reentrant_half_close_from_read_connection_lost(self) -> None:
        """A protocol answering readConnectionLost with loseWriteConnection ends closed."""
        protocol = HalfProtocol()
        sc = self.make(protocol)
        protocol.on_read_lost = sc.loseWriteConnection
        sc.remote_close()
        self.assertEqual(protocol.events, ["made", "read_lost", "write_lost", "lost"])
        self.assertEqual(self.sender.calls, [("close", 1)])

    def test_normal_close_refused_while_writable(self) -> None:
        """loseConnection on a half-closeable protocol raises while it could still write."""
        sc = self.make(HalfProtocol())
        self.assertRaises(NormalCloseUsedOnHalfCloseable, sc.loseConnection)
        self.assertEqual(self.sender.calls, [])


class MachineTests(SubchannelTestsMixin, SynchronousTestCase):
    """The lifecycle machine: complete, and random calls never break its promises."""

    def test_every_state_input_pair_is_defined(self) -> None:
        """No (state, input) pair can raise NoTransition."""
        self.assertEqual(missing_transitions(subchannel_machine), [])

    @settings(max_examples=400, deadline=None)
    @given(
        st.sampled_from([STOCK, TWISTED]),
        st.booleans(),
        st.lists(
            st.sampled_from(
                [
                    "write",
                    "write_empty",
                    "lose",
                    "lose_write",
                    "remote_data",
                    "remote_close",
                    "abandon",
                    "pause",
                    "resume",
                    "stop_producing",
                    "raise_next",
                ]
            ),
            max_size=30,
        ),
    )
    def test_random_calls(self, semantics: Semantics, half: bool, ops: list[str]) -> None:
        """With either semantics: only the documented exceptions escape; connectionLost
        comes at most once and nothing is delivered after it; at most one CLOSE is sent and
        no DATA after it; read and write halves are each reported lost at most once."""
        protocol = HalfProtocol() if half else RecordingProtocol()
        sc = self.make(protocol, semantics=semantics)
        documented = (
            AlreadyClosedError,
            NormalCloseUsedOnHalfCloseable,
            HalfCloseUsedOnNonHalfCloseable,
        )
        for op in ops:
            try:
                match op:
                    case "write":
                        sc.write(b"w")
                    case "write_empty":
                        sc.write(b"")
                    case "lose":
                        sc.loseConnection()
                    case "lose_write":
                        sc.loseWriteConnection()
                    case "remote_data":
                        sc.remote_data(b"r")
                    case "remote_close":
                        sc.remote_close()
                    case "abandon":
                        sc.abandon(Failure(ConnectionDone()))
                    case "pause":
                        sc.pauseProducing()
                    case "resume":
                        sc.resumeProducing()
                    case "stop_producing":
                        sc.stopProducing()
                    case "raise_next":
                        protocol.raise_in.add("data")
            except documented:
                pass
        events = protocol.events
        self.assertLessEqual(events.count("lost"), 1)
        if "lost" in events:
            self.assertEqual(events[-1], "lost")
        self.assertLessEqual(events.count("read_lost"), 1)
        self.assertLessEqual(events.count("write_lost"), 1)
        closes = [i for i, call in enumerate(self.sender.calls) if call[0] == "close"]
        self.assertLessEqual(len(closes), 1)
        if closes:
            self.assertEqual(closes[0], len(self.sender.calls) - 1)


class StockSemanticsTests(SubchannelTestsMixin, SynchronousTestCase):
    """What stock shows an application (the drop-in's default, STOCK semantics), where the
    TWISTED semantics pinned above differ. Each test names the stock behaviour it keeps."""

    semantics = STOCK

    def test_empty_write_sends_an_empty_record(self) -> None:
        """write(b"") sends an empty DATA record (stock), delivered as dataReceived(b"")."""
        sc = self.make(scid=5)
        sc.write(b"abc")
        sc.write(b"")
        self.assertEqual(self.sender.calls, [("data", 5, b"abc"), ("data", 5, b"")])

    def test_connection_lost_reason_is_a_bare_exception(self) -> None:
        """connectionLost gets ConnectionDone() itself, not a Failure (fowl tests
        isinstance(reason, ConnectionDone))."""
        sc = self.make()
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", "lost"])
        reason = self.protocol.reasons[0]
        self.assertIsInstance(reason, ConnectionDone)
        self.assertEqual(str(reason), str(ConnectionDone()))

    def test_repeated_close_raises_until_closed(self) -> None:
        """A second loseConnection before the peer answered raises AlreadyClosedError;
        once closed, loseConnection is a no-op."""
        sc = self.make()
        sc.loseConnection()
        self.assertRaises(AlreadyClosedError, sc.loseConnection)
        sc.remote_close()
        sc.loseConnection()
        self.assertEqual(self.sender.calls, [("close", 1)])

    def test_half_close_repeated_raises_and_never_connection_lost(self) -> None:
        """loseWriteConnection twice raises AlreadyClosedError; loseConnection always raises
        NormalCloseUsedOnHalfCloseable; both directions closed deliver no connectionLost."""
        sc = self.make(HalfProtocol())
        sc.loseWriteConnection()
        self.assertRaises(AlreadyClosedError, sc.loseWriteConnection)
        self.assertRaises(NormalCloseUsedOnHalfCloseable, sc.loseConnection)
        sc.remote_close()
        self.assertEqual(self.protocol.events, ["made", "write_lost", "read_lost"])
        self.assertRaises(NormalCloseUsedOnHalfCloseable, sc.loseConnection)
        sc.loseWriteConnection()  # closed: a no-op
        self.assertEqual(self.receiver.calls, [("closed", 1, False)])

    def test_abandon_delivers_nothing(self) -> None:
        """The wormhole closing delivers no connectionLost (stock), but forgets the route."""
        sc = self.make()
        sc.abandon(Failure(ConnectionDone("wormhole closed")))
        self.assertEqual(self.protocol.events, ["made"])
        self.assertEqual(self.receiver.calls, [("closed", 1, False)])
        self.assertEqual(self.sender.calls, [])

    def test_stop_producing_only_resumes(self) -> None:
        """stopProducing un-pauses the subchannel and closes nothing (stock)."""
        sc = self.make()
        sc.pauseProducing()
        sc.stopProducing()
        self.assertEqual(self.receiver.calls, [("pause", 1), ("resume", 1)])
        self.assertEqual(self.sender.calls, [])

    def test_producer_not_stopped(self) -> None:
        """Closing unregisters the producer without stopProducing; one registered after the
        close is ignored (stock registers it nowhere useful and never stops it)."""
        sc = self.make()
        p = FakePushProducer()
        sc.registerProducer(p, True)
        sc.remote_close()
        self.assertFalse(p.stopped)
        self.assertEqual(self.sender.producers, {})
        late = FakePushProducer()
        sc.registerProducer(late, True)
        self.assertFalse(late.stopped)
        self.assertEqual(self.sender.producers, {})

    def test_protocol_exception_reason_is_the_exception(self) -> None:
        """dataReceived raising closes only this subchannel (always), and connectionLost gets
        the exception itself."""
        sc = self.make()
        self.protocol.raise_in.add("data")
        sc.remote_data(b"boom")
        self.assertIsInstance(self.protocol.reasons[0], ZeroDivisionError)
        self.assertEqual(self.sender.calls, [("close", 1)])
