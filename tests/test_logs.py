"""Tests of what a session says in its log: txdilation.logs (levels, chatter, the journal and
JSON observers, twistd's --logfile rules), txdilation.reporting.status_log (one readable line per
status event) and txdilation.reporting.advice (fatal errors in words, with advice).

Real observers write to real streams (``io.StringIO``); log events come from real
``twisted.logger.Logger`` calls and the real ``Factory.doStart``."""

from __future__ import annotations

import io
import json
import os
import signal
from typing import Any

from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock as FakeClock
from twisted.logger import Logger, LogLevel, LogPublisher, globalLogPublisher
from twisted.python import log as legacy_log
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from wormhole.errors import LonelyError, ServerConnectionError, WrongPasswordError

from txdilation import logs
from txdilation.reporting.advice import explain
from txdilation.reporting.status_events import KINDS, StatusWriter
from txdilation.reporting.status_log import StatusLog, describe_for_log
from txdilation.wire.dilation_errors import OldPeerCannotDilateError, WormholeClosedError


def _configured(test: SynchronousTestCase, level: str | None) -> None:
    """Configure ``txdilation.logs`` for one test and undo it afterwards."""
    previous = logs._configured
    logs.configure(level)
    test.addCleanup(setattr, logs, "_configured", previous)


def _publish(observer: Any, emit: Any) -> None:
    """Run ``emit(logger)`` with ``observer`` as the only observer of a fresh publisher."""
    publisher = LogPublisher(observer)
    emit(Logger(namespace="test.ns", observer=publisher))


class LevelTests(SynchronousTestCase):
    """Level names, configure() over TXDILATION_LOG_LEVEL over info."""

    def test_parse_level(self) -> None:
        """Names are case-insensitive, 'warning' means warn, unknown names are ValueErrors
        listing the known ones."""
        self.assertIs(logs.parse_level("DEBUG"), LogLevel.debug)
        self.assertIs(logs.parse_level(" warning "), LogLevel.warn)
        e = self.assertRaises(ValueError, logs.parse_level, "loud")
        self.assertIn("debug, info, warn, error, critical", str(e))

    def test_precedence(self) -> None:
        """configure() wins over TXDILATION_LOG_LEVEL, which wins over the default, info."""
        _configured(self, None)
        self.assertIs(logs.current_level({}), LogLevel.info)
        self.assertIs(logs.current_level({"TXDILATION_LOG_LEVEL": "debug"}), LogLevel.debug)
        logs.configure("error")
        self.assertIs(logs.current_level({"TXDILATION_LOG_LEVEL": "debug"}), LogLevel.error)


class FilterTests(SynchronousTestCase):
    """filtered(): levels, and Twisted's chatter counted as debug."""

    def test_levels(self) -> None:
        """Events below the level are dropped; those at or above it pass."""
        seen: list[dict[str, Any]] = []
        observer = logs.filtered(seen.append, LogLevel.info)

        def emit(log: Logger) -> None:
            log.debug("d")
            log.info("i")
            log.warn("w")

        _publish(observer, emit)
        self.assertEqual([e["log_format"] for e in seen], ["i", "w"])

    def test_factory_and_port_chatter_is_debug(self) -> None:
        """'Starting factory', 'Stopping factory' (from the real Factory.doStart/doStop) and a
        port's legacy 'X starting on N' / '(TCP Port N Closed)' lines are dropped at info and
        kept at debug; other legacy lines are not chatter."""
        kept: dict[LogLevel, list[str]] = {LogLevel.info: [], LogLevel.debug: []}
        observers = {
            level: logs.filtered(lambda e, level=level: kept[level].append(_text(e)), level)
            for level in kept
        }
        for observer in observers.values():
            globalLogPublisher.addObserver(observer)
            self.addCleanup(globalLogPublisher.removeObserver, observer)
        factory = Factory()
        factory.doStart()
        factory.doStop()
        legacy_log.msg("Factory starting on 4242")
        legacy_log.msg("(TCP Port 4242 Closed)")
        legacy_log.msg("something else happened")
        self.assertEqual(kept[LogLevel.info], ["something else happened"])
        self.assertEqual(len(kept[LogLevel.debug]), 5)
        self.assertTrue(kept[LogLevel.debug][0].startswith("Starting factory"))

    def test_exclude(self) -> None:
        """exclude(event) true drops the event whatever its level."""
        seen: list[dict[str, Any]] = []
        observer = logs.filtered(seen.append, LogLevel.debug, exclude=lambda e: "status" in e)
        _publish(observer, lambda log: (log.info("a", status={}), log.info("b")))
        self.assertEqual([e["log_format"] for e in seen], ["b"])


