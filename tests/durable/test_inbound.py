"""Tests for txdilation.durable.inbound: ACKs, dedup, demultiplexing, pending OPENs, read
pausing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.inbound import ACK_DELAY, ACK_THRESHOLD_BYTES, Inbound
from txdilation.durable.inbound_lifecycle import inbound_machine
from txdilation.testing import missing_transitions
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.records import Ack, Close, Data, Open
from txdilation.wire.roles import FOLLOWER, LEADER

REFUSE = object()  # a "factory" for which the build callable returns None


class RecordingDelivery:
    """Stands in for a SubChannel: records what Inbound delivers to it."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def start(self) -> None:
        self.events.append("start")

    def remote_data(self, data: bytes) -> None:
        self.events.append(data)

    def remote_close(self) -> None:
        self.events.append("close")

    def abandon(self, reason: object) -> None:
        self.events.append("abandon")


class InboundTestsMixin:
    def make(
        self,
        *,
        expected: list[str] | None = None,
        max_pending: int = 10_000,
        max_buffered: int = 10_000,
        role: object = LEADER,
        connect: bool = True,
    ) -> Inbound:
        self.clock = Clock()
        self.closes: list[int] = []
        self.built: dict[int, RecordingDelivery] = {}
        self.log_events: list[dict] = []
        self.conn = FakeDilatedConnection()

        def build(scid: int, name: str, factory: object) -> RecordingDelivery | None:
            if factory is REFUSE:
                return None
            self.built[scid] = RecordingDelivery()
            return self.built[scid]

        inbound = Inbound(
            reactor=self.clock,
            send_close=self.closes.append,
            build=build,
            expected_subprotocols=expected,
            max_pending_open_bytes=max_pending,
            max_buffered_inbound_bytes=max_buffered,
            log=Logger(observer=self.log_events.append),
        )
        inbound.set_role(role)
        if connect:
            inbound.connection_made(self.conn)
        return inbound

    def warnings(self) -> list[str]:
        """Each warning's error class (the event's ``error_type``) and text."""
        return [f"{e.get('error_type', '')}: {formatEvent(e)}" for e in self.log_events]

    def local(self, inbound: Inbound, scid: int) -> RecordingDelivery:
        delivery = RecordingDelivery()
        inbound.add_local(scid, delivery)
        return delivery


