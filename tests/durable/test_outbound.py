"""Tests for txdilation.durable.outbound: seqnums, the durable queue, replay, producers, memory
bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IPullProducer, IPushProducer
from twisted.internet.task import Clock, Cooperator
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txdilation.durable.outbound import RECORD_OVERHEAD, Outbound, SendQueue
from txdilation.durable.outbound_lifecycle import outbound_machine
from txdilation.durable.window import DEFAULT_IN_FLIGHT_FLOOR, GAIN
from txdilation.testing import missing_transitions
from txdilation.testing.fakes import FakeDilatedConnection, FakePullProducer, FakePushProducer
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.records import Close, Data, Open, Ping, Pong


def seqnums(records: list) -> list[int]:
    return [r.seqnum for r in records]


def one_step_cooperator(clock: Clock) -> Cooperator:
    """A cooperator that runs exactly one task step per ``clock.advance(1)``."""
    return Cooperator(
        terminationPredicateFactory=lambda: lambda: True,
        scheduler=lambda step: clock.callLater(1, step),
    )


class SendQueueTests(SynchronousTestCase):
    """The I/O-free bookkeeping behind Outbound."""

    def test_seqnums_count_from_zero(self) -> None:
        """allocate() hands out 0, 1, 2, ... and never repeats."""
        q = SendQueue()
        self.assertEqual([q.allocate() for _ in range(4)], [0, 1, 2, 3])

    def test_ack_is_cumulative_and_tolerant(self) -> None:
        """ack(n) retires every seqnum <= n; stale or future ACKs do no harm."""
        q = SendQueue()
        for _ in range(5):
            q.add(Close(q.allocate(), 1), 9, sent=True)
        q.ack(2)
        self.assertEqual((len(q), q.queued_bytes), (2, 18))
        q.ack(1)  # already retired
        self.assertEqual(len(q), 2)
        q.ack(100)  # beyond anything sent
        self.assertEqual((len(q), q.queued_bytes), (0, 0))

    def test_rewind_makes_everything_unsent_in_order(self) -> None:
        """After rewind(), take_unsent() returns every queued record in seqnum order."""
        q = SendQueue()
        q.add(Close(q.allocate(), 1), 9, sent=True)
        q.add(Close(q.allocate(), 1), 9, sent=True)
        q.add(Close(q.allocate(), 1), 9, sent=False)
        q.rewind()
        self.assertEqual(seqnums(q.take_unsent()), [0, 1, 2])
        self.assertFalse(q.has_unsent)

    def test_bytes_in_flight_follow_writes_acks_and_rewinds(self) -> None:
        """sent_bytes counts what was written to the current connection and not acknowledged:
        it grows with sent records and take_unsent, falls with ACKs (not for unsent records),
        and is 0 after rewind (a new connection); queued_bytes counts sent and unsent."""
        q = SendQueue()
        q.add(Close(q.allocate(), 1), 10, sent=True)
        q.add(Close(q.allocate(), 1), 20, sent=False)
        q.add(Close(q.allocate(), 1), 30, sent=False)
        self.assertEqual((q.sent_bytes, q.queued_bytes), (10, 60))
        self.assertEqual(len(q.take_unsent(limit=20)), 1)
        self.assertEqual((q.sent_bytes, q.largest_taken), (30, 20))
        self.assertEqual(q.ack(0), 10)
        self.assertEqual((q.sent_bytes, q.queued_bytes), (20, 50))
        q.rewind()
        self.assertEqual((q.sent_bytes, q.queued_bytes), (0, 50))
        self.assertEqual(q.ack(2), 50)  # an ACK may cover records not (re)sent yet
        self.assertEqual((q.sent_bytes, q.queued_bytes, len(q)), (0, 0, 0))


class OutboundTestsMixin:
    def make(
        self, max_unacked_bytes: int = 2**20, in_flight_floor: int = DEFAULT_IN_FLIGHT_FLOOR
    ) -> Outbound:
        self.clock = Clock()
        return Outbound(
            cooperator=one_step_cooperator(self.clock),
            clock=self.clock,
            max_unacked_bytes=max_unacked_bytes,
            in_flight_floor=in_flight_floor,
        )


class SendingTests(OutboundTestsMixin, SynchronousTestCase):
    """Sending, queueing and replaying records."""

    def test_fake_connection_provides_the_interface(self) -> None:
        """The shared fake really provides IDilatedConnection; Outbound is an IPushProducer."""
        verifyObject(IDilatedConnection, FakeDilatedConnection())
        verifyObject(IPushProducer, self.make())

    def test_sends_at_once_when_connected(self) -> None:
        """While connected and unpaused each record is written at once, numbered from 0."""
        out = self.make()
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        self.assertIs(conn.producer, out)
        self.assertTrue(conn.streaming)
        out.send_open(1, "proto")
        out.send_data(1, b"abc")
        out.send_close(1)
        self.assertEqual(conn.sent, [Open(0, 1, "proto"), Data(1, 1, b"abc"), Close(2, 1)])
        self.assertEqual(out.queued_bytes, 3 * RECORD_OVERHEAD + len("proto") + 3)

    def test_queued_before_first_connection_go_out_in_one_call(self) -> None:
        """Records written before any connection are replayed in order in one send_records."""
        out = self.make()
        for i in range(3):
            out.send_data(1, b"%d" % i)
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        self.assertEqual(len(conn.send_calls), 1)
        self.assertEqual(seqnums(conn.send_calls[0]), [0, 1, 2])

    def test_replay_after_loss(self) -> None:
        """A new connection gets every unacked record (old and written while disconnected)
        exactly once, in order, in one call, before newer records; acked ones are not resent."""
        out = self.make()
        first = FakeDilatedConnection()
        out.connection_made(first)
        for i in range(4):
            out.send_data(1, b"%d" % i)
        out.handle_ack(1)
        out.connection_lost()
        self.assertIsNone(first.producer)
        out.send_data(1, b"offline")
        second = FakeDilatedConnection()
        out.connection_made(second)
        out.send_data(1, b"after")
        self.assertEqual(seqnums(second.send_calls[0]), [2, 3, 4])
        self.assertEqual(seqnums(second.sent), [2, 3, 4, 5])
        self.assertEqual(second.sent[2], Data(4, 1, b"offline"))
        self.assertEqual(len(first.sent), 4)

    def test_seqnums_never_reset(self) -> None:
        """The counter survives connections: the next record after a reconnect continues it."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())
        out.send_close(1)
        out.handle_ack(0)
        out.connection_lost()
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        out.send_close(3)
        self.assertEqual(conn.sent, [Close(1, 3)])

    def test_paused_transport_queues_then_flushes_in_order(self) -> None:
        """While the transport paused us nothing is written; resume flushes in order first."""
        out = self.make()
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        out.send_data(1, b"a")
        out.pauseProducing()
        out.send_data(1, b"b")
        out.send_data(1, b"c")
        self.assertEqual(len(conn.sent), 1)
        out.resumeProducing()
        out.send_data(1, b"d")
        self.assertEqual(seqnums(conn.sent), [0, 1, 2, 3])
        self.assertEqual(seqnums(conn.send_calls[1]), [1, 2])

    def test_one_pong_per_pause(self) -> None:
        """PONGs may go out freely while the transport takes more, but only once per pause
        while it has paused us; a resume or a new connection allows one again."""
        out = self.make()
        conn = FakeDilatedConnection()
        out.connection_made(conn)

        def pongs(pings: int) -> int:
            before = len(conn.of_type(Pong))
            for i in range(pings):
                out.answer_ping(conn, Ping(i.to_bytes(4, "big")))
            return len(conn.of_type(Pong)) - before

        self.assertEqual(pongs(3), 3)
        self.assertEqual(conn.of_type(Pong)[-1], Pong(b"\x00\x00\x00\x02"))
        out.pauseProducing()
        self.assertEqual(pongs(1000), 1)
        out.resumeProducing()
        self.assertEqual(pongs(1), 1)
        out.pauseProducing()
        self.assertEqual(pongs(2), 1)
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        self.assertEqual(pongs(1), 1)

    def test_second_connection_replaces_first(self) -> None:
        """connection_made without connection_lost lets go of the old connection and replays."""
        out = self.make()
        first = FakeDilatedConnection()
        out.connection_made(first)
        out.send_close(1)
        second = FakeDilatedConnection()
        out.connection_made(second)
        self.assertIsNone(first.producer)
        self.assertIs(second.producer, out)
        self.assertEqual(second.sent, [Close(0, 1)])

    def test_stop_drops_everything(self) -> None:
        """After stop() nothing is sent or queued, repeats are harmless, ACKs too."""
        out = self.make()
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        out.send_close(1)
        out.stop()
        out.stop()
        out.send_close(3)
        out.handle_ack(5)
        out.connection_made(FakeDilatedConnection())
        self.assertEqual(conn.sent, [Close(0, 1)])
        self.assertIsNone(conn.producer)
        self.assertEqual((out.queued_records, out.queued_bytes), (0, 0))