def _text(event: dict[str, Any]) -> str:
    from twisted.logger import formatEvent

    return formatEvent(event)


class ObserverTests(SynchronousTestCase):
    """The journal and JSON observers, and the --logger factories."""

    def test_journal(self) -> None:
        """One line per event: '<PRIORITY>[namespace] text', no timestamp; a failure's
        traceback follows, each line with the same priority; debug is <7>, warn <4>."""
        out = io.StringIO()
        observer = logs.journal_observer(out, LogLevel.debug)

        def emit(log: Logger) -> None:
            log.info("wormhole code: {code}", code="7-a-b")
            log.debug("detail")
            log.warn("careful")
            try:
                1 / 0  # noqa: B018
            except ZeroDivisionError:
                log.failure("it broke")

        _publish(observer, emit)
        lines = out.getvalue().splitlines()
        self.assertEqual(
            lines[:4],
            [
                "<6>[test.ns] wormhole code: 7-a-b",
                "<7>[test.ns] detail",
                "<4>[test.ns] careful",
                "<2>[test.ns] it broke",
            ],
        )
        self.assertTrue(all(line.startswith("<2>") for line in lines[4:]), lines)
        self.assertIn("ZeroDivisionError", lines[-1])

    def test_json(self) -> None:
        """One JSON object per line with ts, time, level, namespace, text; a status event and
        a telemetry record are kept whole, plain values under 'fields', objects left out."""
        out = io.StringIO()
        observer = logs.json_observer(out, LogLevel.info)

        def emit(log: Logger) -> None:
            log.info("{text}", text="wormhole code: 7-a-b", status={"kind": "code", "code": "7"})
            log.info("n={n} {obj}", n=3, obj=object())
            log.debug("dropped")

        _publish(observer, emit)
        first, second = (json.loads(line) for line in out.getvalue().splitlines())
        self.assertEqual(first["text"], "wormhole code: 7-a-b")
        self.assertEqual(first["status"], {"kind": "code", "code": "7"})
        self.assertEqual((first["level"], first["namespace"]), ("info", "test.ns"))
        self.assertNotIn("fields", first)
        self.assertRegex(first["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(second["fields"], {"n": 3})

    def test_logger_factories(self) -> None:
        """The --logger factories take no argument, append to TXDILATION_LOG_FILE, and filter
        at the configured level."""
        path = self.mktemp()
        self.patch(os, "environ", {**os.environ, "TXDILATION_LOG_FILE": path})
        _configured(self, "warn")
        for factory in (logs.text_logger, logs.journal_logger, logs.json_logger):
            observer = factory()
            _publish(observer, lambda log: (log.info("quiet"), log.warn("loud")))
        with open(path) as f:
            text = f.read()
        self.assertNotIn("quiet", text)
        self.assertEqual(text.count("loud"), 3)
        self.assertIn("<4>[test.ns] loud", text)


class TwistdObserverTests(SynchronousTestCase):
    """twistd_observer() follows twistd's own --logfile rules."""

    def test_rules(self) -> None:
        """--logger or --syslog: twistd decides (None); -n without --logfile, or --logfile -:
        stdout; a daemon with --logfile -: None (twistd refuses it); --logfile PATH: that
        file, reopened on SIGUSR1."""
        self.assertIsNone(logs.twistd_observer({"logger": "x.y", "nodaemon": True}))
        self.assertIsNone(logs.twistd_observer({"syslog": True}))
        self.assertIsNone(logs.twistd_observer({"logfile": "-", "nodaemon": False}))
        self.assertIsNotNone(logs.twistd_observer({"logfile": "", "nodaemon": True}))
        previous = signal.getsignal(signal.SIGUSR1)
        self.addCleanup(signal.signal, signal.SIGUSR1, previous)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        path = os.path.abspath(self.mktemp())
        observer = logs.twistd_observer({"logfile": path, "nodaemon": True}, LogLevel.info)
        assert observer is not None
        _publish(observer, lambda log: (log.info("kept"), log.debug("dropped")))
        self.assertNotEqual(signal.getsignal(signal.SIGUSR1), signal.SIG_DFL)
        with open(path) as f:
            text = f.read()
        self.assertIn("[test.ns#info] kept", text)
        self.assertNotIn("dropped", text)


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "ts": 100.0, "seq": 0, **fields}


class StatusLineTests(SynchronousTestCase):
    """describe_for_log and StatusLog: one readable line per status event."""

    def test_every_kind_has_a_line(self) -> None:
        """Every kind the writer knows has its own text (never the generic fallback)."""
        samples = {
            "starting": _event("starting", appid="a", mailbox="ws://m/v1", listen=["web"],
                               connect=[], pid=1),
            "listening": _event("listening", name="web", address="tcp:127.0.0.1:8080"),
            "mailbox": _event("mailbox", state="connected", url="ws://m/v1"),
            "code": _event("code", code="7-a-b"),
            "peer-connected": _event("peer-connected", verifier="ab" * 32),
            "connecting": _event("connecting", generation=1),
            "connection-selected": _event("connection-selected", generation=1, path="direct",
                                          hint="->tcp:10.0.0.5:4001"),
            "dilated": _event("dilated", generation=1, path="relay",
                              hint="->relay:tcp:r:4001"),
            "reconnecting": _event("reconnecting", generation=1),
            "rtt": _event("rtt", rtt_ms=3.2, generation=1),
            "port-mapping": _event("port-mapping", protocol="pcp", port=40001, lifetime_s=7200),
            "link-cut": _event("link-cut", generation=1),
            "subchannel-opened": _event("subchannel-opened", id=1, name="web",
                                        direction="outbound", local="tcp:127.0.0.1:5"),
            "subchannel-closed": _event("subchannel-closed", id=1, name="web",
                                        bytes_to_peer=2_500_000, bytes_from_peer=12,
                                        duration_s=1.5, reason="closed"),
            "error": _event("error", message="m", where="wormhole", fatal=True, advice="a"),
            "warning": _event("warning", message="m", advice="a"),
            "paired": _event("paired", peer="b", path="/p/a.pairing", generation=1),
            "waiting": _event("waiting", peer="b", generation=1, reason="started"),
            "meeting": _event("meeting", peer="b", generation=1),
            "peer-restarted": _event("peer-restarted", peer="b"),
            "reconnected": _event("reconnected", peer="b", generation=2, restarted="peer",
                                  down_s=2.31),
            "ratchet": _event("ratchet", peer="b", generation=2),
            "stopping": _event("stopping", reason="SIGTERM"),
            "draining": _event("draining", open=2, remaining_s=25),
            "closed": _event("closed", reason="peer-closed", mood="happy"),
        }  # fmt: skip
        self.assertEqual(set(samples), KINDS)
        for kind, event in samples.items():
            _level, text = describe_for_log(event)
            with self.subTest(kind=kind):
                self.assertNotIn("\n", text)
                self.assertNotIn("=", text)  # the generic fallback lists key=value pairs
        self.assertEqual(describe_for_log(samples["code"]), (LogLevel.info, "wormhole code: 7-a-b"))
        self.assertIn("ab" * 32, describe_for_log(samples["peer-connected"])[1])
        self.assertEqual(
            describe_for_log(samples["dilated"])[1],
            "dilated: generation 1, relay connection ->relay:tcp:r:4001",
        )
        self.assertEqual(
            describe_for_log(samples["error"]), (LogLevel.error, "fatal error (wormhole): m; a")
        )
        self.assertEqual(describe_for_log(samples["warning"])[0], LogLevel.warn)
        self.assertEqual(describe_for_log(samples["rtt"])[0], LogLevel.debug)
        self.assertIn("2.5 MB to the peer", describe_for_log(samples["subchannel-closed"])[1])
        self.assertEqual(
            describe_for_log(samples["port-mapping"])[1],
            "port 40001 mapped by the router (pcp) for 7200 s",
        )
        gone = _event("port-mapping", protocol=None)
        self.assertEqual(describe_for_log(gone)[1], "port mapping gone")

    def test_reconnect_gap(self) -> None:
        """A connection selected after a loss is logged as 'reconnected' with the generation
        and the time since the loss (from the events' timestamps); the line carries the event
        under 'status' and the gap under 'gap_ms'."""
        seen: list[dict[str, Any]] = []
        clock = FakeClock()
        writer = StatusWriter(clock)
        writer.add_observer(StatusLog(Logger(namespace="txdilation.session", observer=seen.append)))
        writer.emit("connection-selected", generation=1, path="direct", hint="->tcp:a:1")
        clock.advance(10)
        writer.emit("reconnecting", generation=1)
        clock.advance(0.0153)
        writer.emit("connecting", generation=2)
        writer.emit("connection-selected", generation=2, path="relay", hint="->relay:tcp:r:2")
        texts = [e["text"] for e in seen]
        self.assertEqual(texts[0], "generation 1: direct connection ->tcp:a:1")
        self.assertEqual(
            texts[3],
            "reconnected: generation 2, relay connection ->relay:tcp:r:2, 15 ms after the loss",
        )
        self.assertEqual(seen[3]["gap_ms"], 15.3)
        self.assertEqual(seen[3]["status"]["generation"], 2)
        self.assertEqual({e["log_namespace"] for e in seen}, {"txdilation.session"})


class AdviceTests(SynchronousTestCase):
    """explain(): fatal errors in words, with advice."""

    def test_known_errors(self) -> None:
        """Stock's and Twisted's errors get words (never an empty 'Name: ') and advice."""
        wrong = explain(WrongPasswordError())
        self.assertEqual(
            wrong.message, "wrong wormhole code: the two sides did not use the same code"
        )
        self.assertIn("check the code", wrong.advice)
        self.assertIn("start the other side", explain(LonelyError()).advice)
        unreachable = explain(Failure(ServerConnectionError("ws://x/v1", "refused")))
        self.assertTrue(unreachable.message.startswith("cannot reach the mailbox server: "))
        self.assertIn("--mailbox", unreachable.advice)
        self.assertIn("0.20", explain(OldPeerCannotDilateError()).advice)
        busy = explain(CannotListenError("127.0.0.1", 8080, OSError(98, "Address already in use")))
        self.assertEqual(
            busy.message,
            "cannot listen on a --listen endpoint: 127.0.0.1:8080: Address already in use",
        )
        self.assertEqual(
            explain(WormholeClosedError()).message.split(":")[0], "the wormhole closed"
        )
        missing = explain(
            FileNotFoundError(2, "No such file or directory", "1", None, b"/no/s.lock")
        )
        self.assertEqual(
            missing.message,
            "a file or socket could not be used: No such file or directory: /no/s.lock",
        )
        self.assertIn("unix: socket's directory", missing.advice)
        self.assertIn(
            "mailbox=", explain(ServerConnectionError("u", "r"), mailbox_setting="mailbox=").advice
        )
        said = explain(WrongPasswordError(wrong.message))  # explained before: not said twice
        self.assertEqual(said.message, wrong.message)

    def test_in_words_once(self) -> None:
        """A message's full stop does not run into the advice ("refused.; check"); a pairing
        file another process holds is advice to stop that process, never to forget the
        pairing (it is healthy)."""
        from twisted.internet.error import ConnectionRefusedError

        from txdilation.pairing.pairing_errors import PairingInUse

        refused = explain(ServerConnectionError("ws://x/v1", ConnectionRefusedError()))
        self.assertFalse(refused.message.endswith("."), refused.message)
        in_use = explain(PairingInUse("pairing file p is in use by another process on this host"))
        self.assertIn("stop the other process", in_use.advice)
        self.assertNotIn("forget", in_use.advice)

    def test_unknown_and_wrapped(self) -> None:
        """An unknown error keeps its type name; a DeferredList's FirstError is unwrapped."""
        from twisted.internet.defer import FirstError

        self.assertEqual(explain(RuntimeError("boom")).message, "RuntimeError: boom")
        self.assertEqual(explain(KeyError()).message, "KeyError")
        wrapped = FirstError(Failure(WrongPasswordError()), 0)
        self.assertTrue(explain(wrapped).message.startswith("wrong wormhole code"))
