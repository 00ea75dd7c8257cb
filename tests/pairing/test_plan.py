"""The planner: the peer's latest hello wins; both sides compute the same target; a copy of this
side is recognised; a spent peer nonce is not met again."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.hello import Hello
from txdilation.pairing.plan import Heard, Planner

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16
G0, G1 = "0" * 16, "1" * 16


def pair() -> tuple[Planner, Planner]:
    return Planner(A, B, 5), Planner(B, A, 7)


class PlannerTests(SynchronousTestCase):
    def test_both_sides_compute_the_same_target(self) -> None:
        """Once each heard the other's hello, both targets name the same generation and the
        same nonces in the same order."""
        a, b = pair()
        self.assertEqual(a.heard(b.hello([G1, G0])), Heard.PEER)
        self.assertEqual(b.heard(a.hello([G0])), Heard.PEER)
        ta, tb = a.target([G0]), b.target([G1, G0])
        assert ta is not None and tb is not None
        self.assertEqual(ta.fingerprint, G0)
        self.assertEqual((ta.fingerprint, ta.nonces), (tb.fingerprint, tb.nonces))
        self.assertEqual(ta.peer_nonce, b.nonce)

    def test_newest_common_generation(self) -> None:
        """Both holding G0 and G1: they meet on G1."""
        a, b = pair()
        a.heard(b.hello([G1, G0]))
        target = a.target([G1, G0])
        assert target is not None
        self.assertEqual(target.fingerprint, G1)

    def test_nothing_in_common_or_nothing_heard(self) -> None:
        """No hello yet, or no generation in common: no target."""
        a, b = pair()
        self.assertIsNone(a.target([G0]))
        a.heard(b.hello([G1]))
        self.assertIsNone(a.target([G0]))

    def test_older_hellos_do_not_replace_newer(self) -> None:
        """A hello delivered late (an older seq, or an older incarnation) changes nothing."""
        a, b = pair()
        first = b.hello([G0])
        second = b.hello([G1])
        self.assertEqual(a.heard(second), Heard.PEER)
        self.assertEqual(a.heard(first), Heard.OLD)
        self.assertEqual(a.heard(Hello(B, 6, 99, "x", (G0,))), Heard.OLD)
        assert a.peer_hello is not None
        self.assertEqual(a.peer_hello.holds, (G1,))

    def test_copy_and_stranger(self) -> None:
        """This side's id with an unknown nonce from this incarnation or a later one is a copy;
        its own hellos and older incarnations are old; other ids are strangers."""
        a, _ = pair()
        self.assertEqual(a.heard(a.hello([G0])), Heard.OLD)
        self.assertEqual(a.heard(Hello(A, 4, 1, "old", (G0,))), Heard.OLD)
        self.assertEqual(a.heard(Hello(A, 5, 1, "other", (G0,))), Heard.COPY)
        self.assertEqual(a.heard(Hello(C, 9, 1, "x", (G0,))), Heard.STRANGER)

    def test_renewed_nonce_is_a_new_target(self) -> None:
        """After renew_nonce the target is another meeting; the renewed nonce is not a copy;
        a peer that renewed keeps its incarnation, one that restarted has a later one."""
        a, b = pair()
        a.heard(b.hello([G0]))
        before = a.target([G0])
        a.renew_nonce()
        self.assertNotEqual(a.target([G0]), before)
        self.assertEqual(a.heard(a.hello([G0])), Heard.OLD)
        b.renew_nonce()
        a.heard(b.hello([G0]))
        renewed = a.target([G0])
        assert before is not None and renewed is not None
        self.assertEqual(renewed.peer_counter, before.peer_counter)
        restarted = Planner(B, A, b.counter + 1)
        a.heard(restarted.hello([G0]))
        target = a.target([G0])
        assert target is not None
        self.assertGreater(target.peer_counter, before.peer_counter)

    def test_spent_peer_nonce(self) -> None:
        """After the peer left, its nonce is not met again until it says something new."""
        a, b = pair()
        a.heard(b.hello([G0]))
        a.spend(b.nonce)
        self.assertIsNone(a.target([G0]))
        b.renew_nonce()
        a.heard(b.hello([G0]))
        self.assertIsNotNone(a.target([G0]))

    def test_introduced_is_older_than_any_hello(self) -> None:
        """The code meeting's introduction gives a target at once; the peer's first lobby hello
        (same nonce) is newer and keeps the same target."""
        a, b = pair()
        a.introduced(b.nonce, [G0], b.counter)
        target = a.target([G0])
        self.assertEqual(a.heard(b.hello([G0])), Heard.PEER)
        self.assertEqual(a.target([G0]), target)
