"""The ratchet: whichever side crashes after whichever step, the two files still hold a
generation in common and accept each other's receipts (they meet again); a copy from before a
meeting cannot pull a half-stepped side back; once both committed, a copy from before holds
none of their generations."""

from __future__ import annotations

import itertools
import os

from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from txdilation.pairing import ratchet
from txdilation.pairing.record import PairingRecord

NEXT = b"n" * 32
RECEIPT = b"r" * 32


def common(a: PairingRecord, b: PairingRecord) -> set[str]:
    return {g.fingerprint for g in a.held()} & {g.fingerprint for g in b.held()}


def accepts(me: PairingRecord, peer: PairingRecord) -> bool:
    """Whether ``me`` meets ``peer``: one of the peer's receipts is acceptable to ``me``."""
    return bool(set(ratchet.acceptable_receipts(me)) & set(peer.receipts))


def step(record: PairingRecord, steps: int, peer_steps: int) -> PairingRecord:
    """``record`` after the first ``steps`` of one ratchet step (met, confirmed, staged,
    committed), the peer having done ``peer_steps``: confirm needs the peer's met, commit the
    peer's stage."""
    if steps >= 1:
        record = ratchet.met(record, record.current.fingerprint, RECEIPT, 2.0)
    if steps >= 2 and peer_steps >= 1:
        record = ratchet.confirm(record)
        if steps >= 3:
            record = ratchet.stage(record, NEXT)
            pending = record.pending
            assert pending is not None
            if steps >= 4 and peer_steps >= 3:
                record = ratchet.commit(record, pending.fingerprint)
    return record


class RatchetTests(SynchronousTestCase):
    def test_every_crash_point_keeps_a_common_generation(self) -> None:
        """For every pair of points where each side stopped (before the meeting, after met,
        after the peer's confirmation, after staging, after committing), the files share a
        generation, both name the same newest one, and each accepts the other's receipts."""
        a0, b0 = records()
        for sa, sb in itertools.product(range(5), repeat=2):
            a, b = step(a0, sa, sb), step(b0, sb, sa)
            shared = common(a, b)
            self.assertTrue(shared, (sa, sb))
            newest_a = next(g.fingerprint for g in a.held() if g.fingerprint in shared)
            newest_b = next(g.fingerprint for g in b.held() if g.fingerprint in shared)
            self.assertEqual(newest_a, newest_b, (sa, sb))
            self.assertTrue(accepts(a, b) and accepts(b, a), (sa, sb))

    def test_no_rollback_by_an_older_copy(self) -> None:
        """A side holding G and a pending G+1 accepts only the peer that was in the meeting
        that made G+1 (it holds the receipt): a copy of the peer's file from before that
        meeting (it holds G only) is refused, whatever it claims."""
        a0, b0 = records()
        stolen = b0  # B's file before the meeting
        a = step(a0, 3, 4)  # staged, not yet committed: holds G and G+1
        b = step(b0, 4, 3)
        self.assertEqual(len(a.held()), 2)
        self.assertFalse(accepts(a, stolen))
        self.assertTrue(accepts(a, b))
        lagging = step(b0, 2, 3)  # B crashed before staging: holds G and the receipt
        self.assertTrue(accepts(a, lagging))

    def test_old_copy_stops_working(self) -> None:
        """A copy taken before the step shares nothing with either side once both committed,
        and neither side accepts its receipts after the next meeting."""
        a0, b0 = records()
        a, b = step(a0, 4, 4), step(b0, 4, 4)
        self.assertFalse(common(a0, a))
        self.assertFalse(common(a0, b))
        self.assertEqual(a.current.number, 1)
        later = ratchet.met(a, a.current.fingerprint, os.urandom(32), 3.0)
        self.assertFalse(accepts(ratchet.confirm(later), a0))

    def test_met_stage_commit_check_their_input(self) -> None:
        """Meeting on a generation not held, staging before the confirmation, or committing
        one not staged: ValueError."""
        a, _ = records()
        self.assertRaises(ValueError, ratchet.met, a, "0" * 16, RECEIPT, 1.0)
        unconfirmed = ratchet.met(a, a.current.fingerprint, RECEIPT, 1.0)
        self.assertRaises(ValueError, ratchet.stage, unconfirmed, NEXT)
        self.assertRaises(ValueError, ratchet.commit, a, a.current.fingerprint)
        staged = ratchet.stage(a, NEXT)
        self.assertRaises(ValueError, ratchet.commit, staged, "0" * 16)

    def test_incarnations_and_receipts(self) -> None:
        """Each start counts one more; a meeting keeps its receipt first and at most two."""
        a, _ = records()
        self.assertEqual(ratchet.start_incarnation(a).counter, a.counter + 1)
        r1, r2 = b"1" * 32, b"2" * 32
        met = ratchet.met(
            ratchet.met(a, a.current.fingerprint, r1, 5.0), a.current.fingerprint, r2, 6.0
        )
        self.assertEqual(met.receipts, (r2, r1))
        self.assertFalse(met.confirmed)