class WaitingTests(OutboundTestsMixin, SynchronousTestCase):
    """when_acknowledged() and when_retired(): waiters through wire.waiting."""

    def test_when_acknowledged_fires_once_the_queue_is_empty(self) -> None:
        """It fires at once with nothing queued; otherwise only once an ACK retired every
        record, those queued after the ask included; stop() drops it unfired."""
        out = self.make()
        self.successResultOf(out.when_acknowledged())
        out.connection_made(FakeDilatedConnection())
        out.send_open(1, "proto")
        waiting = out.when_acknowledged()
        out.send_data(1, b"x")
        out.handle_ack(0)
        self.assertNoResult(waiting)
        out.handle_ack(1)
        self.assertIsNone(self.successResultOf(waiting))
        out.send_close(1)
        dropped = out.when_acknowledged()
        out.stop()
        out.handle_ack(2)
        self.assertNoResult(dropped)

    def test_waiters_can_be_cancelled(self) -> None:
        """A cancelled when_acknowledged() or when_retired() fails with CancelledError and is
        forgotten: the ACK that would have fired it fires only the others."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())
        out.send_open(1, "proto")
        close = out.send_close(1)
        acknowledged, retired = out.when_acknowledged(), out.when_retired(close)
        other_acknowledged, other_retired = out.when_acknowledged(), out.when_retired(close)
        acknowledged.cancel()
        retired.cancel()
        self.failureResultOf(acknowledged, CancelledError)
        self.failureResultOf(retired, CancelledError)
        out.handle_ack(close)
        self.assertIsNone(self.successResultOf(other_acknowledged))
        self.assertIsNone(self.successResultOf(other_retired))


class ProducerTests(OutboundTestsMixin, SynchronousTestCase):
    """Registered subchannel producers follow the connection, fairly, within the bound."""

    def test_fake_producers_provide_their_interfaces(self) -> None:
        """The shared producer fakes really provide IPushProducer / IPullProducer."""
        verifyObject(IPushProducer, FakePushProducer())
        verifyObject(IPullProducer, FakePullProducer())

    def test_registered_while_disconnected_starts_paused(self) -> None:
        """A push producer registered without a connection is paused at once, resumed later."""
        out = self.make()
        p = FakePushProducer()
        out.register_producer(1, p, True)
        self.assertTrue(p.paused)
        out.connection_made(FakeDilatedConnection())
        self.assertFalse(p.paused)

    def test_producers_follow_the_transport(self) -> None:
        """Transport pause/resume pauses/resumes every push producer; connection loss pauses."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())
        a, b = FakePushProducer(), FakePushProducer()
        out.register_producer(1, a, True)
        out.register_producer(3, b, True)
        self.assertEqual((a.calls, b.calls), ([], []))
        out.pauseProducing()
        out.pauseProducing()  # a repeat is harmless and not passed on
        self.assertEqual((a.calls, b.calls), (["pause"], ["pause"]))
        out.resumeProducing()
        self.assertEqual((a.calls, b.calls), (["pause", "resume"], ["pause", "resume"]))
        out.stopProducing()
        out.connection_lost()
        self.assertTrue(a.paused and b.paused)

    def test_replay_that_fills_the_transport_keeps_producers_paused(self) -> None:
        """A transport that pauses us while we replay (its buffer filled) is obeyed at once:
        producers are not resumed and later records wait until it resumes us."""
        out = self.make()
        out.send_data(1, b"queued while disconnected")
        p = FakePushProducer()
        out.register_producer(1, p, True)
        conn = FakeDilatedConnection()
        conn.send_records = lambda records: (  # type: ignore[method-assign]
            FakeDilatedConnection.send_records(conn, records),
            conn.producer.pauseProducing(),
        )
        out.connection_made(conn)
        self.assertEqual(p.calls, ["pause"])
        out.send_data(1, b"later")
        self.assertEqual(len(conn.sent), 1)

    def test_push_producers_take_turns(self) -> None:
        """When each producer's turn fills the transport, the next resume starts with the next
        producer (round-robin), not always the first."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())
        order: list[str] = []

        def writer(name: str) -> FakePushProducer:
            def write() -> None:
                order.append(name)
                out.send_data(1, name.encode())
                out.pauseProducing()  # the write filled the transport's buffer

            return FakePushProducer(write)

        for scid, name in ((1, "a"), (3, "b"), (5, "c")):
            out.register_producer(scid, writer(name), True)
        out.pauseProducing()
        for _ in range(4):
            out.resumeProducing()
        self.assertEqual(order, ["a", "b", "c", "a"])

    def test_pull_producers_take_turns(self) -> None:
        """Pull producers are driven by the cooperator, alternating, and only while we may."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())
        order: list[str] = []
        a = FakePullProducer(lambda: order.append("a"))
        b = FakePullProducer(lambda: order.append("b"))
        out.register_producer(1, a, False)
        out.register_producer(3, b, False)
        for _ in range(4):
            self.clock.advance(1)
        self.assertEqual(order, ["a", "b", "a", "b"])
        out.pauseProducing()
        for _ in range(4):
            self.clock.advance(1)
        self.assertEqual(len(order), 4)
        out.resumeProducing()
        self.clock.advance(1)
        self.assertEqual(len(order), 5)
        out.unregister_producer(1, stop=True)
        self.assertTrue(a.stopped)

    def test_failing_pull_producer_is_dropped(self) -> None:
        """A pull producer that raises is logged and unregistered; the others go on."""
        out = self.make()
        out.connection_made(FakeDilatedConnection())

        def boom() -> None:
            raise ZeroDivisionError()

        out.register_producer(1, FakePullProducer(boom), False)
        good = FakePullProducer()
        out.register_producer(3, good, False)
        for _ in range(4):
            self.clock.advance(1)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)
        self.assertEqual(good.resumed, 3)
        out.register_producer(1, FakePullProducer(), False)  # the slot is free again

    def test_register_twice_raises_unregister_is_tolerant(self) -> None:
        """A second producer for one subchannel is a ValueError; unregistering none is fine."""
        out = self.make()
        out.register_producer(1, FakePushProducer(), True)
        self.assertRaises(ValueError, out.register_producer, 1, FakePushProducer(), True)
        out.unregister_producer(7)
        out.unregister_producer(1)
        out.unregister_producer(1)

    def test_memory_bound_pauses_producers_until_half(self) -> None:
        """Producerless writes are never blocked, but once queued bytes pass the bound every
        producer is paused until ACKs bring the queue down to half of it."""
        out = self.make(max_unacked_bytes=1000)
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        p = FakePushProducer()
        out.register_producer(1, p, True)
        for _ in range(4):
            out.send_data(3, b"x" * (300 - RECORD_OVERHEAD))  # 1200 bytes queued
        self.assertEqual(len(conn.sent), 4)
        self.assertTrue(p.paused)
        out.resumeProducing()  # the transport is fine, but we are over budget
        self.assertTrue(p.paused)
        out.handle_ack(1)  # 600 left: still above half
        self.assertTrue(p.paused)
        out.handle_ack(2)  # 300 left
        self.assertFalse(p.paused)
        self.assertEqual(out.queued_bytes, 300)

    def test_bound_counts_records_queued_while_disconnected(self) -> None:
        """A producer registered over budget starts paused even once connected."""
        out = self.make(max_unacked_bytes=100)
        out.send_data(1, b"y" * 200)
        out.connection_made(FakeDilatedConnection())
        p = FakePushProducer()
        out.register_producer(3, p, True)
        self.assertTrue(p.paused)
        out.handle_ack(0)
        self.assertFalse(p.paused)


