"""The planner: this process's own messages, a previous process of this side, a copy of this
side, the peer's processes (bounded), impostors ignored, and the newest common generation."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.hello import Hello
from txdilation.pairing.plan import MAX_PROCESSES, Heard, Planner

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16
G0, G1 = "0" * 16, "1" * 16


def pair() -> tuple[Planner, Planner]:
    return Planner(A, B, 5), Planner(B, A, 7)


class PlannerTests(SynchronousTestCase):
    def test_peer_processes(self) -> None:
        """The peer's messages are PEER once (a repeat through another slot is OWN); its hello
        tells what the process holds."""
        a, b = pair()
        hello = b.hello([G1, G0])
        self.assertEqual(a.heard(hello), Heard.PEER)
        self.assertEqual(a.heard(hello), Heard.OWN)
        process = a.process(b.nonce)
        assert process is not None
        self.assertEqual((process.counter, process.holds), (7, (G1, G0)))
        offer = b.directed("offer", a.nonce, G0, 1, b"n")
        self.assertEqual(a.heard(offer), Heard.PEER)

    def test_own_old_copy_and_stranger(self) -> None:
        """This process's messages are OWN (also after renewing its nonce); an older process
        of this side is OLD; this side's id from this incarnation or a later one, or this
        process's nonce with a number it never used, is a COPY; another id is IGNORED."""
        a, _ = pair()
        self.assertEqual(a.heard(a.hello([G0])), Heard.OWN)
        a.renew_nonce()
        self.assertEqual(a.heard(a.hello([G0])), Heard.OWN)
        self.assertEqual(a.heard(Hello(A, 4, 1, "1" * 16, (G0,))), Heard.OLD)
        self.assertEqual(a.heard(Hello(A, 5, 1, "2" * 16, (G0,))), Heard.COPY)
        self.assertEqual(a.heard(Hello(A, 5, 99, a.nonce, (G0,))), Heard.COPY)
        self.assertEqual(a.heard(Hello(C, 9, 1, "3" * 16, (G0,))), Heard.IGNORED)

    def test_impostors_ignored_and_memory_bounded(self) -> None:
        """A process marked an impostor is ignored from then on; at most MAX_PROCESSES peer
        processes are kept, however many claim the peer's id (10,000 here)."""
        a, b = pair()
        a.heard(b.hello([G0]))
        a.impostor(b.nonce)
        self.assertEqual(a.heard(b.hello([G0])), Heard.IGNORED)
        for n in range(10_000):
            a.heard(Hello(B, 8, 1, f"{n:016x}", (G0,)))
        self.assertLessEqual(len(a.processes), MAX_PROCESSES)

    def test_newest_common_generation(self) -> None:
        """The newest generation this side holds that the peer's process holds; none shared:
        None; a huge counter changes nothing about it."""
        self.assertEqual(Planner.newest_common([G1, G0], [G0, G1]), G1)
        self.assertEqual(Planner.newest_common([G1, G0], [G0]), G0)
        self.assertIsNone(Planner.newest_common([G1], [G0]))
        a, _ = pair()
        a.heard(Hello(B, 2**40, 1, "4" * 16, (G0,)))
        process = a.process("4" * 16)
        assert process is not None
        self.assertEqual(Planner.newest_common([G1, G0], process.holds), G0)

    def test_introduced(self) -> None:
        """The code meeting's peer process is known at once."""
        a, b = pair()
        process = a.introduced(b.nonce, 1, [G0])
        self.assertIs(a.process(b.nonce), process)
