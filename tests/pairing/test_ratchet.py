"""The ratchet: whichever side crashes after whichever step, the two files still hold a
generation in common (they meet again); once both committed, a copy from before holds none."""

from __future__ import annotations

import itertools

from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from txdilation.pairing import ratchet
from txdilation.pairing.record import PairingRecord

NEXT = b"n" * 32


def common(a: PairingRecord, b: PairingRecord) -> set[str]:
    return {g.fingerprint for g in a.held()} & {g.fingerprint for g in b.held()}


def step(record: PairingRecord, steps: int, peer_stored: bool) -> PairingRecord:
    """``record`` after the first ``steps`` of one ratchet step (met, stage, commit)."""
    fp = record.current.fingerprint
    if steps >= 1:
        record = ratchet.met(record, fp, 2.0)
    if steps >= 2:
        record = ratchet.stage(record, NEXT)
    if steps >= 3 and peer_stored:
        pending = record.pending
        assert pending is not None
        record = ratchet.commit(record, pending.fingerprint)
    return record


class RatchetTests(SynchronousTestCase):
    def test_every_crash_point_keeps_a_common_generation(self) -> None:
        """For every pair of points where each side stopped (before the meeting, after met,
        after staging, after committing; a side commits only if the peer staged), the files
        share a generation, and the newest common one is what both would meet on."""
        a0, b0 = records()
        for sa, sb in itertools.product(range(4), repeat=2):
            a = step(a0, sa, peer_stored=sb >= 2)
            b = step(b0, sb, peer_stored=sa >= 2)
            shared = common(a, b)
            self.assertTrue(shared, (sa, sb))
            newest_a = next(g.fingerprint for g in a.held() if g.fingerprint in shared)
            newest_b = next(g.fingerprint for g in b.held() if g.fingerprint in shared)
            self.assertEqual(newest_a, newest_b, (sa, sb))

    def test_old_copy_stops_working(self) -> None:
        """A copy taken before the step shares nothing with either side once both committed,
        and meeting again (met on the new generation) drops nothing they need."""
        a0, b0 = records()
        a, b = step(a0, 3, True), step(b0, 3, True)
        self.assertFalse(common(a0, a))
        self.assertFalse(common(a0, b))
        self.assertEqual(a.current.number, 1)
        self.assertTrue(common(ratchet.met(a, a.current.fingerprint, 3.0), b))

    def test_met_and_commit_check_their_input(self) -> None:
        """Meeting on a generation not held, or committing one not staged: ValueError."""
        a, _ = records()
        self.assertRaises(ValueError, ratchet.met, a, "0" * 16, 1.0)
        self.assertRaises(ValueError, ratchet.commit, a, a.current.fingerprint)
        staged = ratchet.stage(a, NEXT)
        self.assertRaises(ValueError, ratchet.commit, staged, "0" * 16)

    def test_incarnations_count(self) -> None:
        """Each start counts one more; meeting confirms the pairing."""
        a, _ = records()
        self.assertEqual(ratchet.start_incarnation(a).counter, a.counter + 1)
        self.assertTrue(ratchet.met(a, a.current.fingerprint, 5.0).confirmed)