class InFlightTests(OutboundTestsMixin, SynchronousTestCase):
    """Producers wait while the connection's in-flight limit is reached."""

    RECORD = 100 - RECORD_OVERHEAD  # payload of a 100-byte record

    def test_producers_wait_for_the_limit_to_drain_by_a_quarter(self) -> None:
        """With 1000 bytes allowed in flight, producers are paused once 1000 bytes were
        written and not acknowledged, stay paused while more than 750 are, and resume after;
        records written meanwhile by writers without producers go out at once, in order."""
        out = self.make(max_unacked_bytes=10**6, in_flight_floor=1000)
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        p = FakePushProducer()
        out.register_producer(1, p, True)
        for _ in range(9):
            out.send_data(1, b"x" * self.RECORD)
        self.assertFalse(p.paused)
        out.send_data(1, b"x" * self.RECORD)  # 1000 in flight
        self.assertTrue(p.paused)
        out.send_data(3, b"interactive")
        self.assertEqual(seqnums(conn.sent), list(range(11)))
        out.handle_ack(1)  # 811 in flight: more than three quarters
        self.assertTrue(p.paused)
        out.handle_ack(2)  # 711
        self.assertFalse(p.paused)

    def test_room_for_two_large_writes(self) -> None:
        """Writes larger than half the limit still get two in flight (one arrives while the
        peer processes the other), not one at a time."""
        out = self.make(max_unacked_bytes=10**6, in_flight_floor=1000)
        out.connection_made(FakeDilatedConnection())
        p = FakePushProducer()
        out.register_producer(1, p, True)
        out.send_data(1, b"x" * 5000)
        self.assertFalse(p.paused)
        out.send_data(1, b"x" * 5000)
        self.assertTrue(p.paused)
        out.handle_ack(0)
        self.assertFalse(p.paused)

    def test_limit_follows_the_acks(self) -> None:
        """The first record written is a sample's marker: its ACK, 0.1 s later on the clock,
        sets the round trip and the rate (bytes acknowledged over that time), and so the
        limit; a new connection starts again from the floor."""
        out = self.make(max_unacked_bytes=10**6, in_flight_floor=1000)
        out.connection_made(FakeDilatedConnection())
        for _ in range(20):
            out.send_data(1, b"x" * self.RECORD)
        self.clock.advance(0.1)
        out.handle_ack(19)
        self.assertEqual(out.bytes_acked, 2000)
        self.assertAlmostEqual(out.window.min_rtt or 0, 0.1)
        self.assertEqual(out.window.limit, int(GAIN * 2000 / 0.1 * 0.1))
        out.connection_lost()
        out.connection_made(FakeDilatedConnection())
        self.assertEqual((out.window.limit, out.window.min_rtt), (1000, None))

    def test_replay_over_the_limit_keeps_producers_paused(self) -> None:
        """A new connection replays everything queued at once; when that is over the limit,
        producers wait for the ACKs like after any write."""
        out = self.make(max_unacked_bytes=10**6, in_flight_floor=1000)
        for _ in range(15):
            out.send_data(1, b"x" * self.RECORD)
        p = FakePushProducer()
        out.register_producer(1, p, True)
        conn = FakeDilatedConnection()
        out.connection_made(conn)
        self.assertEqual(len(conn.sent), 15)
        self.assertTrue(p.paused)
        out.handle_ack(9)
        self.assertFalse(p.paused)


