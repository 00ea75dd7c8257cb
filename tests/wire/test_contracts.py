"""Tests for txdilation.wire.contracts: the reactor type is honest (what it combines, a real
reactor provides), and the facades provide the interfaces between layers."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.interfaces import IReactorFDSet, IReactorTCP, IReactorThreads, IReactorTime
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.selection.test_connector import make
from txdilation.wire.contracts import ICandidateOwner, IDilationReactor
from txdilation.wire.roles import LEADER


class ReactorTypeTests(SynchronousTestCase):
    def test_a_real_reactor_provides_what_it_names(self) -> None:
        """IDilationReactor extends exactly the interfaces a running reactor provides (the
        clock, TCP, file descriptors, threads), so typing a reactor with it claims nothing
        false; the test reactor provides the clock and TCP."""
        combined = set(IDilationReactor.__bases__)
        self.assertEqual(combined, {IReactorTime, IReactorTCP, IReactorFDSet, IReactorThreads})
        for interface in combined:
            self.assertTrue(interface.providedBy(reactor), interface)
        memory = MemoryReactorClock()
        self.assertTrue(IReactorTime.providedBy(memory) and IReactorTCP.providedBy(memory))


class FacadeTests(SynchronousTestCase):
    def test_connector_is_a_candidate_owner(self) -> None:
        """The Connector provides ICandidateOwner (what an L2 connection reports to)."""
        connector, _, _ = make(LEADER, no_listen=True)
        verifyObject(ICandidateOwner, connector)
