"""Every lifecycle machine handles every (state, input) pair, and random input sequences never
raise anything but documented errors (L2 connection, connector, manager; the L4/L5 machines
are covered in their own test modules)."""

from __future__ import annotations

import os
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import reactor as _reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.selection.test_connector import FakeCandidate, RecordingOwner, make
from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.link.connection_lifecycle import l2_machine
from txdilation.mailbox.manager_lifecycle import manager_machine
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.connector_lifecycle import connector_machine
from txdilation.settings import NetworkSettings
from txdilation.testing import missing_transitions
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import FOLLOWER, LEADER

reactor: Any = _reactor


class CompletenessTests(SynchronousTestCase):
    def test_every_state_input_pair_is_defined(self) -> None:
        """No (state, input) pair of the L2, connector or manager machine is left to
        Automat's NoTransition: each is a transition or a documented no-op/rejection."""
        for machine in (l2_machine, connector_machine, manager_machine):
            self.assertEqual(missing_transitions(machine), [])


class Owner:
    def __init__(self) -> None:
        self.ready: list[Any] = []
        self.failed: list[LinkLoss] = []

    def candidate_ready(self, connection: Any) -> None:
        self.ready.append(connection)

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        self.failed.append(reason)


class Sink:
    def got_record(self, record: Any) -> None:
        pass

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        pass


L2_INPUTS = [
    "connected_via_relay",
    "connected_directly",
    "relay_accepted",
    "prologue_received",
    "handshake_completed",
    "kcm_received",
    "select",
    "lost",
    "data",
]


class L2MachineFuzzTests(SynchronousTestCase):
    @settings(max_examples=300, deadline=None)
    @given(
        role=st.sampled_from([LEADER, FOLLOWER]),
        relay=st.booleans(),
        steps=st.lists(
            st.sampled_from(L2_INPUTS) | st.binary(max_size=80).map(lambda b: ("bytes", b)),
            max_size=20,
        ),
    )
    def test_random_inputs_never_escape(self, role: Any, relay: bool, steps: list[Any]) -> None:
        """Any sequence of lifecycle inputs and arbitrary received bytes on an L2 connection
        raises nothing: misuse and garbage drop the connection (abortConnection) instead."""
        clock = Clock()
        owner = Owner()
        p = DilatedConnectionProtocol(
            role=role,
            dilation_key=b"k" * 32,
            owner=owner,
            description="fuzz",
            is_direct=not relay,
            relay_line=b"please relay x for side y\n" if relay else None,
            clock=clock,
        )
        transport = StringTransport()
        p.makeConnection(transport)
        for step in steps:
            if isinstance(step, tuple):
                p.dataReceived(step[1])
            elif step == "select":
                p.events.select(Sink())
            elif step == "lost":
                p.events.lost(LinkLoss(Cause.DROPPED, "fuzz"))
            elif step == "data":
                p.dataReceived(b"\x00\x00\x00\x30" + os.urandom(48))
            else:
                getattr(p.events, step)()
        clock.advance(60)  # the handshake timeout fires or is harmless
        p.connectionLost(Failure(Exception("end")))

    def test_garbage_before_prologue_aborts(self) -> None:
        """An HTTP request instead of the prologue aborts the connection at once, and the
        owner hears why when it closes."""
        owner = Owner()
        p = DilatedConnectionProtocol(
            role=LEADER,
            dilation_key=b"k" * 32,
            owner=owner,
            description="t",
            is_direct=True,
            relay_line=None,
            clock=Clock(),
        )
        transport = StringTransport()
        p.makeConnection(transport)
        p.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
        self.assertTrue(transport.disconnecting)
        p.connectionLost(Failure(Exception("aborted")))
        self.assertEqual(len(owner.failed), 1)
        self.assertIn("FramingError", str(owner.failed[0]))
        self.assertIs(owner.failed[0].cause, Cause.PROTOCOL_ERROR)

    def test_idle_connection_times_out(self) -> None:
        """A connection that never completes the KCM exchange is aborted after the
        handshake timeout."""
        clock = Clock()
        p = DilatedConnectionProtocol(
            role=FOLLOWER,
            dilation_key=b"k" * 32,
            owner=Owner(),
            description="t",
            is_direct=True,
            relay_line=None,
            clock=clock,
            handshake_timeout=5,
        )
        transport = StringTransport()
        p.makeConnection(transport)
        clock.advance(4.9)
        self.assertFalse(transport.disconnecting)
        clock.advance(0.2)
        self.assertTrue(transport.disconnecting)