class AckTests(InboundTestsMixin, SynchronousTestCase):
    """Every sequenced record is acknowledged, duplicates too: one delayed cumulative ACK per
    batch, early at the end of the turn for OPEN/CLOSE and past the byte threshold."""

    def test_acks_are_delayed_and_coalesced(self) -> None:
        """Records in one turn produce nothing at the end of the turn, then exactly one
        cumulative ACK of the highest seqnum ACK_DELAY after the first of them."""
        inbound = self.make()
        d = self.local(inbound, 1)
        inbound.receive(Data(0, 1, b"a"))
        inbound.receive(Data(1, 1, b"b"))
        inbound.receive(Data(2, 1, b"c"))
        self.clock.advance(0)
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [])
        self.assertEqual(d.events, [b"a", b"b", b"c"])  # delivery is not delayed
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [Ack(2)])
        self.clock.advance(10 * ACK_DELAY)
        self.assertEqual(self.conn.sent, [Ack(2)])

    def test_the_delay_runs_from_the_first_record_of_a_batch(self) -> None:
        """Records arriving while an ACK waits join it; they do not push it back."""
        inbound = self.make()
        self.local(inbound, 1)
        inbound.receive(Data(0, 1, b"a"))
        self.clock.advance(ACK_DELAY / 2)
        inbound.receive(Data(1, 1, b"b"))
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [Ack(1)])
        inbound.receive(Data(2, 1, b"c"))  # a new batch, a new delay
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [Ack(1)])
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [Ack(1), Ack(2)])

    def test_threshold_acks_at_the_end_of_the_turn(self) -> None:
        """Once the unacknowledged DATA bytes reach ACK_THRESHOLD_BYTES the ACK goes out at the
        end of that turn (covering the turn's later records too); the count starts again."""
        inbound = self.make(max_buffered=10 * ACK_THRESHOLD_BYTES)
        self.local(inbound, 1)
        inbound.receive(Data(0, 1, bytes(ACK_THRESHOLD_BYTES - 1)))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [])
        inbound.receive(Data(1, 1, b"x"))  # reaches the threshold
        inbound.receive(Data(2, 1, b"y"))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(2)])
        inbound.receive(Data(3, 1, bytes(ACK_THRESHOLD_BYTES - 1)))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(2)])  # below the threshold again: delayed
        self.clock.advance(ACK_DELAY)
        self.assertEqual(self.conn.sent, [Ack(2), Ack(3)])

    def test_open_and_close_are_acked_at_the_end_of_the_turn(self) -> None:
        """An OPEN or a CLOSE is not delayed (a closing peer waits for it), and brings a
        waiting DATA ACK forward with it: still one ACK for the batch."""
        inbound = self.make()
        inbound.listen("x", object())  # type: ignore[arg-type]
        inbound.receive(Open(0, 2, "x"))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(0)])
        inbound.receive(Data(1, 2, b"a"))
        self.clock.advance(ACK_DELAY / 2)
        inbound.receive(Close(2, 2))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(0), Ack(2)])
        self.clock.advance(ACK_DELAY)
        self.assertEqual(self.conn.sent, [Ack(0), Ack(2)])
        self.assertEqual(self.built[2].events, ["start", b"a", "close"])

    def test_duplicates_are_acked_but_not_processed(self) -> None:
        """A replayed record (seqnum <= highest processed) is ACKed again, delivered once."""
        inbound = self.make()
        d = self.local(inbound, 1)
        inbound.receive(Data(0, 1, b"a"))
        self.clock.advance(ACK_DELAY)
        inbound.receive(Data(0, 1, b"a"))
        self.clock.advance(ACK_DELAY)
        self.assertEqual(d.events, [b"a"])
        self.assertEqual(self.conn.sent, [Ack(0), Ack(0)])
        self.assertEqual(inbound.watermark, 0)

    def test_no_ack_without_a_connection(self) -> None:
        """ACKs are never queued: without a connection nothing is scheduled or sent."""
        inbound = self.make(connect=False)
        self.local(inbound, 1)
        inbound.receive(Data(0, 1, b"a"))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        inbound.connection_made(self.conn)
        inbound.connection_lost()
        inbound.receive(Data(1, 1, b"b"))
        self.clock.advance(ACK_DELAY)
        self.assertEqual(self.conn.sent, [])

    def test_connection_lost_drops_the_pending_ack(self) -> None:
        """A pending ACK dies with its connection (it is neither sent nor carried over to the
        next one); the peer's replay on the next connection is acknowledged there."""
        inbound = self.make()
        self.local(inbound, 1)
        inbound.receive(Data(0, 1, bytes(ACK_THRESHOLD_BYTES - 1)))
        inbound.connection_lost()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        second = FakeDilatedConnection()
        inbound.connection_made(second)
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual((self.conn.sent, second.sent), ([], []))
        inbound.receive(Data(0, 1, b"z"))  # the replay; the byte count started again
        self.clock.advance(0)
        self.assertEqual(second.sent, [])
        self.clock.advance(ACK_DELAY)
        self.assertEqual(second.sent, [Ack(0)])

    def test_a_record_after_a_quiet_spell_is_acked_at_the_end_of_the_turn(self) -> None:
        """When no ACK went out for ACK_DELAY (none since the connection came, or since the
        last one), the next record's ACK goes at the end of its turn: a lone record's round
        trip is not stretched by our delay. Records that follow within ACK_DELAY wait for it
        again, so a stream is still acknowledged once per ACK_DELAY."""
        inbound = self.make()
        self.local(inbound, 1)
        self.clock.advance(ACK_DELAY)
        inbound.receive(Data(0, 1, b"a"))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(0)])
        self.clock.advance(ACK_DELAY / 2)
        inbound.receive(Data(1, 1, b"b"))
        self.clock.advance(ACK_DELAY / 2)
        inbound.receive(Data(2, 1, b"c"))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(0)])
        self.clock.advance(ACK_DELAY / 2)
        self.assertEqual(self.conn.sent, [Ack(0), Ack(2)])
        self.clock.advance(2 * ACK_DELAY)
        inbound.receive(Data(3, 1, b"d"))
        self.clock.advance(0)
        self.assertEqual(self.conn.sent, [Ack(0), Ack(2), Ack(3)])

    def test_ack_goes_out_after_stop_never(self) -> None:
        """stop() cancels the pending ACK and later records are ignored."""
        inbound = self.make()
        d = self.local(inbound, 1)
        inbound.receive(Data(0, 1, b"a"))
        self.assertEqual(inbound.stop(), [d])
        inbound.receive(Data(1, 1, b"b"))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.conn.sent, [])
        self.assertEqual(inbound.stop(), [])


