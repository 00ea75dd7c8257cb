"""Tests of session status events: the JSON-lines writer, the translation of magic-wormhole's
status objects into events, and the human view of ``txdilation run``
(txdilation.reporting.status_events, txdilation.session.observe, .liveline)."""

from __future__ import annotations

import io
import json
import math

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import (
    Closed,
    Connected,
    ConnectedPeer,
    Connecting,
    ConnectingPeer,
    DilationStatus,
    Failed,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)

from txdilation.reporting.status_events import KINDS, StatusWriter, open_status_writer
from txdilation.reporting.status_log import describe_for_log
from txdilation.session.liveline import LiveStatusLine, describe_event, format_bytes
from txdilation.session.observe import LinkObserver, path_of


class BrokenStream(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError("disk full")


class WriterTests(SynchronousTestCase):
    """StatusWriter."""

    def test_lines(self) -> None:
        """Each emit is one JSON line with kind, ts from the clock and seq, then the fields;
        observers get the same dict."""
        clock = Clock()
        clock.advance(1700000000.25)
        stream = io.StringIO()
        writer = StatusWriter(clock, stream)
        seen: list[dict] = []
        writer.add_observer(seen.append)
        writer.emit("code", code="1-a-b")
        clock.advance(1)
        writer.emit("closed", reason="stopped", mood="happy")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        self.assertEqual(
            lines,
            [
                {"kind": "code", "ts": 1700000000.25, "seq": 0, "code": "1-a-b"},
                {"kind": "closed", "ts": 1700000001.25, "seq": 1, "reason": "stopped",
                 "mood": "happy"},
            ],
        )  # fmt: skip
        self.assertEqual(seen, lines)
        self.assertEqual(list(lines[0])[:3], ["kind", "ts", "seq"])

    def test_unknown_kind(self) -> None:
        """An unknown kind is a programming error."""
        self.assertRaises(ValueError, StatusWriter(Clock()).emit, "nonsense")

    def test_failures_do_not_raise(self) -> None:
        """A failing stream is dropped (observers still hear events); a raising observer is
        logged, and the others still run."""
        writer = StatusWriter(Clock(), BrokenStream())
        seen: list[str] = []

        def bad(event: dict) -> None:
            raise RuntimeError("observer bug")

        writer.add_observer(bad)
        writer.add_observer(lambda e: seen.append(e["kind"]))
        writer.emit("dilated")
        writer.emit("dilated")
        self.assertEqual(seen, ["dilated", "dilated"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)

    def test_file_appends_and_close(self) -> None:
        """--status PATH appends (a restart keeps history); close() closes the file and later
        events only reach observers; None writes nowhere."""
        path = self.mktemp()
        for code in ("1-a", "2-b"):
            writer = open_status_writer(Clock(), path)
            writer.emit("code", code=code)
            writer.close()
            writer.emit("closed", reason="stopped", mood="happy")
        with open(path) as f:
            self.assertEqual([json.loads(line)["code"] for line in f], ["1-a", "2-b"])
        open_status_writer(Clock(), None).emit("dilated")

    def test_kinds_documented(self) -> None:
        """Every kind has a section in docs/status-events.md."""
        from tests.support.harness import REPO_ROOT

        text = (REPO_ROOT / "docs" / "status-events.md").read_text()
        for kind in KINDS:
            self.assertIn(f"### `{kind}`", text)


def dstatus(peer: object, generation: int, mailbox: object = None) -> DilationStatus:
    ws = WormholeStatus(mailbox_connection=mailbox) if mailbox is not None else WormholeStatus()
    return DilationStatus(mailbox=ws, generation=generation, peer_connection=peer)


class ObserverTests(SynchronousTestCase):
    """LinkObserver: state changes become events."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.writer = StatusWriter(self.clock)
        self.events: list[dict] = []
        self.writer.add_observer(self.events.append)
        self.rtt: float | None = None
        self.stopped = 0
        self.observer = LinkObserver(self.writer, lambda: self.rtt, on_stopped=self.count_stop)

    def count_stop(self) -> None:
        self.stopped += 1

    def kinds(self) -> list[tuple]:
        return [tuple(v for k, v in e.items() if k not in ("ts", "seq")) for e in self.events]

    def test_generations_and_reconnects(self) -> None:
        """connecting, connection-selected, reconnecting are reported once per change, with
        the generation; repeats (e.g. keepalive refreshes) emit nothing new; an RTT sample is
        reported when it changes; the state tracks it all."""
        o = self.observer
        url = "ws://m/v1"
        o.dilation_status(dstatus(ConnectingPeer(1), 1, Connected(url)))
        o.dilation_status(dstatus(ConnectedPeer(1, 60, "->tcp:127.0.0.1:4001"), 1, Connected(url)))
        o.dilation_status(dstatus(ConnectedPeer(1, 61, "->tcp:127.0.0.1:4001"), 1, Connected(url)))
        self.rtt = 0.0012
        o.dilation_status(dstatus(ConnectedPeer(1, 62, "->tcp:127.0.0.1:4001"), 1, Connected(url)))
        o.dilation_status(dstatus(ReconnectingPeer(2), 1, Connected(url)))
        o.dilation_status(dstatus(ReconnectingPeer(3), 1, Connected(url)))
        o.dilation_status(dstatus(ConnectingPeer(4), 2, Connected(url)))
        o.dilation_status(
            dstatus(ConnectedPeer(5, 65, "->relay:tcp:127.0.0.1:4002"), 2, Connected(url))
        )
        self.assertEqual(
            self.kinds(),
            [
                ("mailbox", "connected", url),
                ("connecting", 1),
                ("connection-selected", 1, "direct", "->tcp:127.0.0.1:4001"),
                ("rtt", 1.2, 1),
                ("reconnecting", 1),
                ("connecting", 2),
                ("connection-selected", 2, "relay", "->relay:tcp:127.0.0.1:4002"),
            ],
        )
        state = o.state
        self.assertEqual(
            (state.state, state.generation, state.path, state.reconnects, state.rtt_s),
            ("connected", 2, "relay", 1, 0.0012),
        )

    def test_connecting_says_when_we_wait_on_a_stock_leader(self) -> None:
        """Following a stock Leader, ``connecting`` carries ``waits_on: stock-leader`` (and
        the log line says so); a later attempt in the same generation (ConnectingPeer's
        last_attempt refreshed) emits nothing new."""
        led = [True]
        o = LinkObserver(self.writer, lambda: None, led_by_stock=lambda: led[0])
        o.dilation_status(dstatus(ConnectingPeer(1), 1))
        o.dilation_status(dstatus(ConnectingPeer(3), 1))
        led[0] = False
        o.dilation_status(dstatus(ConnectingPeer(9), 2))
        connecting = [e for e in self.events if e["kind"] == "connecting"]
        self.assertEqual([e.get("waits_on") for e in connecting], ["stock-leader", None])
        _level, text = describe_for_log(connecting[0])
        self.assertIn("waiting on its stock Leader", text)

    def test_port_mapping(self) -> None:
        """The port mapping is reported when it appears, changes or goes (protocol, external
        port, lease; a permanent lease without one), never again when a status repeats it."""
        from txdilation.portmap.mapping import MappingProtocol, PortMapping

        mapping: list[PortMapping | None] = [None]
        observer = LinkObserver(self.writer, lambda: None, mapping_source=lambda: mapping[0])
        url = "ws://m/v1"
        status = dstatus(ConnectingPeer(1), 1, Connected(url))
        observer.dilation_status(status)
        pcp = MappingProtocol.PCP
        mapping[0] = PortMapping(pcp, "192.168.1.2", 4000, "198.20.1.2", 4000, 7200.0, 0.0)
        observer.dilation_status(status)
        observer.dilation_status(status)
        upnp = MappingProtocol.UPNP_IGD
        mapping[0] = PortMapping(upnp, "192.168.1.2", 4000, "198.20.1.2", 4001, math.inf, 0.0)
        observer.dilation_status(status)
        mapping[0] = None
        observer.dilation_status(status)
        found = [k for k in self.kinds() if k[0] == "port-mapping"]
        self.assertEqual(
            found,
            [
                ("port-mapping", "pcp", 4000, 7200.0),
                ("port-mapping", "upnp-igd", 4001),
                ("port-mapping", None),
            ],
        )

    def test_mailbox_states(self) -> None:
        """Mailbox connection kinds are reported on change, with url or reason."""
        o = self.observer
        o.wormhole_status(WormholeStatus(mailbox_connection=Connecting("ws://m", 1)))
        o.wormhole_status(WormholeStatus(mailbox_connection=Connecting("ws://m", 2)))
        o.wormhole_status(WormholeStatus(mailbox_connection=Failed("refused")))
        o.wormhole_status(WormholeStatus(mailbox_connection=Closed()))
        self.assertEqual(
            self.kinds(),
            [
                ("mailbox", "connecting", "ws://m"),
                ("mailbox", "failed", "refused"),
                ("mailbox", "closed"),
            ],
        )

    def test_generation_never_decreases_and_stop_once(self) -> None:
        """A late status with a lower generation does not lower it; StoppedPeer calls
        on_stopped once."""
        o = self.observer
        o.dilation_status(dstatus(ConnectedPeer(1, 60, "<-tcp:10.0.0.1:5"), 3))
        o.dilation_status(dstatus(ReconnectingPeer(2), 2))
        self.assertEqual(o.state.generation, 3)
        o.dilation_status(dstatus(StoppedPeer(), 3))
        o.dilation_status(dstatus(StoppedPeer(), 3))
        self.assertEqual(self.stopped, 1)
        self.assertEqual(o.state.state, "stopped")

    def test_path_of(self) -> None:
        """Relay descriptions are 'relay', every other one 'direct'."""
        self.assertEqual(path_of("->relay:tcp:h:1"), "relay")
        self.assertEqual(path_of("<-tcp:h:1"), "direct")


class FakeSession:
    """What LiveStatusLine reads from a Session."""

    def __init__(self, observer: LinkObserver) -> None:
        self.observer = observer
        self.forwarder = type("F", (), {"live": 2, "bytes_to_peer": 12_500_000,
                                        "bytes_from_peer": 3100})()  # fmt: skip

    @property
    def link(self):
        return self.observer.state


class LiveLineTests(SynchronousTestCase):
    """The human view of txdilation run."""

    def test_describe_and_bytes(self) -> None:
        """Notable events have a line; others (rtt, subchannels) none; byte counts are short."""
        self.assertEqual(describe_event({"kind": "code", "code": "7-a-b"}), "wormhole code: 7-a-b")
        self.assertEqual(
            describe_event(
                {"kind": "connection-selected", "generation": 2, "path": "direct", "hint": "h"}
            ),
            "generation 2: direct connection h",
        )
        self.assertIsNone(describe_event({"kind": "rtt", "rtt_ms": 1.0}))
        self.assertEqual(
            [format_bytes(n) for n in (5, 1500, 12_500_000, 3_000_000_000)],
            ["5 B", "1.5 kB", "12.5 MB", "3 GB"],
        )
        for kind in KINDS:  # every kind either has a line or is deliberately quiet
            event = {"kind": kind, "code": "c", "name": "n", "address": "a", "state": "s",
                     "verifier": "00", "generation": 1, "path": "p", "hint": "h",
                     "where": "w", "message": "m", "reason": "r", "mood": "m", "open": 1,
                     "remaining_s": 5, "peer": "p"}  # fmt: skip
            describe_event(event)
        self.assertEqual(  # the pairing's events have lines too (docs/pairing.md)
            describe_event({"kind": "waiting", "peer": "backup-b", "generation": 3}),
            "waiting for paired peer backup-b (generation 3, no code needed)",
        )
        self.assertEqual(
            describe_event({"kind": "reconnected", "peer": "backup-b", "down_s": 2.31}),
            "reconnected to paired peer backup-b after a restart (down 2.31 s)",
        )

    def test_terminal_line(self) -> None:
        """On a terminal the status line shows generation, path, RTT and bytes, is redrawn
        in place every half second, and event lines are printed above it."""
        clock = Clock()
        writer = StatusWriter(clock)
        observer = LinkObserver(writer, lambda: 0.0004)
        stream = io.StringIO()
        line = LiveStatusLine(FakeSession(observer), stream, clock, tty=True)  # type: ignore[arg-type]
        writer.add_observer(line.observe)
        line.start()
        observer.dilation_status(dstatus(ConnectedPeer(1, 60, "->tcp:10.0.0.5:41233"), 2))
        clock.advance(0.5)
        line.stop()
        text = stream.getvalue()
        self.assertIn("generation 2: direct connection ->tcp:10.0.0.5:41233\n", text)
        self.assertIn(
            "\rgen 2 | direct ->tcp:10.0.0.5:41233 | rtt 0.4 ms | 2 open, 12.5 MB out, 3.1 kB in",
            text,
        )
        self.assertTrue(text.endswith("\n"))

    def test_not_a_terminal(self) -> None:
        """Without a terminal only event lines are printed (no carriage returns)."""
        clock = Clock()
        writer = StatusWriter(clock)
        stream = io.StringIO()
        line = LiveStatusLine(FakeSession(LinkObserver(writer, lambda: None)), stream, clock,
                              tty=False)  # type: ignore[arg-type]  # fmt: skip
        writer.add_observer(line.observe)
        line.start()
        writer.emit("code", code="3-x")
        clock.advance(5)
        line.stop()
        self.assertEqual(stream.getvalue(), "wormhole code: 3-x\n")


class StopLinesTests(SynchronousTestCase):
    """What a stop looks like in words: the log's lines and txdilation run's."""

    def test_lines(self) -> None:
        """A signal interrupting a session with open connections says so once (the live view
        says 'interrupted', the log 'stopping (SIGINT)'), with the grace period and that a
        second signal cuts at once; the countdown, a forced stop, each cut (with the bytes each
        way and why) and the final count of cuts are lines too."""
        from txdilation.reporting.status_log import describe_for_log

        stopping = {"kind": "stopping", "reason": "SIGINT", "open": 2, "grace_s": 30.0}
        self.assertEqual(
            describe_event(stopping),
            "interrupted by SIGINT: stopping: 2 forwarded connections open, waiting up to 30 s "
            "for them to end; a second SIGINT cuts them now",
        )
        self.assertEqual(
            describe_for_log(stopping)[1],
            "stopping (SIGINT): 2 forwarded connections open, waiting up to 30 s for them to "
            "end; a second SIGINT cuts them now",
        )
        self.assertEqual(
            describe_event({"kind": "stopping", "reason": "SIGTERM"}),
            "interrupted by SIGTERM: stopping",
        )
        self.assertEqual(
            describe_for_log({"kind": "stopping", "reason": "stop"})[1], "stopping (stop)"
        )
        self.assertEqual(
            describe_event({"kind": "stopping", "reason": "SIGINT", "open": 1, "forced": True}),
            "SIGINT again: stopping now, cutting 1 forwarded connection",
        )
        self.assertEqual(
            describe_event({"kind": "draining", "open": 1, "remaining_s": 25}),
            "stopping: 1 forwarded connection still open, cut in 25 s",
        )
        cut = {"kind": "subchannel-closed", "id": 3, "name": "web", "bytes_to_peer": 412,
               "bytes_from_peer": 31_200_000, "duration_s": 41.3, "reason": "cut",
               "detail": "the 30 s grace period ended"}  # fmt: skip
        text = (
            "web #3 cut after 412 B to the peer, 31.2 MB from the peer in 41.3 s: the 30 s "
            "grace period ended"
        )
        self.assertEqual(describe_event(cut), text)
        level, logged = describe_for_log(cut)
        self.assertEqual((level.name, logged), ("warn", text))
        self.assertIsNone(describe_event({**cut, "reason": "closed"}))  # only cuts interrupt
        closed = {"kind": "closed", "reason": "stopped", "mood": "happy", "cut": 1}
        self.assertEqual(
            describe_event(closed), "closed (stopped, mood happy; 1 forwarded connection cut)"
        )
        self.assertEqual(describe_event({**closed, "cut": 0}), "closed (stopped, mood happy)")
