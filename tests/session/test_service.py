"""Tests of a whole session in this process: txdilation.session.service.Session over the real
mailbox server (tests.support.harness.RealServersMixin), two sessions joined by a wormhole, with
local TCP services on 127.0.0.1. They pin the lifecycle promises of the module docstring: forwarding
both ways with half-close, refusing names not given with --connect, the clean stop (drain,
close, one final ``closed`` event), fatal errors, and link cuts.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

import txdilation
from tests.support.harness import LOOPBACK, RealServersMixin
from tests.support.waits import sleep
from txdilation.reporting.status_events import EventLog, StatusWriter
from txdilation.session.config import build_config
from txdilation.session.service import Session
from txdilation.session.service_lifecycle import session_machine
from txdilation.testing import missing_transitions


@implementer(IHalfCloseableProtocol)
class HalfCloseEcho(Protocol):
    """The local service: echoes, and closes its write side after its input ended."""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)

    def readConnectionLost(self) -> None:
        self.transport.loseWriteConnection()

    def writeConnectionLost(self) -> None:
        self.transport.loseConnection()


@implementer(IHalfCloseableProtocol)
class Client(Protocol):
    """A local client: collects what it reads; ``eof`` fires at end of input, ``lost`` at
    connectionLost."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof: Deferred[None] = Deferred()
        self.lost: Deferred[None] = Deferred()
        self.reason: Failure | None = None

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def readConnectionLost(self) -> None:
        self.eof.callback(None)

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.reason = reason
        if not self.eof.called:
            self.eof.callback(None)
        self.lost.callback(None)


class SessionTestsMixin(RealServersMixin):
    """Builds sessions against this test's mailbox server, each with an EventLog."""

    timeout = 30

    def setUp(self) -> Any:
        if not txdilation.is_installed():
            txdilation.install()
            self.addCleanup(txdilation.uninstall)  # type: ignore[attr-defined]
        self.ended: list[tuple[str, str]] = []
        return super().setUp()

    def session(self, name: str, **settings: Any) -> tuple[Session, EventLog]:
        """A started session (stopped by a cleanup; a short grace period unless given, so that
        a test leaving a connection open does not wait 30 s)."""
        raw = {
            "mailbox": self.mailbox.url,
            "appid": "txdilation.test/session",
            "drain-timeout": 1.0,
            **settings,
        }
        writer = StatusWriter(self.reactor)
        log = EventLog()
        writer.add_observer(log)
        session = Session(
            build_config(raw), self.reactor, writer, lambda o: self.ended.append((name, o))
        )
        self.addCleanup(session.stop)  # type: ignore[attr-defined]
        session.start()
        return session, log

    async def echo_service(self) -> int:
        port = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(HalfCloseEcho)
        )
        self.addCleanup(port.stopListening)  # type: ignore[attr-defined]
        return port.getHost().port

    async def pair(self, listen: dict[str, str], connect: dict[str, str], **settings: Any):
        """A (allocates, --listen) and B (joins, --connect), both dilated."""
        a, a_log = self.session("A", **{"allocate-code": True, "listen": listen}, **settings)
        code = (await a_log.next_event("code"))["code"]
        b, b_log = self.session("B", code=code, connect=connect, **settings)
        await a_log.next_event("dilated")
        await b_log.next_event("dilated")
        return a, a_log, b, b_log

    async def connect_to(self, log: EventLog, name: str) -> Client:
        address = (await log.next_event("listening", lambda e: e["name"] == name))["address"]
        port = int(address.rsplit(":", 1)[1])
        endpoint = TCP4ClientEndpoint(self.reactor, LOOPBACK, port)
        client: Client = await connectProtocol(endpoint, Client())
        return client


