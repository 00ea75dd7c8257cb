"""Tests for txdilation.subchannels.subchannel_lifecycle: the machine alone, input by input,
checking the steps it returns and the two gates it sets (no facade, no protocol)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.error import ConnectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.semantics import STOCK, TWISTED, Semantics
from txdilation.subchannels.subchannel_lifecycle import (
    OPEN,
    OPEN_HALF,
    Finished,
    ReadLost,
    Refused,
    RegisterProducer,
    SendClose,
    Steps,
    StopProducer,
    SubchannelCore,
    SubchannelEvents,
    WriteLost,
    subchannel_machine,
)
from txdilation.testing import missing_transitions
from txdilation.testing.fakes import FakePushProducer
from txdilation.wire.dilation_errors import (
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
)


def machine(
    half: bool = False, semantics: Semantics = TWISTED, log: Logger | None = None
) -> tuple[SubchannelEvents, SubchannelCore]:
    core = SubchannelCore(1, log or Logger(), semantics, half)
    return subchannel_machine(core, OPEN_HALF if half else OPEN), core


def kinds(steps: Steps) -> list[type]:
    return [type(step) for step in steps]


def refusal(steps: Steps) -> type[Exception] | None:
    refused = [step for step in steps if isinstance(step, Refused)]
    return type(refused[0].error) if refused else None


class FullCloseTests(SynchronousTestCase):
    def test_we_close_then_the_peer(self) -> None:
        """close: CLOSE to send, no more writes; a second close is refused (stock's rule)
        until the peer's CLOSE finishes without another CLOSE; then closes are no-ops."""
        m, c = machine(semantics=STOCK)
        self.assertEqual(kinds(m.close()), [SendClose])
        self.assertFalse(c.writable)
        self.assertTrue(c.readable)
        self.assertEqual(refusal(m.close()), AlreadyClosedError)
        steps = m.remote_close()
        self.assertEqual(kinds(steps), [Finished])
        finished = steps[0]
        assert isinstance(finished, Finished)
        self.assertFalse(finished.expect_close)
        self.assertTrue(finished.reason.check(ConnectionDone))
        self.assertFalse(c.readable)
        self.assertEqual(m.close(), ())
        self.assertEqual(m.remote_close(), ())

    def test_peer_closes_first(self) -> None:
        """The peer's CLOSE is answered with CLOSE, then the close finishes."""
        m, c = machine()
        self.assertEqual(kinds(m.remote_close()), [SendClose, Finished])
        self.assertFalse(c.readable or c.writable)

    def test_idempotent_close(self) -> None:
        """With idempotent_close a repeated close is a no-op, not a refusal."""
        m, _ = machine(semantics=TWISTED)
        m.close()
        self.assertEqual(m.close(), ())

    def test_half_close_refused(self) -> None:
        """close_write on a full-close protocol is refused in every state, closed too."""
        m, c = machine()
        self.assertEqual(refusal(m.close_write()), HalfCloseUsedOnNonHalfCloseable)
        self.assertTrue(c.writable)
        m.remote_close()
        self.assertEqual(refusal(m.close_write()), HalfCloseUsedOnNonHalfCloseable)

    def test_fail_while_open(self) -> None:
        """The protocol raised: CLOSE, then the close finishes with its failure, the peer's
        CLOSE still expected."""
        m, _ = machine()
        reason = Failure(ZeroDivisionError())
        steps = m.fail(reason)
        self.assertEqual(kinds(steps), [SendClose, Finished])
        finished = steps[1]
        assert isinstance(finished, Finished)
        self.assertIs(finished.reason, reason)
        self.assertTrue(finished.expect_close)
        self.assertEqual(m.fail(reason), ())


class HalfCloseTests(SynchronousTestCase):
    def test_peer_then_us(self) -> None:
        """The peer's CLOSE: readConnectionLost; then close_write: CLOSE, writeConnectionLost
        and the close (connectionLost per the semantics)."""
        for semantics, deliver in ((TWISTED, True), (STOCK, False)):
            m, c = machine(half=True, semantics=semantics)
            self.assertEqual(kinds(m.remote_close()), [ReadLost])
            self.assertFalse(c.readable)
            self.assertTrue(c.writable)
            self.assertEqual(refusal(m.close()), NormalCloseUsedOnHalfCloseable)
            steps = m.close_write()
            self.assertEqual(kinds(steps), [SendClose, WriteLost, Finished])
            finished = steps[2]
            assert isinstance(finished, Finished)
            self.assertEqual(finished.deliver, deliver)

    def test_us_then_peer(self) -> None:
        """close_write: CLOSE and writeConnectionLost; a second is refused (stock) and a
        normal close too; the peer's CLOSE then finishes."""
        m, c = machine(half=True, semantics=STOCK)
        self.assertEqual(kinds(m.close_write()), [SendClose, WriteLost])
        self.assertFalse(c.writable)
        self.assertEqual(refusal(m.close_write()), AlreadyClosedError)
        self.assertEqual(refusal(m.close()), NormalCloseUsedOnHalfCloseable)
        self.assertEqual(kinds(m.remote_close()), [ReadLost, Finished])
        self.assertEqual(refusal(m.close()), NormalCloseUsedOnHalfCloseable)
        self.assertEqual(m.close_write(), ())

    def test_idempotent_after_our_close(self) -> None:
        """With idempotent_close, closes after our CLOSE are no-ops."""
        m, _ = machine(half=True, semantics=TWISTED)
        m.close_write()
        self.assertEqual(m.close_write(), ())
        self.assertEqual(m.close(), ())

    def test_late_data_and_second_close_logged(self) -> None:
        """DATA or a second CLOSE after the peer's CLOSE: logged, nothing follows."""
        logged: list[dict] = []
        m, _ = machine(half=True, log=Logger(observer=logged.append))
        m.remote_close()
        self.assertEqual(m.late_data(), ())
        self.assertEqual(m.remote_close(), ())
        self.assertEqual(len(logged), 2)


class EndingTests(SynchronousTestCase):
    def test_abandon(self) -> None:
        """abandon: the close finishes with its reason, nothing sent; connectionLost per the
        semantics; then everything is a no-op."""
        for semantics in (STOCK, TWISTED):
            m, _ = machine(semantics=semantics)
            reason = Failure(ConnectionDone("bye"))
            steps = m.abandon(reason)
            self.assertEqual(kinds(steps), [Finished])
            finished = steps[0]
            assert isinstance(finished, Finished)
            self.assertEqual(finished.deliver, semantics.close_delivers_connection_lost)
            self.assertEqual(m.abandon(reason), ())
            self.assertEqual(m.fail(reason), ())

    def test_producer(self) -> None:
        """A producer registers while open; once closed it is ignored (stock) or stopped."""
        producer = FakePushProducer()
        m, _ = machine()
        self.assertEqual(m.register_producer(producer, True), (RegisterProducer(producer, True),))
        for semantics, expected in ((STOCK, ()), (TWISTED, (StopProducer(producer),))):
            m, _ = machine(semantics=semantics)
            m.abandon(Failure(ConnectionDone()))
            self.assertEqual(m.register_producer(producer, True), expected)

    def test_complete(self) -> None:
        """No (state, input) pair is left to NoTransition."""
        self.assertEqual(missing_transitions(subchannel_machine), [])

    @settings(max_examples=300, deadline=None)
    @given(
        st.booleans(),
        st.sampled_from([STOCK, TWISTED]),
        st.lists(
            st.sampled_from(
                ["remote_close", "late_data", "close", "close_write", "abandon", "fail"]
            ),
            max_size=20,
        ),
    )
    def test_any_order(self, half: bool, semantics: Semantics, ops: list[str]) -> None:
        """Any inputs: CLOSE at most once, the close finished at most once, nothing after it,
        a refusal never comes with anything else, and the gates only ever close."""
        m, c = machine(half=half, semantics=semantics)
        all_steps: list[type] = []
        finished = False
        gates = (c.readable, c.writable)
        for op in ops:
            if op in ("abandon", "fail"):
                steps = getattr(m, op)(Failure(ConnectionDone()))
            else:
                steps = getattr(m, op)()
            if refusal(steps) is not None:
                self.assertEqual(len(steps), 1)
            if finished:
                self.assertNotIn(Finished, kinds(steps))
                self.assertNotIn(SendClose, kinds(steps))
            finished = finished or Finished in kinds(steps)
            all_steps += kinds(steps)
            now = (c.readable, c.writable)
            self.assertTrue(
                all(not after or before for before, after in zip(gates, now, strict=True))
            )
            gates = now
        self.assertLessEqual(all_steps.count(SendClose), 1)
        self.assertLessEqual(all_steps.count(Finished), 1)