class OpenTests(InboundTestsMixin, SynchronousTestCase):
    """Incoming OPENs: checks, listeners and the pending queue."""

    def test_wrong_parity_and_scid_zero_are_answered_with_close(self) -> None:
        """As Leader the peer opens even scids: an odd one or 0 gets CLOSE, and the peer's own
        CLOSE (and any DATA) for it later are absorbed quietly."""
        inbound = self.make(role=LEADER)
        inbound.listen("x", object())
        inbound.receive(Open(0, 3, "x"))
        inbound.receive(Open(1, 0, "x"))
        self.assertEqual(self.closes, [3, 0])
        self.assertEqual(self.built, {})
        self.assertEqual(len(self.warnings()), 2)
        inbound.receive(Data(2, 3, b"late"))
        inbound.receive(Close(3, 3))
        self.assertEqual(len(self.warnings()), 2)
        inbound.receive(Close(4, 3))  # a second one is unexpected again
        self.assertIn("CloseForMissingSubchannelError", self.warnings()[-1])

    def test_follower_accepts_odd(self) -> None:
        """As Follower the peer (Leader) opens odd scids."""
        inbound = self.make(role=FOLLOWER)
        inbound.listen("x", object())
        inbound.receive(Open(0, 1, "x"))
        self.assertEqual(list(self.built), [1])
        inbound.receive(Open(1, 2, "x"))
        self.assertEqual(self.closes, [2])

    def test_unexpected_subprotocol_is_answered_with_close(self) -> None:
        """With expected_subprotocols, any other name is refused at once (stock defect 1)."""
        inbound = self.make(expected=["good"])
        inbound.receive(Open(0, 2, "evil"))
        inbound.receive(Open(1, 4, "good"))
        self.assertEqual(self.closes, [2])
        self.assertEqual(inbound.pending_bytes, 9 + 4)
        self.assertIn("UnexpectedSubprotocol", self.warnings()[0])
        self.assertIn(  # in words, naming what is expected (not the exception's repr)
            "refused a subchannel the peer opened for 'evil' (OPEN 2): not an expected "
            "subprotocol here (expected: good)",
            self.warnings()[0],
        )

    def test_duplicate_open_is_logged_and_ignored(self) -> None:
        """A second OPEN for an open scid changes nothing and sends nothing."""
        inbound = self.make()
        inbound.listen("x", object())
        inbound.receive(Open(0, 2, "x"))
        inbound.receive(Open(1, 2, "y"))
        self.assertEqual(self.built[2].events, ["start"])
        self.assertEqual(self.closes, [])
        self.assertIn("DuplicateOpenError", self.warnings()[0])

    def test_data_and_close_for_unknown_scid_are_logged_and_acked(self) -> None:
        """DATA/CLOSE for a scid nobody knows: logged, ignored, still ACKed."""
        inbound = self.make()
        inbound.receive(Data(0, 8, b"?"))
        inbound.receive(Close(1, 8))
        self.clock.advance(0)
        warnings = self.warnings()
        self.assertIn("DataForMissingSubchannelError", warnings[0])
        self.assertIn("CloseForMissingSubchannelError", warnings[1])
        self.assertEqual(self.conn.sent, [Ack(1)])

    def test_open_without_listener_is_held_until_listen(self) -> None:
        """OPEN, DATA and CLOSE for a name nobody listens on wait, then arrive in order."""
        inbound = self.make()
        inbound.receive(Open(0, 2, "x"))
        inbound.receive(Data(1, 2, b"one"))
        inbound.receive(Data(2, 2, b"two"))
        inbound.receive(Close(3, 2))
        self.assertEqual(self.built, {})
        self.assertEqual(inbound.pending_bytes, 9 + 1 + 6)
        inbound.listen("x", object())
        self.assertEqual(self.built[2].events, ["start", b"one", b"two", "close"])
        self.assertEqual((inbound.pending_bytes, inbound.buffered_bytes), (0, 0))

    def test_refusing_factory_gets_close(self) -> None:
        """A factory whose buildProtocol returns None: the OPEN is answered with CLOSE."""
        inbound = self.make()
        inbound.listen("x", REFUSE)
        inbound.receive(Open(0, 2, "x"))
        self.assertEqual(self.closes, [2])

    def test_listen_twice_raises_unlisten_holds_again(self) -> None:
        """One factory per name; after unlisten() later OPENs are held again."""
        inbound = self.make()
        inbound.listen("x", object())
        self.assertRaises(ValueError, inbound.listen, "x", object())
        inbound.unlisten("x")
        self.assertFalse(inbound.is_listening("x"))
        inbound.receive(Open(0, 2, "x"))
        self.assertEqual(self.built, {})
        inbound.listen("x", object())
        self.assertEqual(list(self.built), [2])

    def test_pending_bound_refuses_the_newest(self) -> None:
        """Held OPENs together stay under max_pending_open_bytes: the newest is refused with
        CLOSE (logged), the older one survives and is delivered on listen."""
        inbound = self.make(max_pending=100)
        inbound.receive(Open(0, 2, "x"))  # 10
        inbound.receive(Data(1, 2, b"a" * 50))  # 60
        inbound.receive(Open(2, 4, "x"))  # 70
        inbound.receive(Data(3, 4, b"b" * 40))  # 110: over
        self.assertEqual(self.closes, [4])
        self.assertEqual(inbound.pending_bytes, 60)
        self.assertIn("refusing subchannel 4", self.warnings()[0])
        inbound.receive(Data(4, 4, b"late"))
        inbound.receive(Close(5, 4))  # the peer's answer, absorbed
        self.assertEqual(len(self.warnings()), 1)
        inbound.listen("x", object())
        self.assertEqual(list(self.built), [2])


