"""Session: one long-running dilated session, as a Twisted ``Service``.

A :class:`Session` creates one wormhole with ``dilation=True``, dilates it at once, starts the
:class:`Forwarder`, sets or allocates the code and reports what happens as status events;
:class:`SessionService` wraps it for ``twistd``. Lifecycle: ``session_machine`` over a
:class:`.core.SessionCore` (state-diagrams/service.svg).

Invariants: a stop stops accepting at once, drains for ``drain_timeout``, cuts the rest
(reported, never silently) and closes the wormhole within ``close_timeout``; ``stop()`` and
``stop_now()`` are safe any number of times from anywhere; a fatal error is reported once, with
advice; ``on_ended(outcome)`` comes just before the one last ``closed`` event; every status
event is also logged as a line. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from automat import TypeMachine, TypeMachineBuilder
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import ILogObserver, Logger

from txdilation.session.config import SessionConfig
from txdilation.session.core import SessionCore, SessionEvents
from txdilation.session.forwarding import Forwarder
from txdilation.session.observe import LinkState
from txdilation.session.status import StatusWriter
from txdilation.session.statuslog import NAMESPACE, StatusLog
from txdilation.settings import Settings
from txdilation.wire.machines import complete

__all__ = ["Session", "SessionService", "session_machine"]

#: the session's lines are "[txdilation.session] ..." (users and docs/plugin.md read them)
_log = Logger(namespace=NAMESPACE)


def _build_session_machine() -> TypeMachine[SessionEvents, SessionCore]:
    b = TypeMachineBuilder(SessionEvents, SessionCore)
    idle = b.state("idle")
    running = b.state("running")
    draining = b.state("draining")
    closing = b.state("closing")
    stopped = b.state("stopped")
    I = SessionEvents  # noqa: E741 (a short alias keeps the transition table readable)

    @idle.upon(I.start).to(running)
    def begin(inputs: SessionEvents, core: SessionCore) -> None:
        core.inputs = inputs
        core.begin()

    @idle.upon(I.stop).to(stopped)
    @idle.upon(I.stop_now).to(stopped)
    @stopped.upon(I.stop).loop()
    @stopped.upon(I.stop_now).loop()
    def already_stopped(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.release_waiters()

    @running.upon(I.stop).to(draining)
    def drain(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.stop_accepting(reason, core.config.drain_timeout)
        core.wait_for_drain()

    @running.upon(I.stop_now).to(closing)
    def stop_at_once(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.stop_accepting(reason, 0)
        core.cut_and_close(f"stopped at once ({reason})")

    @draining.upon(I.stop_now).to(closing)
    def force(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.writer.emit("stopping", reason=reason, open=core.forwarder.live, forced=True)
        core.cut_and_close(f"the stop was forced ({reason})")

    @running.upon(I.failed).to(closing)
    def fail(
        inputs: SessionEvents, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        core.writer.emit("error", message=message, where=where, fatal=True, advice=advice)
        core.outcome = "failed"
        core.stop_accepting("", 0)
        core.cut_and_close("the session failed")

    @running.upon(I.peer_left).to(closing)
    def peer_closed(inputs: SessionEvents, core: SessionCore) -> None:
        core.outcome = "peer-closed"
        core.stop_accepting("peer-closed", 0)
        core.cut_and_close("the peer stopped with it open")

    @draining.upon(I.stop).loop()
    @closing.upon(I.stop).loop()
    @closing.upon(I.stop_now).loop()
    def wait(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        pass  # the waiter is registered; finish() releases it

    @draining.upon(I.drained).to(closing)
    def close(inputs: SessionEvents, core: SessionCore) -> None:
        core.cut_and_close(f"the {core.config.drain_timeout:g} s grace period ended")

    @closing.upon(I.closed).to(stopped)
    def finish(inputs: SessionEvents, core: SessionCore, mood: str) -> None:
        core.finish(mood)

    @idle.upon(I.failed).loop()
    @draining.upon(I.failed).loop()
    @closing.upon(I.failed).loop()
    @stopped.upon(I.failed).loop()
    def log_failure(
        inputs: SessionEvents, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        _log.info("after the stop began ({where}): {message}", where=where, message=message)

    # documented no-ops: a second start; the peer leaving or drain/close results in states
    # where the session is not running or already ending
    complete(b, (idle, running, draining, closing, stopped))
    return b.build()


session_machine = _build_session_machine()


class Session:
    """One dilated session (see the module docstring).

    :param config: the settings.
    :param reactor: the reactor to run on (``IReactorTime``, ``IReactorTCP``, ...).
    :param writer: where status events go.
    :param on_ended: called with the outcome (``stopped``, ``failed``, ``peer-closed``) when
        the session has ended, just before the ``closed`` event (e.g. to stop the process with
        the right exit status).
    :param settings: the library's settings; None: :func:`.library.library_settings` over
        ``os.environ``, when the session dilates.
    """

    def __init__(
        self,
        config: SessionConfig,
        reactor: Any,
        writer: StatusWriter,
        on_ended: Callable[[str], object] | None = None,
        settings: Settings | None = None,
    ) -> None:
        writer.add_observer(StatusLog())
        forwarder = Forwarder(reactor, config.listen, config.connect, writer)
        self._core = SessionCore(config, reactor, writer, on_ended, forwarder, settings)
        self._machine: SessionEvents = session_machine(self._core)

    @property
    def forwarder(self) -> Forwarder:
        """The forwarded services (totals, live connections)."""
        return self._core.forwarder

    @property
    def link(self) -> LinkState:
        """The last known state of the peer link."""
        return self._core.observer.state

    @property
    def outcome(self) -> str:
        """``stopped`` (so far, or after a stop), ``failed`` or ``peer-closed``."""
        return self._core.outcome

    def start(self) -> None:
        """Start the session (once; later calls do nothing)."""
        self._machine.start()

    def stop(self, reason: str = "stop") -> Deferred[None]:
        """Stop cleanly (see the module docstring); fires with None once stopped. Safe to call
        from any callback, including the session's own events."""
        d = self._core.stop_waiters.wait()
        self._machine.stop(reason)
        return d

    def stop_now(self, reason: str = "stop") -> Deferred[None]:
        """Stop without the grace period: forwarded connections still open are cut at once
        (reported as such); fires with None once stopped. Ends a grace period under way."""
        d = self._core.stop_waiters.wait()
        self._machine.stop_now(reason)
        return d

    def cut_link(self) -> bool:
        """Debug and test aid: abort the current L2 connection (Dilation reconnects).

        :returns: False when no connection is selected at the moment.
        """
        dilated = self._core.dilated
        if dilated is None or not dilated.connected:
            return False
        self._core.writer.emit("link-cut", generation=self.link.generation)
        dilated.abort_connection()
        return True


class SessionService(Service):
    """``twistd dilation``: a :class:`Session` started and stopped with the application.

    :param log_observer: if given, set as the application's ``ILogObserver`` component when
        the service joins it (twistd then logs through it, unless ``--logger`` says otherwise).
    """

    name = "txdilation-session"

    def __init__(self, session: Session, log_observer: ILogObserver | None = None) -> None:
        self.session = session
        self.log_observer = log_observer

    def setServiceParent(self, parent: Any) -> None:
        super().setServiceParent(parent)  # type: ignore[no-untyped-call]
        get, put = getattr(parent, "getComponent", None), getattr(parent, "setComponent", None)
        if self.log_observer is None or get is None or put is None:
            return
        if get(ILogObserver, None) is None:
            put(ILogObserver, self.log_observer)

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]
        self.session.start()

    def stopService(self) -> Deferred[None]:
        super().stopService()  # type: ignore[no-untyped-call]
        return self.session.stop("stop")
