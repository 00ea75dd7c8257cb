"""One long-running dilated session, as a Twisted ``Service``.

Layer: session (the application on top of Dilation; txdilation must be installed with
``txdilation.install()`` before ``wormhole`` is imported, which ``txdilation.session.process``
does for the ``twistd`` plugin and the ``txdilation`` command).

A :class:`Session` creates one wormhole with ``dilation=True``, dilates it at once (refusing
every subprotocol name not given with ``--connect``), starts the :class:`Forwarder`, sets or
allocates the code, and reports what happens as status events. :class:`SessionService` wraps it
for ``twistd``: ``stopService`` returns the Deferred of a clean stop.

Lifecycle (module-level Automat machine ``session_machine``)::

    idle -start-> running -stop-> draining -drained-> closing -closed-> stopped
    running -failed-> closing            (a fatal error: the session ends as "failed")
    running -peer_left-> closing         (the peer closed its wormhole: ends as "peer-closed")

Invariants:

- a stop stops accepting at once (local ports closed, the peer's new subchannels refused),
  waits at most ``drain_timeout`` for forwarded connections to end by themselves, closes the
  rest, then closes the wormhole, waiting at most ``close_timeout``: a stop always finishes
  within ``drain_timeout + close_timeout`` (plus the reactor's own work);
- the last status event is exactly one ``closed`` (``reason`` ``stopped`` or ``failed``);
- ``stop()`` may be called any number of times, in any state, from any callback (every input
  returns None, so Automat queues one made from inside a behaviour); every returned Deferred
  fires (with None) once the session is stopped; errors after a stop began are logged;
- a fatal error (bad code, a peer that cannot dilate, a port that cannot listen, the wormhole
  failing by itself) is reported once as an ``error`` event with ``fatal: true``, in words with
  advice (:mod:`.advice`; a subchannel listener failing because the wormhole closed is not the
  cause: the wormhole's own close reports the cause); the peer
  closing its wormhole (Dilation reports the peer gone) ends the session cleanly; either way
  ``on_ended(outcome)`` is called (``failed``, ``peer-closed``; ``stopped`` after a stop)
  just before the ``closed`` event, so a process can exit with the right status;
- every status event is also logged as one readable line (:class:`.statuslog.StatusLog`);
- the session chooses its application semantics explicitly (:data:`SEMANTICS`, Twisted's:
  the splices are written and tested against it), whatever ``TXDILATION_SEMANTICS`` says;
- the library's settings are typed values (:func:`library_settings`): the session's own
  Dilation settings laid over the ``TXDILATION_*`` variables of the process environment, read
  when the session dilates unless the process entry point passed them in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import ILogObserver, Logger
from twisted.python.failure import Failure
from wormhole.errors import LonelyError, ServerError, WrongPasswordError

from txdilation.mailbox.dilated import DilatedWormhole
from txdilation.semantics import semantics_named
from txdilation.session.advice import explain, unwrap
from txdilation.session.config import SessionConfig
from txdilation.session.forwarding import Forwarder
from txdilation.session.observe import LinkObserver, LinkState
from txdilation.session.status import StatusWriter
from txdilation.session.statuslog import StatusLog
from txdilation.settings import Settings
from txdilation.wire.errors import WormholeClosedError

__all__ = ["SEMANTICS", "Session", "SessionService", "library_settings", "session_machine"]

SEMANTICS: Final = "twisted"
"""The application semantics the session's subchannels have (``txdilation.dilate``)."""

_log = Logger(namespace="txdilation.session")


def library_settings(config: SessionConfig, environ: Mapping[str, str]) -> Settings:
    """The settings a session dilates with: the ``TXDILATION_*`` variables of ``environ``,
    each replaced by the session's own setting where one was given (option or TOML key), and
    the session's :data:`SEMANTICS`.

    :raises ValueError: naming a ``TXDILATION_*`` variable set to something invalid.
    """
    settings = Settings.from_environ({**environ, **config.environment()})
    return dataclasses.replace(settings, semantics=semantics_named(SEMANTICS))


class SessionInputs(TypingProtocol):
    """Inputs of the session's lifecycle machine."""

    def start(self) -> None:
        "Create the wormhole, dilate, listen, get the code."

    def stop(self, reason: str) -> None:
        "Stop cleanly (the facade registered a waiter that fires once stopped)."

    def failed(self, message: str, where: str, advice: str) -> None:
        "Something the session cannot go on without failed (``advice``: what to do)."

    def peer_left(self) -> None:
        "The peer closed its wormhole: the dilation is over for good."

    def drained(self) -> None:
        "No forwarded connection is left, or the drain timeout passed."

    def closed(self, mood: str) -> None:
        "The wormhole is closed (or the close timeout passed)."


