"""The wormholes behind ``dilation:`` endpoints: one per code, shared, closed when unused.

Layer: application edge (drives the public wormhole API with txdilation installed). A
:class:`SharedWormhole` creates the wormhole (``txdilation.install()`` first), dilates it with
TWISTED semantics, sets or allocates the code and reports it (the log, ``code-file``), and
turns stock's status callbacks into a session's status events, logged as readable lines in
namespace ``txdilation.endpoints`` (and written to ``status`` if given).

Invariants: :func:`acquire` returns the one wormhole per (reactor, mailbox, appid, code or
code file), creating it on first use; its dilation settings are those of the first endpoint
(a later one that disagrees is a ``ValueError``); a wormhole that ended (closed, failed, the
peer left) is forgotten, so a later ``acquire`` makes a new one; every wormhole of a reactor
is closed when that reactor shuts down, each close bounded by :data:`CLOSE_TIMEOUT`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.endpoints.settings import EndpointSettings
from txdilation.session.advice import explain, unwrap
from txdilation.session.status import StatusWriter, open_status_writer
from txdilation.session.statuslog import StatusLog

__all__ = ["CLOSE_TIMEOUT", "NAMESPACE", "SharedWormhole", "acquire", "pass_to"]

NAMESPACE: Final = "txdilation.endpoints"
"""The ``twisted.logger`` namespace of the endpoints' lines."""

CLOSE_TIMEOUT: Final = 3.0
"""Seconds closing a wormhole may take (at the last stopListening, at reactor shutdown)."""

_log = Logger(namespace=NAMESPACE)


class SharedWormhole:
    """One wormhole and its dilation, shared by the endpoints that name it."""

    def __init__(self, reactor: Any, settings: EndpointSettings) -> None:
        import txdilation
        from txdilation.session.observe import LinkObserver

        txdilation.install()  # routes wormhole.create(dilation=True) through txdilation
        import wormhole

        self.reactor = reactor
        self.settings = settings
        self.key = settings.wormhole_key
        self.listening: set[str] = set()
        self.ports = 0
        self.clients = 0
        self.code: str | None = settings.code
        self.cause: Failure | None = None
        self.ended = False
        self.stopped_by_itself = False
        self._closing: Deferred[str] | None = None
        self.writer: StatusWriter = open_status_writer(reactor, settings.status)
        self.writer.add_observer(StatusLog(Logger(namespace=NAMESPACE), subject="wormhole"))
        self.observer = LinkObserver(self.writer, self._rtt, on_stopped=self._stopped_by_itself)
        self.writer.emit(
            "starting",
            appid=settings.appid,
            mailbox=settings.mailbox,
            listen=[],
            connect=[],
            pid=os.getpid(),
        )
        self.wormhole = wormhole.create(
            settings.appid,
            settings.mailbox,
            reactor,
            dilation=True,
            on_status_update=self.observer.wormhole_status,
        )
        self.dilated = txdilation.dilate(
            self.wormhole,
            settings.relay,
            no_listen=settings.no_listen,
            on_status_update=self.observer.dilation_status,
            ping_interval=settings.ping_interval,
            semantics="twisted",
        )
        if settings.code is not None:
            self.wormhole.set_code(settings.code)
        else:
            self.wormhole.allocate_code()
        self.code_known: Deferred[str] = Deferred.fromCoroutine(self._follow())
        self.code_known.addErrback(self._failed_early)

    def _rtt(self) -> float | None:
        rtt: float | None = self.dilated.last_rtt
        return rtt

    async def _follow(self) -> str:
        """Report the code (log, code file), then the verifier and the dilation."""
        code: str = await self.wormhole.get_code()
        self.code = code
        self.writer.emit("code", code=code)
        if self.settings.code_file:
            _write_code(self.settings.code_file, code)
            _log.info("wormhole code written to {path}", path=self.settings.code_file)
        Deferred.fromCoroutine(self._after_code()).addErrback(lambda f: None)
        return code

    async def _after_code(self) -> None:
        verifier: bytes = await self.wormhole.get_verifier()
        self.writer.emit("peer-connected", verifier=verifier.hex())
        await self.dilated.when_dilated()
        link = self.observer.state
        selected = {"generation": link.generation, "path": link.path, "hint": link.hint}
        self.writer.emit("dilated", **(selected if link.hint is not None else {}))

    def _failed_early(self, f: Failure) -> Failure:
        """The wormhole failed before the code was known (mailbox unreachable...)."""
        self._end_with(f)
        return f

    def _stopped_by_itself(self) -> None:
        """The dilation stopped without our close: the peer left, or the wormhole failed."""
        if self._closing is None and not self.ended:
            self.closed_under_us().addBoth(lambda _: None)

    def closed_under_us(self) -> Deferred[str]:
        """The wormhole ended by itself (the peer left, or it failed): close our side; the
        Deferred fires once :attr:`cause` says why (None: the peer left)."""
        if self._closing is None:
            self.stopped_by_itself = True
        return self.close()

    def _end_with(self, f: Failure | None) -> None:
        """The wormhole is over: say why (once), and forget it."""
        if self.ended:
            return
        self.ended = True
        _forget(self)
        if f is not None and not isinstance(unwrap(f), CancelledError):
            self.cause = f
            explained = explain(f)
            self.writer.emit(
                "error",
                message=explained.message,
                where="wormhole",
                fatal=True,
                advice=explained.advice,
            )

    def close(self) -> Deferred[str]:
        """Close the wormhole (once; bounded by :data:`CLOSE_TIMEOUT`); fires with the mood."""
        if self._closing is None:
            self._closing = Deferred.fromCoroutine(self._close())
        d: Deferred[str] = Deferred()
        self._closing.addBoth(pass_to(d))
        return d

    async def _close(self) -> str:
        closing: Deferred[Any] = self.wormhole.close()
        closing.addTimeout(CLOSE_TIMEOUT, self.reactor)
        mood = "happy"
        peer_left = False
        try:
            await closing
        except CancelledError:
            mood = "timeout"
            self._end_with(None)
        except Exception:
            failure = Failure()  # type: ignore[no-untyped-call]
            mood = "errory"
            self._end_with(failure)
        else:
            peer_left = self.stopped_by_itself and not self.ended
            self._end_with(None)
            if peer_left:
                self.writer.emit("stopping", reason="peer-closed")
                if self.listening:
                    served = ", ".join(sorted(self.listening))
                    self.writer.emit(
                        "warning",
                        message=f"the peer closed its wormhole: {served} is served no more",
                        advice="a wormhole code works once: restart (or listen again) with a new "
                        "code for another peer",
                    )
        if self.cause is not None:
            reason = "failed"
        elif peer_left:
            reason = "peer-closed"
        else:
            reason = "stopped"
        self.writer.emit("closed", reason=reason, mood=mood)
        self.writer.close()
        return mood

    def release_port(self, subprotocol: str) -> Deferred[Any]:
        """A port stopped listening: close the wormhole if nothing else uses it."""
        self.listening.discard(subprotocol)
        self.ports -= 1
        if self.ports <= 0 and self.clients == 0:
            return self.close()
        return succeed(None)


