"""Tests for txdilation.testing.fakes: the fakes applications' suites use keep their promises
(the interfaces they claim, a link that delivers only when pumped and loses what is in flight
when dropped)."""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IPullProducer, IPushProducer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txdilation.testing.fakes import (
    FakeDilatedConnection,
    FakePullProducer,
    FakePushProducer,
    RecordLink,
    dispatch_by_type,
)
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ack, Data, Ping


class FakeConnectionTests(SynchronousTestCase):
    def test_interfaces(self) -> None:
        """The fakes provide what they claim."""
        verifyObject(IDilatedConnection, FakeDilatedConnection())
        verifyObject(IPushProducer, FakePushProducer())
        verifyObject(IPullProducer, FakePullProducer())

    def test_records_until_closed(self) -> None:
        """Records are kept per call; nothing is sent once closed; fail() keeps its first
        reason and aborts."""
        c = FakeDilatedConnection()
        c.send_record(Ping(b"1234"))
        c.send_records([Ack(1), Ack(2)])
        self.assertEqual(c.send_calls, [[Ping(b"1234")], [Ack(1), Ack(2)]])
        self.assertEqual(c.of_type(Ack), [Ack(1), Ack(2)])
        first = LinkLoss(Cause.SILENT, "silent")
        c.fail(first)
        c.fail(LinkLoss(Cause.DROPPED, "dropped"))
        c.send_record(Ack(3))
        self.assertEqual((c.failed_reason, c.aborted, len(c.sent)), (first, True, 3))


class RecordLinkTests(SynchronousTestCase):
    def test_delivers_when_pumped_and_runs_due_calls(self) -> None:
        """Nothing arrives until pump(), which also runs what is due on the clock; a paused
        reader gets nothing until it resumes."""
        clock = Clock()
        at_a: list[Any] = []
        at_b: list[Any] = []
        link = RecordLink(at_a.append, at_b.append, clock)
        link.a.send_record(Data(0, 1, b"x"))
        link.b.send_record(Ack(0))
        self.assertEqual((at_a, at_b, link.in_flight), ([], [], 2))
        fired: list[bool] = []
        clock.callLater(0, fired.append, True)
        link.b.pause_reading()
        link.pump()
        self.assertEqual((at_a, at_b, fired), ([Ack(0)], [], [True]))
        link.b.resume_reading()
        link.pump()
        self.assertEqual(at_b, [Data(0, 1, b"x")])

    def test_drop_loses_what_is_in_flight(self) -> None:
        """drop(): in-flight records are lost and both ends stop sending."""
        got: list[Any] = []
        link = RecordLink(got.append, got.append)
        link.a.send_record(Ack(1))
        link.drop()
        link.a.send_record(Ack(2))
        link.pump()
        self.assertEqual((got, link.in_flight), ([], 0))

    def test_deliver_some_and_dispatch(self) -> None:
        """deliver_some moves only what it is told; dispatch_by_type routes by type and drops
        the rest."""
        acks: list[Any] = []
        link = RecordLink(lambda r: None, dispatch_by_type({Ack: acks.append}))
        link.a.send_records([Ack(1), Ping(b"abcd"), Ack(2)])
        link.deliver_some(to_b=2)
        self.assertEqual((acks, link.in_flight), ([Ack(1)], 1))