@dataclass
class SessionCore:
    """What the machine's behaviours work on (see :class:`Session` for the parameters)."""

    config: SessionConfig
    reactor: Any
    writer: StatusWriter
    on_ended: Callable[[str], object] | None
    forwarder: Forwarder
    settings: Settings | None = None
    observer: LinkObserver = field(init=False)
    wormhole: Any = None
    dilated: DilatedWormhole | None = None
    startup: Deferred[None] | None = None
    waiters: list[Deferred[None]] = field(default_factory=list)
    outcome: str = "stopped"
    closing: bool = False
    close_started: bool = False
    watching_close: bool = False
    close_result: object = None
    close_waiters: list[Deferred[Any]] | None = field(default_factory=list)
    inputs: SessionInputs | None = None

    def __post_init__(self) -> None:
        self.observer = LinkObserver(self.writer, self.rtt, on_stopped=self.wormhole_stopped)

    # --- start ---

    def begin(self) -> None:
        config = self.config
        self.writer.emit(
            "starting",
            appid=config.appid,
            mailbox=config.mailbox,
            listen=[f.name for f in config.listen],
            connect=list(config.connect_names),
            pid=os.getpid(),
        )
        if config.no_listen and not config.relay:
            self.writer.emit(
                "warning",
                message="this side advertises no direct hints (--no-listen) and has no relay",
                advice="the peer must listen and be reachable from here; otherwise give a "
                "--relay (tcp:HOST:PORT) or drop --no-listen, or nothing will ever connect",
            )
        self.startup = Deferred.fromCoroutine(self._startup())
        self.startup.addErrback(self._startup_failed)

    async def _startup(self) -> None:
        import wormhole

        import txdilation

        config = self.config
        w = self.wormhole = wormhole.create(
            config.appid,
            config.mailbox,
            self.reactor,
            dilation=True,
            on_status_update=self.observer.wormhole_status,
        )
        self.dilated = txdilation.dilate(
            w,
            list(config.relay) or None,
            no_listen=config.no_listen,
            on_status_update=self.observer.dilation_status,
            ping_interval=config.ping_interval,
            expected_subprotocols=list(config.connect_names),
            settings=self.settings or library_settings(config, os.environ),
        )
        attached = self.forwarder.attach(self.dilated)
        attached.addErrback(self._startup_failed, "wormhole")
        try:
            await self.forwarder.start_listening()
        except Exception as e:
            self._startup_failed(Failure(e), "listen")  # type: ignore[no-untyped-call]
            return
        if config.allocate_code:
            w.allocate_code()
        else:
            w.set_code(config.code)
        self.writer.emit("code", code=await w.get_code())
        verifier: bytes = await w.get_verifier()
        self.writer.emit("peer-connected", verifier=verifier.hex())
        await self.dilated.when_dilated()
        link = self.observer.state
        selected = {"generation": link.generation, "path": link.path, "hint": link.hint}
        self.writer.emit("dilated", **(selected if link.hint is not None else {}))

    def _startup_failed(self, f: Failure, where: str = "startup") -> None:
        closed = isinstance(unwrap(f), WormholeClosedError)
        if closed and self.wormhole is not None and not self.closing:
            self.wormhole_stopped()  # not the cause: the wormhole's close says why it closed
            return
        self._fail(f, where)

    def _fail(self, f: Failure, where: str) -> None:
        if self.closing and isinstance(unwrap(f), CancelledError):
            return  # the stop cancelled the startup: nothing went wrong
        explained = explain(f)
        self._inputs().failed(explained.message, where, explained.advice)

    def rtt(self) -> float | None:
        return self.dilated.last_rtt if self.dilated is not None else None

    def wormhole_stopped(self) -> None:
        """The dilation stopped without us closing: the peer left (our close then succeeds),
        or the wormhole failed (a wrong code, a server error: our close reports it)."""
        if self.closing or self.wormhole is None or self.watching_close:
            return
        self.watching_close = True
        d = self.close()
        d.addCallbacks(
            lambda mood: self._inputs().peer_left(), self._fail, errbackArgs=("wormhole",)
        )

    # --- stop ---

    def stop_accepting(self) -> None:
        self.closing = True
        if self.startup is not None and not self.startup.called:
            self.startup.cancel()
        self.forwarder.stop_accepting()

    def wait_for_drain(self) -> None:
        d = self.forwarder.when_idle()
        d.addTimeout(self.config.drain_timeout, self.reactor)
        d.addBoth(lambda _: self._inputs().drained())

    def close_wormhole(self) -> None:
        self.forwarder.close_all("stopping")
        Deferred.fromCoroutine(self._close()).addBoth(lambda mood: self._inputs().closed(mood))

    async def _close(self) -> str:
        w = self.wormhole
        if w is None:
            return "none"
        d = self.close()
        d.addTimeout(self.config.close_timeout, self.reactor)
        try:
            result = await d
        except CancelledError:
            return "timeout"
        except Exception as e:
            return _MOODS.get(type(e), "errory")
        return result if isinstance(result, str) else "happy"

    def finish(self, mood: str) -> None:
        if self.on_ended is not None:
            self.on_ended(self.outcome)
        self.writer.emit("closed", reason=self.outcome, mood=mood)
        self.writer.close()
        self.release_waiters()

    def release_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for d in waiters:
            d.callback(None)

    def close(self) -> Deferred[Any]:
        """Close the wormhole (``w.close()`` is called once); every call returns a new
        Deferred with the close's result (its mood, or its failure: why the wormhole ended)."""
        d: Deferred[Any] = Deferred()
        if self.close_waiters is None:
            _fire(d, self.close_result)
            return d
        self.close_waiters.append(d)
        if not self.close_started:
            self.close_started = True
            self.wormhole.close().addBoth(self._closed_with)
        return d

    def _closed_with(self, result: object) -> None:
        self.close_result = result
        waiters, self.close_waiters = self.close_waiters or [], None
        for d in waiters:
            _fire(d, result)

    def _inputs(self) -> SessionInputs:
        assert self.inputs is not None
        return self.inputs


