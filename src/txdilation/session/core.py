"""What the session's lifecycle machine works on: :class:`SessionCore`.

Layer: session. The machine (``session_machine``) is in :mod:`.service_lifecycle`, the
:class:`~.service.Session` facade and the lifecycle's invariants in :mod:`.service`; this module
holds the behaviours they call: the start (create and dilate the wormhole, or with a pairing
file :func:`.paired_session.startup`; listen; set or allocate the code), the stop (stop accepting,
the grace period counted down in ``draining`` events, cut what is left, close the wormhole within
``close_timeout``) and the end (``on_ended``, then exactly one ``closed`` event).

Invariants: the core never calls the machine from outside a behaviour but through
:attr:`SessionCore.inputs` (every input returns None, so one made from inside a behaviour is
queued); ``w.close()`` is called once, whoever asks (:meth:`SessionCore.close`); a failure after
a stop began, or a cancelled startup, is not reported as the session's failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure
from wormhole.errors import LonelyError, ServerError, WrongPasswordError

from txdilation.reporting.advice import explain, unwrap
from txdilation.reporting.status_events import StatusWriter
from txdilation.selection.addresses import unreachable_listener
from txdilation.session import paired_session
from txdilation.session.config import SessionConfig
from txdilation.session.forwarding import Forwarder
from txdilation.session.library import Dilated, library_settings
from txdilation.session.observe import LinkObserver
from txdilation.settings import Settings
from txdilation.wire.dilation_errors import WormholeClosedError
from txdilation.wire.waiting import OneShot, Waiters

__all__ = ["SessionCore", "SessionEvents"]


class SessionEvents(TypingProtocol):
    """Inputs of the session's lifecycle machine."""

    def start(self) -> None:
        "Create the wormhole, dilate, listen, get the code."

    def stop(self, reason: str) -> None:
        "Stop cleanly (the facade registered a waiter that fires once stopped)."

    def stop_now(self, reason: str) -> None:
        "Stop without waiting for forwarded connections: cut them (a second signal)."

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
    dilated: Dilated | None = None
    startup: Deferred[None] | None = None
    #: the stop() and stop_now() calls waiting for the end
    stop_waiters: Waiters[None] = field(default_factory=Waiters)
    outcome: str = "stopped"
    closing: bool = False
    close_started: bool = False
    watching_close: bool = False
    #: the outcome of ``w.close()`` (its mood, or its failure)
    wormhole_closed: OneShot[Any] = field(default_factory=OneShot)
    inputs: SessionEvents | None = None
    draining: Deferred[None] | None = None
    countdown: Any = None

    def __post_init__(self) -> None:
        self.observer = LinkObserver(
            self.writer,
            self.rtt,
            on_stopped=self.wormhole_stopped,
            led_by_stock=self.led_by_stock,
            mapping_source=lambda: getattr(self.dilated, "port_mapping", None),
        )

    # --- start ---

    def begin(self) -> None:
        config = self.config
        appid, mailbox = paired_session.kept_server(config)
        self.writer.emit(
            "starting",
            appid=appid,
            mailbox=mailbox,
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
        unreachable = unreachable_listener(self.dilation_settings().network)
        if unreachable is not None and not config.no_listen:
            self.writer.emit("warning", message=unreachable, advice="")  # (one line says all)
        self.startup = Deferred.fromCoroutine(self._startup())
        self.startup.addErrback(self.startup_failed)

    async def _startup(self) -> None:
        config = self.config
        if config.pairing is not None:  # a PairedWormhole instead
            await paired_session.startup(self)
            return

        import wormhole

        import txdilation

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
            settings=self.dilation_settings(),
        )
        attached = self.forwarder.attach(self.dilated)
        attached.addErrback(self.startup_failed, "wormhole")
        try:
            await self.forwarder.start_listening()
        except Exception as e:
            self.startup_failed(Failure(e), "listen")  # type: ignore[no-untyped-call]
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

    def dilation_settings(self) -> Settings:
        """The library settings the session dilates with (given, or read now)."""
        return self.settings or library_settings(self.config)

    def startup_failed(self, f: Failure, where: str = "startup") -> None:
        closed = isinstance(unwrap(f), WormholeClosedError)
        if closed and self.wormhole is not None and not self.closing:
            self.wormhole_stopped()  # not the cause: the wormhole's close says why it closed
            return
        self.fail(f, where)

    def fail(self, f: Failure, where: str) -> None:
        if self.closing and isinstance(unwrap(f), CancelledError):
            return  # the stop cancelled the startup: nothing went wrong
        explained = explain(f)
        self._inputs().failed(explained.message, where, explained.advice)

    def rtt(self) -> float | None:
        return self.dilated.last_rtt if self.dilated is not None else None

    def led_by_stock(self) -> bool:
        """Whether we follow a stock Leader now (a paired wormhole never says so)."""
        return bool(getattr(self.dilated, "waiting_on_stock_leader", False))

    def wormhole_stopped(self) -> None:
        """The dilation stopped without us closing: the peer left (our close then succeeds),
        or the wormhole failed (a wrong code, a server error: our close reports it)."""
        if self.closing or self.wormhole is None or self.watching_close:
            return
        self.watching_close = True
        d = self.close()
        d.addCallbacks(
            lambda mood: self._inputs().peer_left(), self.fail, errbackArgs=("wormhole",)
        )

    # --- stop ---

    def stop_accepting(self, reason: str, grace: float) -> None:
        """Report the stop (what is open, the grace it gets) and stop accepting."""
        open_now = self.forwarder.live
        fields: dict[str, Any] = {"open": open_now} if open_now else {}
        if open_now and grace > 0:
            fields["grace_s"] = grace
        if reason:
            self.writer.emit("stopping", reason=reason, **fields)
        self.closing = True
        if self.startup is not None and not self.startup.called:
            self.startup.cancel()
        self.forwarder.stop_accepting()

    def wait_for_drain(self) -> None:
        """Wait up to ``drain_timeout`` for the forwarded connections to end, counting down."""
        grace = self.config.drain_timeout
        d = self.draining = self.forwarder.when_idle()
        d.addTimeout(grace, self.reactor)
        d.addBoth(lambda _: self._inputs().drained())
        if not d.called:
            step = _countdown_step(grace)
            self.countdown = self.reactor.callLater(step, self._count_down, grace - step, step)

    def _count_down(self, remaining: float, step: float) -> None:
        self.countdown = None
        if self.forwarder.live and remaining > 0:
            self.writer.emit("draining", open=self.forwarder.live, remaining_s=round(remaining))
            next_step = min(step, remaining)
            self.countdown = self.reactor.callLater(
                next_step, self._count_down, remaining - next_step, step
            )

    def cut_and_close(self, detail: str) -> None:
        """Cut what is still forwarded (``detail``: why) and close the wormhole."""
        if self.countdown is not None and self.countdown.active():
            self.countdown.cancel()
        self.countdown = None
        draining, self.draining = self.draining, None
        self.forwarder.cut_all(detail)
        if draining is not None and not draining.called:
            draining.cancel()
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
        self.writer.emit("closed", reason=self.outcome, mood=mood, cut=self.forwarder.cut)
        self.writer.close()
        self.release_waiters()

    def release_waiters(self) -> None:
        self.stop_waiters.fire(None)

    def close(self) -> Deferred[Any]:
        """Close the wormhole (``w.close()`` is called once); every call returns a new
        Deferred with the close's result (its mood, or its failure: why the wormhole ended)."""
        d = self.wormhole_closed.when_fired()
        if not self.close_started:
            self.close_started = True
            self.wormhole.close().addBoth(self.wormhole_closed.fire)
        return d

    def _inputs(self) -> SessionEvents:
        assert self.inputs is not None
        return self.inputs


def _countdown_step(grace: float) -> float:
    """Seconds between two ``draining`` events: 5, or a sixth of a long grace period."""
    return max(5.0, 5.0 * round(grace / 30.0))


_MOODS: dict[type[Exception], str] = {
    LonelyError: "lonely",
    WrongPasswordError: "scary",
    ServerError: "errory",
}
