"""
The streaming scenario's record codec and arrival analysis (``tests.support.peer_stream``), which
the recovery measurements in network namespaces rely on.
"""

from __future__ import annotations

from twisted.trial import unittest

from tests.support.peer_stream import (
    RECORD_SIZE,
    ArrivalLog,
    BadRecord,
    encode_record,
    parse_record,
)


def log_of(arrivals: list[tuple[int, float, float]], last: int | None = None) -> ArrivalLog:
    """An ``ArrivalLog`` of ``(seq, sent_at, arrived_at)``; ``last`` is the last record's seq."""
    log = ArrivalLog()
    for seq, sent, arrived in arrivals:
        log.add(seq, sent, arrived, last=seq == last)
    return log


class RecordTests(unittest.SynchronousTestCase):
    """Records are 1 KiB, carry their sequence number, send time and last flag."""

    def test_round_trip(self) -> None:
        """``parse_record(encode_record(...))`` gives back what was encoded, at 1024 bytes."""
        record = encode_record(41, 1234.5, last=True)
        self.assertEqual(len(record), RECORD_SIZE)
        self.assertEqual(parse_record(record), (41, 1234.5, True))
        self.assertEqual(parse_record(memoryview(encode_record(0, 1.0))), (0, 1.0, False))

    def test_bad_records(self) -> None:
        """A wrong size or magic is refused (the stream is out of step)."""
        with self.assertRaises(BadRecord):
            parse_record(b"x" * RECORD_SIZE)
        with self.assertRaises(BadRecord):
            parse_record(encode_record(1, 1.0)[:-1])


class ArrivalLogTests(unittest.SynchronousTestCase):
    """What the receiver reports about delivery and gaps."""

    def test_exactly_once_in_order(self) -> None:
        """Every record once, in order, up to the last: exactly once; the largest gap found."""
        report = log_of([(0, 0.0, 0.1), (1, 0.2, 0.3), (2, 0.4, 2.3)], last=2).report()
        self.assertTrue(report["exactly_once_in_order"])
        self.assertEqual((report["records"], report["expected"], report["missing"]), (3, 3, 0))
        self.assertEqual((report["max_gap"], report["max_gap_from"]), (2.0, 0.3))
        self.assertEqual(report["max_latency"], 1.9)

    def test_duplicates_reordering_and_losses_are_counted(self) -> None:
        """A repeated, an overtaken and a missing record each break exactly-once."""
        report = log_of([(0, 0, 1), (2, 0, 2), (1, 0, 3), (2, 0, 4), (4, 0, 5)], last=4).report()
        self.assertFalse(report["exactly_once_in_order"])
        self.assertEqual(
            (report["duplicates"], report["out_of_order"], report["missing"]), (1, 1, 1)
        )

    def test_no_last_record_is_not_exactly_once(self) -> None:
        """Without the last record the count is unknown and delivery not complete."""
        report = log_of([(0, 0, 1), (1, 0, 2)]).report()
        self.assertIsNone(report["expected"])
        self.assertFalse(report["exactly_once_in_order"])
        self.assertEqual(report["missing"], 0)

    def test_gap_around_the_fault(self) -> None:
        """
        The gap that counts is the largest one ending after the fault (including the one
        from the last arrival before it); recovery is the first record written after the
        fault arriving; records written before it that arrive late do not count as recovery.
        """
        arrivals = [(0, 0.0, 0.0), (1, 1.0, 1.0), (2, 1.5, 9.0), (3, 9.5, 9.6), (4, 9.7, 9.8)]
        report = log_of(arrivals, last=4).report(fault_at=2.0)
        self.assertEqual(report["gap_after_fault"], 8.0)
        self.assertEqual(report["resumed_after_fault"], 7.6)
        self.assertTrue(report["recovered"])

    def test_no_recovery(self) -> None:
        """Nothing written after the fault arrived: not recovered, no resumption time."""
        report = log_of([(0, 0.0, 0.0), (1, 1.0, 1.0), (2, 1.9, 5.0)]).report(fault_at=2.0)
        self.assertFalse(report["recovered"])
        self.assertIsNone(report["resumed_after_fault"])
        self.assertEqual(report["gap_after_fault"], 4.0)

    def test_nothing_after_the_fault(self) -> None:
        """No arrival after the fault at all: no gap can be measured."""
        report = log_of([(0, 0.0, 0.0)]).report(fault_at=2.0)
        self.assertIsNone(report["gap_after_fault"])
        self.assertFalse(report["recovered"])