class PausingTests(InboundTestsMixin, SynchronousTestCase):
    """Per-subchannel read pausing (stock defect 2) and the whole-connection bound."""

    def test_paused_subchannel_does_not_stall_others(self) -> None:
        """A paused subchannel's records wait; another subchannel's are delivered at once."""
        inbound = self.make()
        a, b = self.local(inbound, 1), self.local(inbound, 3)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"a1"))
        inbound.receive(Data(1, 3, b"b1"))
        inbound.receive(Data(2, 1, b"a2"))
        self.assertEqual((a.events, b.events), ([], [b"b1"]))
        self.assertEqual(inbound.buffered_bytes, 4)
        self.assertFalse(self.conn.reading_paused)
        self.clock.advance(ACK_DELAY)
        self.assertEqual(self.conn.sent, [Ack(2)])  # ACKs are unaffected

    def test_resume_delivers_later_in_order(self) -> None:
        """After resume the held records arrive on a later turn, in order, before newer ones."""
        inbound = self.make()
        a = self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"1"))
        inbound.receive(Close(1, 1))  # a CLOSE waits behind the data
        inbound.resume_subchannel(1)
        self.assertEqual(a.events, [])
        self.clock.advance(0)
        self.assertEqual(a.events, [b"1", "close"])
        self.assertEqual(inbound.buffered_bytes, 0)

    def test_data_arriving_before_the_drain_queues_behind(self) -> None:
        """Records received between resume and the delivery turn keep their order."""
        inbound = self.make()
        a = self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"1"))
        inbound.resume_subchannel(1)
        inbound.receive(Data(1, 1, b"2"))
        self.clock.advance(0)
        self.assertEqual(a.events, [b"1", b"2"])

    def test_pausing_again_while_draining_stops_the_drain(self) -> None:
        """A protocol that pauses inside dataReceived gets nothing more until resumed."""
        inbound = self.make()
        a = self.local(inbound, 1)
        inbound.pause_subchannel(1)
        for i in range(3):
            inbound.receive(Data(i, 1, b"%d" % i))
        original = a.remote_data

        def pause_after_each(data: bytes) -> None:
            original(data)
            inbound.pause_subchannel(1)

        a.remote_data = pause_after_each  # type: ignore[method-assign]
        inbound.resume_subchannel(1)
        self.clock.advance(0)
        self.assertEqual(a.events, [b"0"])
        inbound.resume_subchannel(1)
        self.clock.advance(0)
        self.assertEqual(a.events, [b"0", b"1"])

    def test_whole_connection_paused_only_past_the_bound(self) -> None:
        """Reading the connection pauses only when paused subchannels hold more than the
        bound, and resumes once they are back under half of it."""
        inbound = self.make(max_buffered=100)
        self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"x" * 60))
        self.assertFalse(self.conn.reading_paused)
        inbound.receive(Data(1, 1, b"x" * 60))
        self.assertTrue(self.conn.reading_paused)
        inbound.receive(Data(2, 1, b"x" * 60))
        self.assertEqual(self.conn.pause_reading_calls, 1)
        inbound.resume_subchannel(1)
        self.clock.advance(0)
        self.assertFalse(self.conn.reading_paused)

    def test_throttle_applies_to_the_next_connection(self) -> None:
        """Over the bound when a new connection arrives: its reading is paused at once."""
        inbound = self.make(max_buffered=10)
        self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"x" * 20))
        inbound.connection_lost()
        second = FakeDilatedConnection()
        inbound.connection_made(second)
        self.assertTrue(second.reading_paused)

    def test_closing_a_paused_subchannel_releases_its_bytes(self) -> None:
        """A subchannel closed while holding records gives its bytes back to the bound."""
        inbound = self.make(max_buffered=10)
        self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"x" * 20))
        inbound.subchannel_closed(1, expect_close=False)
        self.assertEqual(inbound.buffered_bytes, 0)
        self.assertFalse(self.conn.reading_paused)

    def test_discard_drops_held_and_later_data_but_delivers_close(self) -> None:
        """stopProducing: held and future DATA are dropped (still ACKed); CLOSE still arrives."""
        inbound = self.make()
        a = self.local(inbound, 1)
        inbound.pause_subchannel(1)
        inbound.receive(Data(0, 1, b"dropped"))
        inbound.discard_subchannel(1)
        inbound.receive(Data(1, 1, b"dropped too"))
        inbound.receive(Close(2, 1))
        self.clock.advance(0)
        self.assertEqual(a.events, ["close"])
        self.assertEqual(inbound.buffered_bytes, 0)
        self.assertIn(Ack(2), self.conn.sent)

    def test_closed_subchannel_expecting_close(self) -> None:
        """A subchannel closed before the peer's CLOSE: its DATA and that CLOSE are quiet."""
        inbound = self.make()
        self.local(inbound, 1)
        inbound.subchannel_closed(1, expect_close=True)
        inbound.receive(Data(0, 1, b"late"))
        inbound.receive(Close(1, 1))
        self.assertEqual(self.warnings(), [])


