"""Session: one long-running dilated session, as a Twisted ``Service``.

A :class:`Session` creates one wormhole with ``dilation=True``, dilates it at once, starts the
:class:`Forwarder`, sets or allocates the code and reports what happens as status events;
:class:`SessionService` wraps it for ``twistd``. Lifecycle: ``session_machine`` in
:mod:`.service_lifecycle` over a :class:`.core.SessionCore` (state-diagrams/service_lifecycle.svg).

Invariants: a stop stops accepting at once, drains for ``drain_timeout``, cuts the rest
(reported, never silently) and closes the wormhole within ``close_timeout``; ``stop()`` and
``stop_now()`` are safe any number of times from anywhere; a fatal error is reported once, with
advice; ``on_ended(outcome)`` comes just before the one last ``closed`` event; every status
event is also logged as a line. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import ILogObserver

from txdilation.reporting.status_events import StatusWriter
from txdilation.reporting.status_log import StatusLog
from txdilation.session.config import SessionConfig
from txdilation.session.core import SessionCore, SessionEvents
from txdilation.session.forwarding import Forwarder
from txdilation.session.observe import LinkState
from txdilation.session.service_lifecycle import session_machine
from txdilation.settings import Settings

__all__ = ["Session", "SessionService"]


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