CONNECTOR_STEPS = ["direct", "relay", "fail", "stop", "tick", "hints", "listener"]


class ConnectorMachineFuzzTests(SynchronousTestCase):
    @settings(max_examples=300, deadline=None)
    @given(
        role=st.sampled_from([LEADER, FOLLOWER]),
        steps=st.lists(st.sampled_from(CONNECTOR_STEPS), max_size=20),
    )
    def test_random_inputs_select_at_most_one(self, role: Any, steps: list[str]) -> None:
        """Any order of candidates, failures, hints, timer ticks and stop: at most one
        connection is ever selected, and every other candidate is aborted once the connector
        has selected or stopped."""
        c, owner, clock = make(role)
        candidates: list[FakeCandidate] = []
        failed: set[int] = set()
        for step in steps:
            if step in ("direct", "relay"):
                cand = FakeCandidate(f"->{step}", step == "direct")
                candidates.append(cand)
                c.candidate_ready(cand)
            elif step == "fail" and candidates:
                c.candidate_failed(candidates[-1], LinkLoss(Cause.DROPPED, "gone"))
                failed.add(id(candidates[-1]))
            elif step == "stop":
                c.events.stop()
            elif step == "tick":
                clock.advance(1)
            elif step == "hints":
                c.events.hints_received([])
            elif step == "listener":
                c.events.listener_ready([])
        c.events.stop()
        self.assertLessEqual(len(owner.made), 1)
        winner = owner.made[0] if owner.made else None
        if winner is not None:
            self.assertIsNotNone(winner.selected_with)
            self.assertFalse(winner.aborted)
        for cand in candidates:
            if cand is not winner and id(cand) not in failed:
                self.assertTrue(cand.aborted, "a losing candidate was left open")
            if cand is not winner:
                self.assertIsNone(cand.selected_with)


class AddressDiscoveryTests(TestCase):
    timeout = 10

    @inlineCallbacks
    def test_discovery_runs_off_the_reactor_thread(self) -> Any:
        """Without configured hint addresses, for a listener on every address, stock's
        blocking find_addresses() runs in a thread, never on the reactor thread (stock defect
        11); a listener bound to one address needs no discovery: it advertises that address,
        the only one it takes."""
        from wormhole import ipaddrs

        seen: list[str] = []

        def find_addresses() -> list[str]:
            seen.append(threading.current_thread().name)
            return ["127.0.0.1"]

        original = ipaddrs.find_addresses
        ipaddrs.find_addresses = find_addresses  # stock's module, restored below
        self.addCleanup(setattr, ipaddrs, "find_addresses", original)

        def advertiser(interface: str | None) -> Any:
            settings = ConnectorSettings(
                role=LEADER,
                dilation_key=b"k" * 32,
                side="a" * 16,
                network=NetworkSettings(interface, None),
            )
            return Connector(settings, owner=RecordingOwner(), reactor=reactor)._advertiser

        yield advertiser(None)._find_addresses()  # (discovery only: nothing listens)
        self.assertEqual(len(seen), 1)
        self.assertNotEqual(seen[0], threading.current_thread().name)
        found = yield advertiser("127.0.0.1")._find_addresses()
        self.assertEqual(found, ["127.0.0.1"])
        self.assertEqual(len(seen), 1)  # not discovered again


class NetworkSettingsTests(SynchronousTestCase):
    def test_environment_variables(self) -> None:
        """TXDILATION_LISTEN_INTERFACE and TXDILATION_HINT_ADDRESSES are read, trimmed and
        split; empty values mean the defaults."""
        s = NetworkSettings.from_environ(
            {
                "TXDILATION_LISTEN_INTERFACE": " 127.0.0.1 ",
                "TXDILATION_HINT_ADDRESSES": "127.0.0.1, ::1,,",
            }
        )
        self.assertEqual(s, NetworkSettings("127.0.0.1", ("127.0.0.1", "::1")))
        self.assertEqual(NetworkSettings.from_environ({}), NetworkSettings(None, None))
        self.assertEqual(
            NetworkSettings.from_environ({"TXDILATION_HINT_ADDRESSES": " "}),
            NetworkSettings(None, None),
        )
