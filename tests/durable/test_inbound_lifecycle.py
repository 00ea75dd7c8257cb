"""Tests for txdilation.durable.inbound_lifecycle: the read-pausing machine alone, over a
recording connection."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.inbound_lifecycle import InboundCore, inbound_machine
from txdilation.testing import missing_transitions


class Reading:
    """What the machine calls on a connection: pause_reading / resume_reading."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


class InboundLifecycleTests(SynchronousTestCase):
    def test_throttle_follows_crossings(self) -> None:
        """buffer_full pauses the connection's reading, buffer_drained resumes it; repeats
        are no-ops."""
        core = InboundCore()
        m = inbound_machine(core)
        connection: Any = Reading()
        m.connection_made(connection)
        self.assertIs(core.connection, connection)
        m.buffer_full()
        m.buffer_full()
        m.buffer_drained()
        m.buffer_drained()
        self.assertEqual(connection.calls, ["pause", "resume"])

    def test_throttle_carries_over_to_the_next_connection(self) -> None:
        """Over the bound without a connection: the next one starts paused."""
        core = InboundCore()
        m = inbound_machine(core)
        m.buffer_full()
        connection: Any = Reading()
        m.connection_made(connection)
        self.assertEqual(connection.calls, ["pause"])
        m.connection_lost()
        self.assertIsNone(core.connection)

    def test_stop_closes_the_gates(self) -> None:
        """stop: no connection, stopped, and everything later is ignored."""
        core = InboundCore()
        m = inbound_machine(core)
        m.stop()
        connection: Any = Reading()
        m.connection_made(connection)
        m.buffer_full()
        self.assertEqual((core.connection, core.stopped), (None, True))
        self.assertEqual(connection.calls, [])

    def test_complete(self) -> None:
        """No (state, input) pair is left to NoTransition."""
        self.assertEqual(missing_transitions(inbound_machine), [])

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(["made", "lost", "full", "drained", "stop"]), max_size=30))
    def test_pause_and_resume_alternate(self, ops: list[str]) -> None:
        """Any inputs: on each connection, pauses and resumes alternate, starting with a
        pause, and the connection is held only between made and lost/stop."""
        core = InboundCore()
        m = inbound_machine(core)
        connections: list[Reading] = []
        for op in ops:
            if op == "made":
                connections.append(Reading())
                m.connection_made(connections[-1])  # type: ignore[arg-type]
            elif op == "lost":
                m.connection_lost()
            elif op == "full":
                m.buffer_full()
            elif op == "drained":
                m.buffer_drained()
            else:
                m.stop()
        for connection in connections:
            calls = connection.calls
            self.assertEqual(
                calls, ["pause", "resume"] * (len(calls) // 2) + ["pause"] * (len(calls) % 2)
            )