def _fire(d: Deferred[Any], result: object) -> None:
    """Fire ``d`` with ``result`` (a ``Failure`` errbacks) unless it was cancelled."""
    if d.called:
        return
    if isinstance(result, Failure):
        d.errback(result)
    else:
        d.callback(result)


_MOODS: dict[type[Exception], str] = {
    LonelyError: "lonely",
    WrongPasswordError: "scary",
    ServerError: "errory",
}


def _build_session_machine() -> TypeMachine[SessionInputs, SessionCore]:
    b = TypeMachineBuilder(SessionInputs, SessionCore)
    idle = b.state("idle")
    running = b.state("running")
    draining = b.state("draining")
    closing = b.state("closing")
    stopped = b.state("stopped")
    I = SessionInputs  # noqa: E741 (a short alias keeps the transition table readable)

    @idle.upon(I.start).to(running)
    def begin(inputs: SessionInputs, core: SessionCore) -> None:
        core.inputs = inputs
        core.begin()

    @idle.upon(I.stop).to(stopped)
    @stopped.upon(I.stop).loop()
    def already_stopped(inputs: SessionInputs, core: SessionCore, reason: str) -> None:
        core.release_waiters()

    @running.upon(I.stop).to(draining)
    def drain(inputs: SessionInputs, core: SessionCore, reason: str) -> None:
        core.writer.emit("stopping", reason=reason)
        core.stop_accepting()
        core.wait_for_drain()

    @running.upon(I.failed).to(closing)
    def fail(
        inputs: SessionInputs, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        core.writer.emit("error", message=message, where=where, fatal=True, advice=advice)
        core.outcome = "failed"
        core.stop_accepting()
        core.close_wormhole()

    @running.upon(I.peer_left).to(closing)
    def peer_closed(inputs: SessionInputs, core: SessionCore) -> None:
        core.writer.emit("stopping", reason="peer-closed")
        core.outcome = "peer-closed"
        core.stop_accepting()
        core.close_wormhole()

    @draining.upon(I.stop).loop()
    @closing.upon(I.stop).loop()
    def wait(inputs: SessionInputs, core: SessionCore, reason: str) -> None:
        pass  # the waiter is registered; finish() releases it

    @draining.upon(I.drained).to(closing)
    def close(inputs: SessionInputs, core: SessionCore) -> None:
        core.close_wormhole()

    @closing.upon(I.closed).to(stopped)
    def finish(inputs: SessionInputs, core: SessionCore, mood: str) -> None:
        core.finish(mood)

    @idle.upon(I.failed).loop()
    @draining.upon(I.failed).loop()
    @closing.upon(I.failed).loop()
    @stopped.upon(I.failed).loop()
    def log_failure(
        inputs: SessionInputs, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        _log.info("after the stop began ({where}): {message}", where=where, message=message)

    # documented no-ops: a second start; the peer leaving or drain/close results in states
    # where the session is not running or already ending
    def nothing(inputs: SessionInputs, core: SessionCore, *args: object) -> None:
        pass

    for state in (running, draining, closing, stopped):
        state.upon(I.start).loop()(nothing)
    for state in (idle, draining, closing, stopped):
        state.upon(I.peer_left).loop()(nothing)
    for state in (idle, running, closing, stopped):
        state.upon(I.drained).loop()(nothing)
    for state in (idle, running, draining, stopped):
        state.upon(I.closed).loop()(nothing)  # type: ignore[arg-type]
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
    :param settings: the library's settings; None: :func:`library_settings` over
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
        self._machine: SessionInputs = session_machine(self._core)

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
        d: Deferred[None] = Deferred()
        self._core.waiters.append(d)
        self._machine.stop(reason)
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
