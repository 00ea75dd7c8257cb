"""One generation's outbound dials (txdilation.selection.dialing) alone, on a MemoryReactorClock:
the dial records, when relays start, punch retries and the relay grace."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionRefusedError, NoRouteError
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.attempts import AttemptLog
from txdilation.selection.connector_settings import ConnectorSettings
from txdilation.selection.dialing import Dial, Dialer
from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint
from txdilation.selection.punch import PUNCH_PRIORITY, PUNCH_RETRY_DELAY
from txdilation.selection.punch_schedule import CROSSING_WINDOW
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, FIRST_RETRIES, RetrySchedule
from txdilation.telemetry import Telemetry
from txdilation.wire.roles import LEADER

RELAY = RelayV1Hint((DirectTCPV1Hint("127.0.0.1", 4001),))
PUNCHED = DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)
ADDR = IPv4Address("TCP", "127.0.0.1", 40000)


class Harness:
    """A Dialer on a MemoryReactorClock; what it builds, reports and how it is told."""

    def __init__(self, *, bind_port: int | None = None, telemetry: bool = False, **kw: Any):
        self.reactor = MemoryReactorClock()
        self.settings = ConnectorSettings(
            role=LEADER, dilation_key=b"k" * 32, side="a" * 16, relay_delay=2.0, **kw
        )
        self.built: list[Dial] = []
        self.statuses: list[Any] = []
        self.selected = False
        self.records: list[dict[str, Any]] = []
        log = None
        if telemetry:
            log = AttemptLog(Telemetry(self.reactor, sink=self.records.append), self.reactor)
        self.dialer = Dialer(
            self.settings,
            self.reactor,
            attempt_log=log,
            build=self.build,
            bind_port=lambda: bind_port,
            hint_status=self.statuses.extend,
            selected=lambda: self.selected,
        )

    def build(self, dial: Dial) -> Any:
        self.built.append(dial)
        return Protocol()

    def ports(self) -> list[int]:
        """The ports dialled so far, in order."""
        return [port for _host, port, *_ in self.reactor.tcpClients]

    def refuse(self, index: int) -> None:
        """The dial ``index`` (in tcpClients order) is refused."""
        factory = self.reactor.tcpClients[index][2]
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))

    def fail(self, index: int) -> None:
        """The dial ``index`` (in tcpClients order) fails otherwise (no route)."""
        factory = self.reactor.tcpClients[index][2]
        factory.clientConnectionFailed(None, Failure(NoRouteError()))

    def connect(self, index: int) -> Dial:
        """The dial ``index`` connects: its protocol is built; returns its record."""
        protocol = self.reactor.tcpClients[index][2].buildProtocol(ADDR)
        protocol.makeConnection(StringTransport())
        return self.built[-1]


class DialTests(SynchronousTestCase):
    def test_direct_first_by_priority_relays_after_the_delay(self) -> None:
        """Direct hints are dialled at once, highest priority first; the relay after the relay
        delay; every hint being tried is reported; each dial is one record whose connection
        knows the hint, whether it goes through the relay, and what to say to the relay."""
        h = Harness()
        h.dialer.use_hints(
            [DirectTCPV1Hint("127.0.0.1", 7, 0.0), DirectTCPV1Hint("127.0.0.1", 8, 1.0), RELAY]
        )
        self.assertEqual(h.ports(), [8, 7])
        self.assertEqual(
            {(s.url, s.is_direct) for s in h.statuses},
            {("127.0.0.1:7", True), ("127.0.0.1:8", True), ("127.0.0.1:4001", False)},
        )
        h.reactor.advance(1.9)
        self.assertEqual(h.ports(), [8, 7])
        h.reactor.advance(0.1)
        self.assertEqual(h.ports(), [8, 7, 4001])
        relay = h.connect(2)
        self.assertEqual((relay.via_relay, relay.relay), (True, RELAY.hints[0]))
        self.assertTrue(relay.relay_line and relay.relay_line.startswith(b"please relay "))
        direct = h.connect(0)
        self.assertEqual((direct.via_relay, direct.relay, direct.relay_line), (False, None, None))
        self.assertEqual(direct.description, "->tcp:127.0.0.1:8")

    def test_relays_start_when_every_direct_dial_is_over(self) -> None:
        """A direct dial stays outstanding until it fails or the connection it made closes
        (the Connector's dial_over); once none is left, the relay is dialled without waiting
        for the delay. Ending a dial twice counts once."""
        h = Harness()
        h.dialer.use_hints(
            [DirectTCPV1Hint("127.0.0.1", 7), DirectTCPV1Hint("127.0.0.1", 8), RELAY]
        )
        self.assertEqual(h.dialer.direct_outstanding, 2)
        h.refuse(0)
        self.assertEqual(h.dialer.direct_outstanding, 1)
        dial = h.connect(1)
        self.assertEqual(h.dialer.direct_outstanding, 1)  # its connection is still open
        self.assertEqual(h.ports(), [7, 8])
        h.dialer.dial_over(dial)
        h.dialer.dial_over(dial)
        self.assertEqual(h.dialer.direct_outstanding, 0)
        self.assertEqual(h.ports(), [7, 8, 4001])

    def test_no_relay_after_selection_or_cancel(self) -> None:
        """Once a connection is selected, the end of the last direct dial starts no relay;
        after cancel_attempts the cancelled dials start none either, and nothing is busy once
        the timers are cancelled too."""
        h = Harness()
        h.dialer.use_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        h.selected = True
        h.refuse(0)
        self.assertEqual(h.ports(), [7])
        h = Harness()
        h.dialer.use_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        self.assertTrue(h.dialer.busy)
        h.dialer.cancel_attempts()
        h.dialer.cancel_timers()
        h.reactor.advance(5)
        self.assertEqual(h.ports(), [7])
        self.assertFalse(h.dialer.busy)

    def test_each_relay_once(self) -> None:
        """The same relay endpoint in two hint messages is dialled once."""
        h = Harness(no_listen=True)
        h.dialer.use_hints([RELAY])
        h.dialer.use_hints([RELAY])
        self.assertEqual(h.ports(), [4001])

    def test_every_try_is_a_telemetry_attempt(self) -> None:
        """With an AttemptLog, every dial is one attempt (refused: connect_failed)."""
        h = Harness(telemetry=True, no_listen=True)
        h.dialer.use_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        h.refuse(0)
        ended = [r for r in h.records if r["event"] == "attempt_ended"]
        self.assertEqual([r["outcome"] for r in ended], ["connect_failed"])


class PunchTests(SynchronousTestCase):
    def test_a_punch_retry_is_the_same_dial(self) -> None:
        """A refused dial to a punched hint from the listening port is tried again every
        PUNCH_RETRY_DELAY within the window: one outstanding dial throughout, busy while a
        retry is due, over once the window has passed (CROSSING_WINDOW, not PUNCH_WINDOW: it
        was refused and low TTLs are excluded here, so only crossing SYNs can get through)."""
        h = Harness(bind_port=5555)
        h.dialer.use_hints([PUNCHED])
        tries = 1
        while True:
            h.refuse(-1)
            if not h.dialer.punch_retries:
                break
            self.assertEqual(h.dialer.direct_outstanding, 1)
            self.assertTrue(h.dialer.busy)
            h.reactor.advance(PUNCH_RETRY_DELAY)
            tries += 1
        self.assertEqual(tries, int(CROSSING_WINDOW / PUNCH_RETRY_DELAY) + 1)
        self.assertEqual((h.dialer.direct_outstanding, h.dialer.busy), (0, False))

    def test_background_ends_relays_and_dials_direct_hints_again(self) -> None:
        """In the background (a relayed link is to move to a direct path): relay dials end and
        no relay is dialled any more; each direct hint is tried again on the schedule, with
        short connect timeouts, and a try still connecting at the next time is given up for a
        new one."""
        h = Harness()
        lan = DirectTCPV1Hint("192.168.1.2", 6000)
        h.dialer.use_hints([RELAY])
        h.dialer.use_hints([lan])
        relay_connect = h.reactor.tcpClients[0]
        h.refuse(1)
        h.dialer.go_on_in_background(RetrySchedule(h.reactor.seconds()))
        self.assertEqual(relay_connect[0], "127.0.0.1")
        h.dialer.use_hints([RELAY])  # no relay once in the background
        self.assertEqual(h.ports().count(4001), 1)
        h.reactor.advance(FIRST_RETRIES[0])
        self.assertEqual(h.ports().count(6000), 2)
        self.assertLessEqual(h.reactor.tcpClients[-1][3], BACKGROUND_CONNECT_TIMEOUT)
        h.reactor.advance(FIRST_RETRIES[1])  # still connecting: given up for a new try
        self.assertEqual(h.ports().count(6000), 3)
        self.assertEqual(h.dialer.direct_outstanding, 1)
        h.dialer.cancel_attempts()
        h.dialer.cancel_timers()
        self.assertEqual(h.reactor.getDelayedCalls(), [])

    def test_background_tries_a_punched_dial_whose_retry_was_due(self) -> None:
        """A punched dial that failed otherwise than by a refusal just before the generation
        went on in the background (its retry was due, and is cancelled) is tried again on the
        background schedule."""
        h = Harness(bind_port=5555)
        h.dialer.use_hints([PUNCHED])
        h.fail(-1)
        self.assertTrue(h.dialer.punch_retries)
        h.dialer.go_on_in_background(RetrySchedule(h.reactor.seconds()))
        self.assertFalse(h.dialer.punch_retries)
        tries = len(h.reactor.tcpClients)
        h.reactor.advance(FIRST_RETRIES[0])
        self.assertEqual(len(h.reactor.tcpClients), tries + 1)
        self.assertEqual(h.dialer.direct_outstanding, 1)

    def test_background_keeps_crossing_tries_going(self) -> None:
        """A punched dial refused just before the generation went on in the background (its
        plan relies on crossing SYNs: low TTLs are excluded here) keeps its retry: its refused
        tries go on without waiting for the schedule's first try."""
        h = Harness(bind_port=5555)
        h.dialer.use_hints([PUNCHED])
        h.refuse(-1)
        (dial,) = h.dialer.direct_dials
        assert dial.plan is not None
        self.assertTrue(dial.plan.crossing_only)
        h.dialer.go_on_in_background(RetrySchedule(h.reactor.seconds()))
        self.assertTrue(h.dialer.punch_retries)
        self.assertEqual(h.dialer.direct_outstanding, 1)
        tries = len(h.reactor.tcpClients)
        while h.reactor.seconds() < FIRST_RETRIES[0] / 2:
            h.reactor.advance(0.005)
            if len(h.reactor.tcpClients) > tries:
                tries = len(h.reactor.tcpClients)
                h.refuse(-1)
        self.assertGreater(tries, 10)  # well before the schedule's first try
        h.dialer.cancel_attempts()
        h.dialer.cancel_timers()
        self.assertEqual(h.reactor.getDelayedCalls(), [])

    def test_background_leaves_a_connected_dial_alone(self) -> None:
        """A direct dial whose connection is open (in its handshake) is not dialled again."""
        h = Harness()
        h.dialer.use_hints([DirectTCPV1Hint("192.168.1.2", 6000)])
        h.connect(0)
        h.dialer.go_on_in_background(RetrySchedule(h.reactor.seconds()))
        h.reactor.advance(10)
        self.assertEqual(h.ports(), [6000])