def pass_to(d: Deferred[Any]) -> Callable[[object], object]:
    def pass_on(result: object) -> object:
        if not d.called:
            if isinstance(result, Failure):
                d.errback(result)
                return None
            d.callback(result)
        return result

    return pass_on


def _write_code(path: str, code: str) -> None:
    """Write ``code`` to ``path`` atomically, readable by the owner only (a code is a secret
    until it is used)."""
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(code + "\n")
    os.replace(temporary, path)


@dataclass
class _Registry:
    """The shared wormholes of one reactor."""

    wormholes: dict[tuple[str, str, str | None, str | None], SharedWormhole] = field(
        default_factory=dict
    )


_registries: dict[int, _Registry] = {}


def acquire(reactor: Any, settings: EndpointSettings) -> SharedWormhole:
    """The wormhole ``settings`` name, created on first use.

    :raises ValueError: when an endpoint sharing it has other dilation settings.
    """
    registry = _registries.get(id(reactor))
    if registry is None:
        registry = _registries[id(reactor)] = _Registry()
        reactor.addSystemEventTrigger("before", "shutdown", _close_all, reactor)
    shared = registry.wormholes.get(settings.wormhole_key)
    if shared is None:
        shared = registry.wormholes[settings.wormhole_key] = SharedWormhole(reactor, settings)
    elif shared.settings.dilation != settings.dilation:
        raise ValueError(
            "dilation: endpoints sharing a wormhole (same mailbox, appid and code or code-file) "
            "must agree on relay, no-listen, ping-interval and status"
        )
    return shared


def _forget(shared: SharedWormhole) -> None:
    registry = _registries.get(id(shared.reactor))
    if registry is not None and registry.wormholes.get(shared.key) is shared:
        del registry.wormholes[shared.key]


def _close_all(reactor: Any) -> Deferred[Any]:
    """Reactor shutdown: close every wormhole of ``reactor`` (the peers hear we left)."""
    from twisted.internet.defer import DeferredList

    registry = _registries.pop(id(reactor), None)
    wormholes = list(registry.wormholes.values()) if registry is not None else []
    return DeferredList([w.close() for w in wormholes], consumeErrors=True)
