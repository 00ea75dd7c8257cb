"""One generation's listener and direct hints (txdilation.selection.advertise) alone, on a
MemoryReactorClock: listening, publishing each hint once, retrying a busy port, admitting
inbound connections under the cap, and the end of the race."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection import advertise
from txdilation.selection.advertise import LISTEN_RETRY_DELAY, Advertiser
from txdilation.selection.attempts import AttemptLog
from txdilation.selection.connector_settings import ConnectorSettings
from txdilation.selection.hints import DirectTCPV1Hint
from txdilation.settings import NetworkSettings
from txdilation.telemetry import Telemetry
from txdilation.wire.roles import LEADER

ADDR = IPv4Address("TCP", "10.0.0.9", 40000)


class BusyPortReactor(MemoryReactorClock):
    """A MemoryReactorClock whose first ``busy`` listens fail as if the port were taken."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy

    def listenTCP(self, port: int, factory: Any, backlog: int = 50, interface: str = "") -> Any:
        if self.busy:
            self.busy -= 1
            raise CannotListenError(interface, port, OSError("in use"))
        return super().listenTCP(port, factory, backlog, interface)


class Connection:
    """What the Advertiser holds of an accepted connection."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.prologue_received = False
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Harness:
    def __init__(
        self,
        network: NetworkSettings | None = None,
        reactor: MemoryReactorClock | None = None,
        cap: int = 3,
        telemetry: bool = False,
    ) -> None:
        self.reactor = reactor if reactor is not None else MemoryReactorClock()
        self.settings = ConnectorSettings(
            role=LEADER,
            dilation_key=b"k" * 32,
            side="a" * 16,
            network=network or NetworkSettings("127.0.0.1", ("127.0.0.1",)),
            max_unauthenticated=cap,
        )
        self.published: list[list[Any]] = []
        self.accepted: list[tuple[str, Any]] = []
        self.late = 0
        self.records: list[dict[str, Any]] = []
        log = None
        if telemetry:
            log = AttemptLog(Telemetry(self.reactor, sink=self.records.append), self.reactor)
        self.advertiser = Advertiser(
            self.settings,
            self.reactor,
            attempt_log=log,
            accept=self.accept,
            publish=self.published.append,
            punched=lambda: None,
            late=self.went_late,
        )

    def accept(self, description: str, attempt: Any) -> Any:
        self.accepted.append((description, attempt))
        return Connection(description)

    def went_late(self) -> None:
        self.late += 1


class ListeningTests(SynchronousTestCase):
    def test_listens_and_publishes_its_hints_once(self) -> None:
        """The listener binds the configured interface; the configured addresses are
        published with its port (or the hint port), once each; no punching here."""
        h = Harness(NetworkSettings("127.0.0.1", ("127.0.0.1", "10.0.0.5"), hint_port=7000))
        h.advertiser.start()
        (_port, _factory, _backlog, interface) = h.reactor.tcpServers[0]
        self.assertEqual(interface, "127.0.0.1")
        self.assertEqual(
            h.published,
            [[DirectTCPV1Hint("127.0.0.1", 7000, 0.0), DirectTCPV1Hint("10.0.0.5", 7000, 0.0)]],
        )
        h.advertiser.network_changed()  # nothing new
        self.assertEqual(len(h.published), 1)
        self.assertIsNone(h.advertiser.punch_port())

    def test_new_addresses_after_a_network_change(self) -> None:
        """Discovered addresses: loopback is left out while others exist; a network change
        publishes only the addresses found since."""
        found = ["127.0.0.1", "10.0.0.5"]
        self.patch(advertise.ipaddrs, "find_addresses", lambda: list(found))
        h = Harness(NetworkSettings("", None))
        h.advertiser.start()
        port = h.advertiser.port
        self.assertEqual(h.published, [[DirectTCPV1Hint("10.0.0.5", port, 0.0)]])
        found.append("10.0.0.9")
        h.advertiser.network_changed()
        self.assertEqual(h.published[1:], [[DirectTCPV1Hint("10.0.0.9", port, 0.0)]])

    def test_one_interface_advertises_only_it(self) -> None:
        """A listener bound to one address and no hint addresses: that address is the only
        hint, however many the host has (the others would lead nowhere); discovery is not even
        asked."""
        self.patch(advertise.ipaddrs, "find_addresses", lambda: ["10.0.0.5", "192.0.2.8"])
        h = Harness(NetworkSettings("127.0.0.1", None))
        h.advertiser.start()
        port = h.advertiser.port
        self.assertEqual(h.published, [[DirectTCPV1Hint("127.0.0.1", port, 0.0)]])
        h.advertiser.network_changed()
        self.assertEqual(len(h.published), 1)

    def test_busy_fixed_port_is_retried(self) -> None:
        """A fixed port still held (by the previous generation's listener) is tried again
        every LISTEN_RETRY_DELAY; meanwhile a retry is pending; then it listens."""
        reactor = BusyPortReactor(busy=2)
        h = Harness(NetworkSettings("127.0.0.1", ("127.0.0.1",), listen_port=4500), reactor)
        h.advertiser.start()
        self.assertIsNotNone(h.advertiser.listen_retry)
        reactor.advance(LISTEN_RETRY_DELAY)
        self.assertEqual(reactor.tcpServers, [])
        reactor.advance(LISTEN_RETRY_DELAY)
        self.assertEqual([s[0] for s in reactor.tcpServers], [4500])
        self.assertIsNone(h.advertiser.listen_retry)
        self.assertEqual(len(h.published), 1)

    def test_no_retry_once_the_race_is_over(self) -> None:
        """Stopped while waiting for a busy port: the retry is cancelled, nothing listens."""
        reactor = BusyPortReactor(busy=1)
        h = Harness(NetworkSettings("127.0.0.1", ("127.0.0.1",), listen_port=4500), reactor)
        h.advertiser.start()
        h.advertiser.stop_listening()
        h.advertiser.cancel_retry()
        reactor.advance(1.0)
        self.assertEqual((reactor.tcpServers, h.advertiser.listen_retry), ([], None))

    def test_stop_listening(self) -> None:
        """Once the race is over the listener stops and no hint is published any more."""
        h = Harness()
        h.advertiser.start()
        stopped: list[bool] = []
        h.advertiser.listeners[0].stopListening = lambda: stopped.append(True)  # type: ignore[method-assign]
        h.advertiser.stop_listening()
        self.assertEqual((h.advertiser.listeners, stopped), ([], [True]))
        h.advertiser.network_changed()
        self.assertEqual(len(h.published), 1)

    def test_a_listener_up_after_the_race_is_handed_back(self) -> None:
        """A listener that comes up after the race ended is handed to ``late`` (to be
        closed), and publishes nothing."""
        h = Harness()
        h.advertiser.stop_listening()
        h.advertiser.start()
        self.assertEqual((h.late, h.published), (1, []))


class AdmissionTests(SynchronousTestCase):
    def test_inbound_connections_under_the_cap(self) -> None:
        """Each accepted connection is one inbound telemetry attempt, described by its peer's
        address; beyond the cap the oldest one without a prologue is closed first."""
        h = Harness(cap=2, telemetry=True)
        h.advertiser.start()
        first = h.advertiser.accepted(ADDR)
        second = h.advertiser.accepted(ADDR)
        first.prologue_received = True
        third = h.advertiser.accepted(ADDR)
        self.assertEqual([c.aborted for c in (first, second, third)], [False, True, False])
        self.assertEqual(len(h.advertiser.unauthenticated), 2)
        self.assertEqual({d for d, _ in h.accepted}, {"<-tcp:10.0.0.9:40000"})
        started = [r for r in h.records if r["event"] == "attempt_started"]
        self.assertEqual([r["direction"] for r in started], ["inbound"] * 3)
        h.advertiser.stop_listening()
        self.assertEqual(len(h.advertiser.unauthenticated), 0)