class MachineTests(InboundTestsMixin, SynchronousTestCase):
    """The read-pausing machine: complete, and random inputs keep the accounting right."""

    def test_every_state_input_pair_is_defined(self) -> None:
        """No (state, input) pair can raise NoTransition."""
        self.assertEqual(missing_transitions(inbound_machine), [])

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.tuples(st.just("data"), st.sampled_from([1, 2, 3, 4]), st.integers(0, 40)),
                st.tuples(st.just("open"), st.sampled_from([2, 4, 6])),
                st.tuples(st.just("close"), st.sampled_from([1, 2, 3, 4])),
                st.tuples(
                    st.sampled_from(["pause", "resume", "discard", "closed"]),
                    st.sampled_from([1, 2, 4]),
                ),
                st.sampled_from(["connect", "lose", "listen", "unlisten", "turn", "dup", "stop"]),
            ),
            max_size=60,
        )
    )
    def test_random_inputs(self, ops: list) -> None:
        """Whatever happens: no exception; each subchannel gets its DATA once and in order;
        byte counts never go negative; reading is paused exactly while over the bound."""
        inbound = self.make(max_pending=60, max_buffered=50, connect=False)
        local = self.local(inbound, 1)
        seq = 0
        connected = stopped = False
        for op in ops:
            match op:
                case ("data", scid, n):
                    inbound.receive(Data(seq, scid, b"%d:" % seq + b"." * n))
                    seq += 1
                case ("open", scid):
                    inbound.receive(Open(seq, scid, "x"))
                    seq += 1
                case ("close", scid):
                    inbound.receive(Close(seq, scid))
                    seq += 1
                case ("pause", scid):
                    inbound.pause_subchannel(scid)
                case ("resume", scid):
                    inbound.resume_subchannel(scid)
                case ("discard", scid):
                    inbound.discard_subchannel(scid)
                case ("closed", scid):
                    inbound.subchannel_closed(scid, expect_close=True)
                case "connect":
                    inbound.connection_made(self.conn)
                    connected = True
                case "lose":
                    inbound.connection_lost()
                    connected = False
                case "listen":
                    if not inbound.is_listening("x"):
                        inbound.listen("x", object())
                case "unlisten":
                    inbound.unlisten("x")
                case "turn":
                    self.clock.advance(0)
                case "dup":
                    inbound.receive(Data(max(seq - 1, 0), 1, b"dup"))
                case "stop":
                    inbound.stop()
                    stopped = True
            self.assertGreaterEqual(inbound.buffered_bytes, 0)
            self.assertGreaterEqual(inbound.pending_bytes, 0)
            self.assertLessEqual(inbound.pending_bytes, 60)
            if connected and not stopped:
                if inbound.buffered_bytes > 50:
                    self.assertTrue(self.conn.reading_paused)
                if self.conn.reading_paused:
                    self.assertGreater(inbound.buffered_bytes, 25)
        self.clock.advance(0)
        for delivery in [local, *self.built.values()]:
            numbers = [
                int(e.split(b":")[0]) for e in delivery.events if isinstance(e, bytes) and b":" in e
            ]
            self.assertEqual(numbers, sorted(set(numbers)))
