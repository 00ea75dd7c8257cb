"""Tests of txdilation.session.process: the process glue of ``twistd dilation`` and
``txdilation run`` (telemetry variable, signal handlers, ending the process).

The handlers are installed for real in this process (and restored by each test) with a fake
reactor, so a signal only records a call: nothing stops."""

from __future__ import annotations

import os
import signal
from typing import Any

from twisted.internet.error import ReactorNotRunning
from twisted.trial.unittest import SynchronousTestCase

import txdilation
from txdilation.session.config import build_config
from txdilation.session.process import (
    CUT_SIGNAL,
    end_process,
    exit_status,
    install_signal_handlers,
    prepare,
    stop_reactor,
)


class FakeReactor:
    """Records what the glue asks of the reactor; runs callFromThread calls at once."""

    def __init__(self) -> None:
        self.stops = 0
        self.running = True
        self.triggers: dict[int, tuple[str, str, Any]] = {}

    def callFromThread(self, f: Any, *args: Any) -> None:
        f(*args)

    def stop(self) -> None:
        if not self.running:
            raise ReactorNotRunning()
        self.running = False
        self.stops += 1

    def addSystemEventTrigger(self, phase: str, event: str, f: Any) -> int:
        key = len(self.triggers) + 1
        self.triggers[key] = (phase, event, f)
        return key

    def removeSystemEventTrigger(self, key: int) -> None:
        del self.triggers[key]


class FakeSession:
    def __init__(self) -> None:
        self.stops: list[str] = []
        self.cuts = 0

    def stop(self, reason: str = "stop") -> None:
        self.stops.append(reason)

    def stop_now(self, reason: str = "stop") -> None:
        self.stops.append(f"now: {reason}")

    def cut_link(self) -> bool:
        self.cuts += 1
        return True


class ProcessGlueTests(SynchronousTestCase):
    """prepare, the signal handlers, end_process."""

    def test_prepare(self) -> None:
        """--events reaches the library as its telemetry file (the settings the session
        dilates with), without touching os.environ; txdilation is installed as Dilation."""
        was_installed = txdilation.is_installed()
        self.addCleanup(lambda: None if was_installed else txdilation.uninstall())
        environ = dict(os.environ)
        config = build_config({"code": "1-a", "events": "/tmp/events.jsonl"})
        prepare(config)
        self.assertEqual(dict(os.environ), environ)
        from txdilation.session.library import library_settings

        settings = library_settings(config)  # the environment read at the edge
        self.assertEqual(settings.telemetry.events_path, "/tmp/events.jsonl")
        self.assertTrue(txdilation.is_installed())

    def test_signals(self) -> None:
        """SIGTERM starts one clean stop (the session's, then the reactor's); a second signal
        stops it at once (stop_now) and does not stop the reactor again; the first signal
        sets the exit status of a foreground command (143); SIGUSR2 cuts the link; after the
        reactor's shutdown the stop signals are ignored; restore() puts the previous handlers
        back."""
        before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, CUT_SIGNAL)}
        reactor, session = FakeReactor(), FakeSession()
        signals = install_signal_handlers(reactor, session)  # type: ignore[arg-type]
        restore = signals.restore
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in before.items()])
        self.assertEqual(exit_status(signals, "stopped"), 0)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        self.assertEqual((session.stops, reactor.stops), (["SIGTERM", "now: SIGINT"], 1))
        self.assertEqual(signals.received, ["SIGTERM", "SIGINT"])
        self.assertEqual(exit_status(signals, "stopped"), 143)
        self.assertEqual(exit_status(signals, "failed"), 1)
        os.kill(os.getpid(), CUT_SIGNAL)
        self.assertEqual(session.cuts, 1)
        [(phase, event, ignore)] = reactor.triggers.values()
        self.assertEqual((phase, event), ("after", "shutdown"))
        ignore()
        self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_IGN)
        self.assertEqual(signal.getsignal(signal.SIGINT), signal.SIG_IGN)
        restore()
        self.assertEqual(reactor.triggers, {})
        self.assertEqual({s: signal.getsignal(s) for s in before}, before)

    def test_third_signal_exits_at_once(self) -> None:
        """A third SIGINT/SIGTERM does not wait for the reactor (which may be what is stuck):
        the process exits at once, 128 + the signal's number, saying so."""
        from txdilation.session import process

        before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, CUT_SIGNAL)}
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in before.items()])
        exits: list[tuple[str, int]] = []
        self.patch(process, "_exit_now", lambda message, status: exits.append((message, status)))
        install_signal_handlers(FakeReactor(), FakeSession())  # type: ignore[arg-type]
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGINT)
        self.assertEqual(exits, [("SIGINT a third time: exiting at once", 130)])

    def test_end_process(self) -> None:
        """A session that ended stops the reactor (once, whatever the outcome); stopping a
        stopped reactor is not an error."""
        reactor = FakeReactor()
        end_process(reactor, "peer-closed")
        end_process(reactor, "stopped")
        stop_reactor(reactor)
        self.assertEqual(reactor.stops, 1)