class SessionTests(SessionTestsMixin, TestCase):
    """Two sessions in this process, one wormhole between them."""

    async def test_forward_half_close_and_clean_stop(self) -> None:
        """A local connection to A's --listen port reaches B's --connect service through a
        subchannel; the request, end of input, the echo and the service's end of input all
        pass; both sides report the subchannel with its byte counts; a stop closes the local
        port, and ``closed`` (stopped, happy) is the last event; B then sees its peer leave
        and ends by itself, cleanly ('peer-closed')."""
        echo = await self.echo_service()
        a, a_log, _b, b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"}, {"svc": f"tcp:{LOOPBACK}:{echo}"}
        )
        client = await self.connect_to(a_log, "svc")
        message = b"x" * 100_000
        client.transport.write(message)
        client.transport.loseWriteConnection()
        await client.eof
        self.assertEqual(bytes(client.data), message)
        closed_a = await a_log.next_event("subchannel-closed")
        closed_b = await b_log.next_event("subchannel-closed")
        self.assertEqual(
            (closed_a["name"], closed_a["bytes_to_peer"], closed_a["bytes_from_peer"]),
            ("svc", 100_000, 100_000),
        )
        self.assertEqual((closed_b["bytes_to_peer"], closed_b["bytes_from_peer"]), (100_000,) * 2)
        self.assertEqual(closed_a["reason"], "closed")
        opened = a_log.of_kind("subchannel-opened")[0]
        self.assertEqual((opened["direction"], opened["id"]), ("outbound", closed_a["id"]))
        self.assertEqual(b_log.of_kind("subchannel-opened")[0]["direction"], "inbound")
        address = a_log.of_kind("listening")[0]["address"]
        await a.stop("test")
        closed_b = await b_log.next_event("closed")
        for log, reason in ((a_log, "stopped"), (b_log, "peer-closed")):
            self.assertEqual(log.events[-1]["kind"], "closed")
            self.assertEqual(log.events[-1]["reason"], reason)
            self.assertEqual(len(log.of_kind("closed")), 1)
            self.assertEqual(log.of_kind("error"), [])
        self.assertEqual(a_log.of_kind("stopping")[0]["reason"], "test")
        self.assertEqual(b_log.of_kind("stopping")[0]["reason"], "peer-closed")
        self.assertEqual((a_log.events[-1]["mood"], closed_b["mood"]), ("happy", "happy"))
        self.assertEqual(self.ended, [("A", "stopped"), ("B", "peer-closed")])
        with self.assertRaises(ConnectionRefusedError):
            endpoint = TCP4ClientEndpoint(self.reactor, LOOPBACK, int(address.rsplit(":", 1)[1]))
            await connectProtocol(endpoint, Client())
        self.assertEqual(
            [e["kind"] for e in a_log.events if e["kind"] in ("code", "peer-connected")],
            ["code", "peer-connected"],
        )
        self.assertEqual(
            a_log.of_kind("peer-connected")[0]["verifier"],
            b_log.of_kind("peer-connected")[0]["verifier"],
        )

    async def test_names_not_configured_are_refused(self) -> None:
        """A subchannel name B was not given with --connect is answered with CLOSE: the local
        client of A reads end of input at once, A reports the subchannel closed and warns in
        words that the peer closed it at once (it may not offer the name); B never opens it."""
        echo = await self.echo_service()
        _a, a_log, _b, b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}", "other": f"tcp:0:interface={LOOPBACK}"},
            {"svc": f"tcp:{LOOPBACK}:{echo}"},
        )
        client = await self.connect_to(a_log, "other")
        await client.eof
        self.assertEqual(bytes(client.data), b"")
        client.transport.loseConnection()
        closed = await a_log.next_event("subchannel-closed")
        self.assertEqual((closed["name"], closed["bytes_from_peer"]), ("other", 0))
        self.assertEqual(b_log.of_kind("subchannel-opened"), [])
        [warning] = a_log.of_kind("warning")
        self.assertIn("the peer closed the subchannel at once", warning["message"])
        self.assertIn("the peer may not offer 'other' (its --connect)", warning["advice"])

    async def test_connect_failure_reported_on_both_sides(self) -> None:
        """B cannot connect to its --connect service: B reports it in words (the service, the
        reason, advice) and closes the subchannel; A, whose local client sent a request and
        reads end of input, warns that the peer closed it at once without sending anything."""
        refusing = socket.socket()
        refusing.bind((LOOPBACK, 0))
        dead_port = refusing.getsockname()[1]
        refusing.close()  # nothing listens there now: connections are refused
        _a, a_log, _b, b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"}, {"svc": f"tcp:{LOOPBACK}:{dead_port}"}
        )
        client = await self.connect_to(a_log, "svc")
        client.transport.write(b"GET / HTTP/1.0\r\n\r\n")
        await client.eof
        self.assertEqual(bytes(client.data), b"")
        client.transport.loseConnection()
        error = await b_log.next_event("error")
        self.assertFalse(error["fatal"])
        self.assertEqual(
            error["message"],
            f"svc #1 (opened by the peer): cannot connect to tcp:{LOOPBACK}:{dead_port}: "
            "111: Connection refused",
        )
        self.assertIn("is the service", error["advice"])
        self.assertEqual((await b_log.next_event("subchannel-closed"))["reason"], "connect-failed")
        warning = await a_log.next_event("warning")
        self.assertIn("svc #1: the peer closed the subchannel at once", warning["message"])

    async def test_local_reset_is_reported(self) -> None:
        """A local client that resets its connection mid-stream: its peer's side can only get
        an end of input (a subchannel carries no reset), so this side says so, with the bytes
        that went through."""
        _a, a_log, _b, _b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"},
            {"svc": f"tcp:{LOOPBACK}:{await self.echo_service()}"},
        )
        client = await self.connect_to(a_log, "svc")
        client.transport.write(b"half a request")
        while len(client.data) < 14:
            await sleep(0.01, self.reactor)
        client.transport.abortConnection()
        warning = await a_log.next_event("warning")
        self.assertIn("svc #1: the local client reset the connection", warning["message"])
        self.assertIn("after 14 bytes to the peer", warning["message"])
        self.assertIn("cannot carry a reset", warning["advice"])

    async def test_link_cut_reconnects(self) -> None:
        """cut_link() aborts the connection: link-cut, reconnecting, then a new generation's
        connection-selected; forwarding works afterwards."""
        echo = await self.echo_service()
        a, a_log, _b, _b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"}, {"svc": f"tcp:{LOOPBACK}:{echo}"}
        )
        await a_log.next_event("connection-selected")
        self.assertTrue(a.cut_link())
        await a_log.next_event("connection-selected", lambda e: e["generation"] == 2)
        kinds = [e["kind"] for e in a_log.events]
        self.assertLess(kinds.index("link-cut"), kinds.index("reconnecting"))
        self.assertEqual(a_log.of_kind("reconnecting")[0]["generation"], 1)
        self.assertEqual(a.link.reconnects, 1)
        client = await self.connect_to(a_log, "svc")
        client.transport.write(b"after the cut")
        client.transport.loseWriteConnection()
        await client.eof
        self.assertEqual(bytes(client.data), b"after the cut")

    async def test_rtt_samples(self) -> None:
        """Keepalive round trips are reported as ``rtt`` events (milliseconds, generation): a
        time that passed, no longer than the test waited for it (how long a round trip takes on
        loopback depends on the machine's load: not asserted)."""
        started = self.reactor.seconds()
        _, a_log, _, _ = await self.pair({}, {}, **{"ping-interval": 0.1})
        rtt = await a_log.next_event("rtt")
        waited_ms = (self.reactor.seconds() - started) * 1000
        self.assertEqual(rtt["generation"], 1)
        self.assertGreater(rtt["rtt_ms"], 0)
        self.assertLessEqual(rtt["rtt_ms"], waited_ms)

    async def open_forward(self, **settings: Any) -> tuple[Session, EventLog, EventLog, Client]:
        """A pair, and one forwarded connection through it that carried a few bytes."""
        echo = await self.echo_service()
        a, a_log, _b, b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"}, {"svc": f"tcp:{LOOPBACK}:{echo}"}, **settings
        )
        client = await self.connect_to(a_log, "svc")
        client.transport.write(b"partial")
        while len(client.data) < 7:
            await sleep(0.01, self.reactor)
        return a, a_log, b_log, client

    def assert_cut(self, log: EventLog, detail: str) -> None:
        """One forwarded connection, cut for ``detail``, after 7 bytes each way; ``closed``
        counts it."""
        [closed] = log.of_kind("subchannel-closed")
        self.assertEqual(closed["reason"], "cut")
        self.assertIn(detail, closed["detail"])
        self.assertEqual((closed["bytes_to_peer"], closed["bytes_from_peer"]), (7, 7))
        self.assertEqual(log.events[-1]["kind"], "closed")
        self.assertEqual(log.events[-1]["cut"], 1)

    async def test_grace_period_then_cut_on_both_sides(self) -> None:
        """A forwarded connection still open when the grace period (drain timeout) ends is
        cut, not closed as if it had ended: A's local client reads an error (a reset, not an
        end of input), A reports the cut and its byte counts, and so does B, whose end was
        cut when A's wormhole closed with it open; the stop takes about the grace period."""
        a, a_log, b_log, client = await self.open_forward(**{"drain-timeout": 0.3})
        started = self.reactor.seconds()
        await a.stop("test")
        self.assertGreaterEqual(self.reactor.seconds() - started, 0.3)
        stopping = a_log.of_kind("stopping")[0]
        self.assertEqual((stopping["open"], stopping["grace_s"]), (1, 0.3))
        self.assert_cut(a_log, "the 0.3 s grace period ended")
        await client.lost
        self.assertFalse(client.reason.check(ConnectionDone), client.reason)
        await b_log.next_event("closed")
        self.assert_cut(b_log, "the peer stopped")
        kinds = [e["kind"] for e in a_log.events]
        self.assertLess(kinds.index("subchannel-closed"), kinds.index("closed"))

    async def test_stop_now_cuts_during_the_grace_period(self) -> None:
        """stop_now() (a second signal) during a 30 s grace period cuts at once: the stop ends
        when stop_now() does, well before the grace period would have, and the cut says it was
        forced (not that the grace period ended)."""
        a, a_log, b_log, client = await self.open_forward(**{"drain-timeout": 30})
        started = self.reactor.seconds()
        stopped = a.stop("SIGINT")
        await a_log.next_event("stopping")
        self.assertFalse(stopped.called)
        await a.stop_now("SIGINT")
        self.assertTrue(stopped.called)
        self.assertLess(self.reactor.seconds() - started, 30)
        self.assert_cut(a_log, "the stop was forced (SIGINT)")
        await client.lost
        await b_log.next_event("closed")
        self.assert_cut(b_log, "the peer stopped")

    async def test_wrong_code_is_fatal(self) -> None:
        """A wrong code: both sides (the --listen one and the --connect one) report a fatal
        error in words, 'wrong wormhole code', with advice and where 'wormhole' (never
        'listen', nor the WormholeClosedError of a subchannel listener), and close with reason
        'failed' and mood 'scary'; on_failure is called for each."""
        a, a_log = self.session(
            "A", **{"allocate-code": True, "listen": {"svc": f"tcp:0:interface={LOOPBACK}"}}
        )
        nameplate = (await a_log.next_event("code"))["code"].split("-")[0]
        _b, b_log = self.session(
            "B", code=f"{nameplate}-wrong-words", connect={"svc": f"tcp:{LOOPBACK}:9"}
        )
        for log in (a_log, b_log):
            closed = await log.next_event("closed")
            self.assertEqual((closed["reason"], closed["mood"]), ("failed", "scary"))
            [error] = log.of_kind("error")
            self.assertTrue(error["fatal"])
            self.assertEqual(error["where"], "wormhole")
            self.assertTrue(error["message"].startswith("wrong wormhole code: "), error)
            self.assertIn("check the code", error["advice"])
        self.assertEqual(sorted(self.ended), [("A", "failed"), ("B", "failed")])
        self.assertEqual(a.outcome, "failed")
        await a.stop()  # a stop after the end just returns

    async def test_stop_before_the_peer_came(self) -> None:
        """Stopping a session whose peer never came ends it quickly, mood 'lonely'."""
        a, a_log = self.session("A", **{"allocate-code": True})
        await a_log.next_event("code")
        await a.stop("test")
        self.assertEqual(a_log.events[-1]["mood"], "lonely")
        self.assertEqual(self.ended, [("A", "stopped")])

    async def test_listen_port_in_use_is_fatal(self) -> None:
        """A --listen endpoint that cannot listen is a fatal startup error."""
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind((LOOPBACK, 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        _a, a_log = self.session(
            "A", **{"allocate-code": True, "listen": {"svc": f"tcp:{port}:interface={LOOPBACK}"}}
        )
        closed = await a_log.next_event("closed")
        self.assertEqual(closed["reason"], "failed")
        error = a_log.of_kind("error")[0]
        self.assertEqual(error["where"], "listen")
        self.assertEqual(
            error["message"],
            f"cannot listen on a --listen endpoint: {LOOPBACK}:{port}: Address already in use",
        )
        self.assertIn("port is probably in use", error["advice"])
        self.assertEqual(self.ended, [("A", "failed")])


class QuietForwarder:
    """Stands in for the Forwarder during a grace period: ``live`` connections, idle when
    told."""

    def __init__(self, live: int) -> None:
        self.live = live
        self.cut_details: list[str] = []
        self.idle: Deferred[None] = Deferred()

    def when_idle(self) -> Deferred[None]:
        return self.idle


class InputsRecorder:
    def __init__(self) -> None:
        self.drains = 0

    def __getattr__(self, name: str) -> Any:
        def record(*args: object) -> None:
            if name == "drained":
                self.drains += 1

        return record


class GracePeriodTests(SynchronousTestCase):
    """The grace period's countdown (SessionCore.wait_for_drain) on a Clock."""

    def core(self, live: int, grace: float) -> tuple[Any, Clock, list[dict[str, Any]]]:
        from txdilation.session.core import SessionCore

        clock = Clock()
        writer = StatusWriter(clock)
        events: list[dict[str, Any]] = []
        writer.add_observer(events.append)
        config = build_config({"code": "1-a", "drain-timeout": grace})
        core = SessionCore(config, clock, writer, None, QuietForwarder(live))  # type: ignore[arg-type]
        core.inputs = InputsRecorder()  # type: ignore[assignment]
        return core, clock, events

    def test_countdown_then_drained(self) -> None:
        """A 30 s grace period with 2 connections open: a 'draining' event every 5 s says how
        many are open and how long until the cut (25, 20, 15, 10, 5 s); at 30 s the drain ends
        (the machine then cuts what is left)."""
        core, clock, events = self.core(2, 30.0)
        core.wait_for_drain()
        clock.pump([1.0] * 29)
        self.assertEqual(core.inputs.drains, 0)
        self.assertEqual(
            [(e["kind"], e["open"], e["remaining_s"]) for e in events],
            [("draining", 2, r) for r in (25, 20, 15, 10, 5)],
        )
        clock.advance(1.0)
        self.assertEqual(core.inputs.drains, 1)

    def test_idle_early_ends_the_countdown(self) -> None:
        """The connections end after 7 s: the drain ends then, and no countdown follows."""
        core, clock, events = self.core(1, 30.0)
        core.wait_for_drain()
        clock.advance(7.0)
        core.forwarder.live = 0
        core.forwarder.idle.callback(None)
        self.assertEqual(core.inputs.drains, 1)
        clock.pump([1.0] * 30)
        self.assertEqual([e["remaining_s"] for e in events], [25])

    def test_long_grace_counts_down_less_often(self) -> None:
        """A 300 s grace period is counted down every 50 s, not every 5."""
        core, clock, events = self.core(1, 300.0)
        core.wait_for_drain()
        clock.pump([10.0] * 29)
        self.assertEqual([e["remaining_s"] for e in events], [250, 200, 150, 100, 50])


class SessionMachineTests(SynchronousTestCase):
    """The lifecycle machine itself."""

    def test_complete(self) -> None:
        """Every (state, input) pair is a transition or a documented no-op."""
        self.assertEqual(missing_transitions(session_machine), [])


_ = reactor


@pytest.mark.slow
class MailboxOutageSlowTests(SessionTestsMixin, TestCase):
    """A session outlives its mailbox server going away and coming back."""

    timeout = 60

    async def test_survives_mailbox_restart(self) -> None:
        """With the mailbox server down, forwarding goes on over the dilated link; once it is
        back (same port, same channel database) a cut link reconnects through it."""
        from tests.support.harness import start_mailbox_server

        db = os.path.abspath(self.mktemp())
        await self.mailbox.stop()
        self.mailbox = await start_mailbox_server(self.reactor, channel_db=db)
        port = self.mailbox.port
        self.addCleanup(lambda: self.mailbox.stop())
        echo = await self.echo_service()
        a, a_log, _b, b_log = await self.pair(
            {"svc": f"tcp:0:interface={LOOPBACK}"}, {"svc": f"tcp:{LOOPBACK}:{echo}"}
        )
        await self.mailbox.stop()
        seen = len(a_log.events)
        await a_log.next_event("mailbox", lambda e: e["state"] != "connected", after=seen)
        client = await self.connect_to(a_log, "svc")
        client.transport.write(b"during the outage")
        client.transport.loseWriteConnection()
        await client.eof
        self.assertEqual(bytes(client.data), b"during the outage")
        self.mailbox = await start_mailbox_server(self.reactor, channel_db=db, port=port)
        for log in (a_log, b_log):
            await log.next_event("mailbox", lambda e: e["state"] == "connected", after=seen)
        await a_log.next_event("connection-selected")
        self.assertTrue(a.cut_link())
        await a_log.next_event("connection-selected", lambda e: e["generation"] >= 2)
        self.assertEqual(a_log.of_kind("error") + b_log.of_kind("error"), [])
