"""Tests for txdilation.selection.probe: reachability probes of a stock peer's direct hints, on
a MemoryReactorClock (connects are recorded, their outcomes delivered by the test)."""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionRefusedError, DNSLookupError
from twisted.internet.error import TimeoutError as ConnectTimeoutError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint
from txdilation.selection.probe import ReachabilityProber, proves_reachable
from txdilation.selection.upgrade import RetrySchedule


class ProbeTests(SynchronousTestCase):
    def make(self, hints: list[Any]) -> ReachabilityProber:
        self.reactor = MemoryReactorClock()
        self.proofs: list[str] = []
        schedule = RetrySchedule(self.reactor.seconds())
        return ReachabilityProber(self.reactor, hints, schedule, self.proofs.append)

    def dialled(self) -> list[tuple[str, int]]:
        return [(c[0], c[1]) for c in self.reactor.tcpClients]

    def answer(self, index: int, error: Exception) -> None:
        factory = self.reactor.tcpClients[index][2]
        factory.clientConnectionFailed(None, Failure(error))

    def run_to_next_probe(self) -> None:
        self.reactor.advance(self.reactor.getDelayedCalls()[0].getTime() - self.reactor.seconds())

    def test_only_ip_literal_direct_hints_are_probed(self) -> None:
        """Hostnames and relay hints are left alone; nothing happens before start()."""
        prober = self.make(
            [
                DirectTCPV1Hint("192.0.2.1", 4001),
                DirectTCPV1Hint("peer.example", 4002),
                DirectTCPV1Hint("2001:db8::1", 4003),
                RelayV1Hint(()),
            ]
        )
        self.assertEqual(prober.targets, 2)
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        prober.start()
        self.run_to_next_probe()
        self.assertEqual(self.dialled(), [("192.0.2.1", 4001), ("2001:db8::1", 4003)])

    def test_a_refusal_proves_a_path_once(self) -> None:
        """A RST answers: the proof is reported once, the other probe is cancelled and no
        probe follows."""
        prober = self.make([DirectTCPV1Hint("192.0.2.1", 1), DirectTCPV1Hint("192.0.2.2", 2)])
        prober.start()
        self.run_to_next_probe()
        self.answer(0, ConnectionRefusedError())
        self.assertEqual(self.proofs, ["192.0.2.1:1"])
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.answer(1, ConnectionRefusedError())
        self.assertEqual(self.proofs, ["192.0.2.1:1"])

    def test_timeouts_prove_nothing_and_probes_go_on(self) -> None:
        """A timeout or another error proves nothing: the next scheduled probe dials again
        (one probe per hint in flight at a time)."""
        prober = self.make([DirectTCPV1Hint("192.0.2.1", 1)])
        prober.start()
        self.run_to_next_probe()
        self.run_to_next_probe()
        self.assertEqual(len(self.dialled()), 1)  # still in flight: not dialled twice
        self.answer(0, ConnectTimeoutError())
        self.run_to_next_probe()
        self.assertEqual(len(self.dialled()), 2)
        self.assertEqual(self.proofs, [])

    def test_hints_added_later_and_stop(self) -> None:
        """Hints that come after the start are probed too; after stop() nothing is."""
        prober = self.make([])
        prober.start()
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        prober.add([DirectTCPV1Hint("192.0.2.9", 9), DirectTCPV1Hint("192.0.2.9", 9)])
        self.assertEqual(prober.targets, 1)
        self.run_to_next_probe()
        self.assertEqual(self.dialled(), [("192.0.2.9", 9)])
        prober.stop()
        prober.stop()
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.answer(0, ConnectionRefusedError())
        self.assertEqual(self.proofs, [])

    def test_proves_reachable(self) -> None:
        """A connection or a refusal proves a path; a timeout or a DNS error does not."""
        self.assertTrue(proves_reachable(object()))
        self.assertTrue(proves_reachable(Failure(ConnectionRefusedError())))
        self.assertFalse(proves_reachable(Failure(ConnectTimeoutError())))
        self.assertFalse(proves_reachable(Failure(DNSLookupError())))