class MachineTests(SynchronousTestCase):
    """The lifecycle machine: complete, and random input sequences keep the invariants."""

    def test_every_state_input_pair_is_defined(self) -> None:
        """No (state, input) pair can raise NoTransition."""
        self.assertEqual(missing_transitions(outbound_machine), [])

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.sampled_from(
                    ["connect", "lose", "pause", "resume", "stop", "send", "register", "unreg"]
                ),
                st.tuples(st.just("ack"), st.integers(min_value=-1, max_value=40)),
            ),
            max_size=60,
        )
    )
    def test_random_inputs_keep_the_invariants(self, ops: list) -> None:
        """Whatever the order of inputs: no exception; on each connection seqnums are
        contiguous and increasing and start with every unacked record; nothing is written to a
        lost connection, a paused transport, or after stop."""
        clock = Clock()
        out = Outbound(cooperator=one_step_cooperator(clock), clock=clock, max_unacked_bytes=50)
        conns: list[FakeDilatedConnection] = []
        current: FakeDilatedConnection | None = None
        acked = -1
        stopped = paused = False
        producer = FakePushProducer()
        registered = False
        lost_at: dict[int, int] = {}
        for op in ops:
            before = len(current.sent) if current is not None else 0
            if op == "connect":
                current = FakeDilatedConnection()
                conns.append(current)
                out.connection_made(current)
                paused = False
                if not stopped and out.next_seqnum > acked + 1:
                    self.assertEqual(
                        seqnums(current.send_calls[0]), list(range(acked + 1, out.next_seqnum))
                    )
                continue
            if op == "lose":
                out.connection_lost()
                if current is not None:
                    lost_at[id(current)] = len(current.sent)
                current = None
            elif op == "pause":
                out.pauseProducing()
                paused = current is not None
            elif op == "resume":
                out.resumeProducing()
                paused = False
            elif op == "stop":
                out.stop()
                stopped = True
            elif op == "send":
                out.send_data(1, b"z" * 20)
                if current is not None and (paused or stopped):
                    self.assertEqual(len(current.sent), before)
            elif op == "register":
                if not registered:
                    out.register_producer(1, producer, True)
                    registered = True
            elif op == "unreg":
                out.unregister_producer(1)
                registered = False
            else:
                # an ACK beyond what was sent retires only what was sent
                acked = max(acked, min(op[1], out.next_seqnum - 1)) if not stopped else acked
                out.handle_ack(op[1])
            if registered and (current is None or paused or stopped):
                self.assertTrue(producer.paused)
        for conn in conns:
            numbers = seqnums(conn.sent)
            self.assertEqual(
                numbers, list(range(numbers[0], numbers[0] + len(numbers))) if numbers else []
            )
            self.assertEqual(len(conn.sent), lost_at.get(id(conn), len(conn.sent)))
