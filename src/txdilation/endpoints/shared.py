"""The wormholes behind ``dilation:`` endpoints: one per code, shared, closed when unused.

Layer: application edge (drives the public wormhole API with txdilation installed). A
:class:`SharedWormhole` creates the wormhole (``txdilation.install()`` first), dilates it with
TWISTED semantics, sets or allocates the code and reports it (the log, ``code-file``), and
logs stock's status callbacks as status events (namespace ``txdilation.endpoints``; also to
``status`` if given). A wormhole that fails is closed at once, every Deferred of
:meth:`SharedWormhole.watch` fails with the cause in words, and with ``exit-on-failure`` (the
default inside ``twistd``) the process exits with status 1 for its supervisor.

Invariants: a wormhole that ended (closed, failed, the peer left) says so once, through the
``forget`` callback it was given (:mod:`.registry` then forgets it, so a later ``acquire``
makes a new one); closing it is bounded by :data:`CLOSE_TIMEOUT`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Final

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.endpoints.endpoint_settings import EndpointSettings
from txdilation.reporting.advice import explain, unwrap
from txdilation.reporting.status_events import StatusWriter, open_status_writer
from txdilation.reporting.status_log import StatusLog
from txdilation.wire.waiting import OneShot, pass_to

__all__ = ["CLOSE_TIMEOUT", "NAMESPACE", "SharedWormhole", "in_twistd"]

NAMESPACE: Final = "txdilation.endpoints"
"""The ``twisted.logger`` namespace of the endpoints' lines."""

CLOSE_TIMEOUT: Final = 3.0
"""Seconds closing a wormhole may take (at the last stopListening, at reactor shutdown)."""

_log = Logger(namespace=NAMESPACE)


class SharedWormhole:
    """One wormhole and its dilation, shared by the endpoints that name it.

    :param forget: called with this wormhole once it ended (once; possibly from the
        constructor, when it fails at once).
    """

    def __init__(
        self,
        reactor: Any,
        settings: EndpointSettings,
        forget: Callable[[SharedWormhole], object] = lambda shared: None,
    ) -> None:
        import txdilation
        from txdilation.session.observe import LinkObserver

        txdilation.install()  # routes wormhole.create(dilation=True) through txdilation

        self.reactor = reactor
        self.settings = settings
        self._forget = forget
        self.key = settings.wormhole_key
        self.listening: set[str] = set()
        self.ports = 0
        self.clients = 0
        self.code: str | None = settings.code
        self.cause: Failure | None = None
        self.peer_joined = False
        self.exiting = False
        #: the end: fired once, with the failure that ended the wormhole, or None
        self._ending: OneShot[None] = OneShot()
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
        self.code_known: Deferred[str] = self._open()
        self.code_known.addErrback(self._failed_early)

    def _open(self) -> Deferred[str]:
        """Create the wormhole, dilate it, set or allocate the code; the Deferred fires with
        the code (:mod:`.shared_pairing` opens a paired wormhole instead)."""
        import wormhole

        import txdilation

        settings = self.settings
        self.wormhole = wormhole.create(
            settings.appid,
            settings.mailbox,
            self.reactor,
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
        return Deferred.fromCoroutine(self._follow())

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
        Deferred.fromCoroutine(self._after_code()).addErrback(self._failed_later)
        return code

    async def _after_code(self) -> None:
        verifier: bytes = await self.wormhole.get_verifier()
        self.peer_joined = True
        self.writer.emit("peer-connected", verifier=verifier.hex())
        await self.dilated.when_dilated()
        link = self.observer.state
        selected = {"generation": link.generation, "path": link.path, "hint": link.hint}
        self.writer.emit("dilated", **(selected if link.hint is not None else {}))

    def _failed_early(self, f: Failure) -> Failure:
        """The wormhole failed before the code was known (mailbox unreachable...): say why,
        and close it (it would go on retrying the mailbox server)."""
        self._end_with(f)
        self.close().addErrback(lambda _: None)
        return f

    def _failed_later(self, f: Failure) -> None:
        """The wormhole failed after the code was known (a wrong code, the mailbox server
        unreachable with a given code, ...), unless we were closing it ourselves."""
        if self._closing is None and not self.ended:
            self._failed_early(f)

    def watch(self, d: Deferred[Any]) -> None:
        """Fail ``d`` with the cause as soon as this wormhole fails (at once if it has)."""
        self._ending.when_fired().addErrback(pass_to(d))

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
        self._forget(self)
        if f is None or isinstance(unwrap(f), CancelledError):
            self._ending.fire(None)
            return
        explained = explain(f, mailbox_setting="mailbox=")
        self.cause = f = _in_words(f, explained)
        self.writer.emit(
            "error",
            message=explained.message,
            where="wormhole",
            fatal=True,
            advice=explained.advice,
        )
        self._ending.fire(f)
        if self.settings.exit_on_failure is not False and (
            self.settings.exit_on_failure or in_twistd()
        ):
            self._end_process()

    def _end_process(self) -> None:
        """A twistd server (or ``exit-on-failure=yes``): nothing is served any more; stop with
        exit status 1 (see the module docstring)."""
        from txdilation.session.process import end_process

        self.exiting = True
        _log.error(
            "dilation: the wormhole for {names} failed: stopping the process (exit status 1; "
            "exit-on-failure=no keeps it running)",
            names=", ".join(sorted(self.listening)) or self.settings.subprotocol,
        )
        end_process(self.reactor, "failed")

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


def in_twistd() -> bool:
    """True in a ``twistd`` server process (whose job the ``dilation:`` port is)."""
    return "twisted.scripts.twistd" in sys.modules


def _in_words(f: Failure, explained: Any) -> Failure:
    """``f`` with its message in words: stock raises some errors with no text (a wrong code's
    ``WrongPasswordError``); the advice is added as a note (shown under a traceback)."""
    exc = unwrap(f)
    if not str(exc).strip():
        exc.args = (explained.message,)
    text = f"{explained.message}; {explained.advice}" if explained.advice else explained.message
    notes = list(getattr(exc, "__notes__", ()))
    if text not in notes:
        if sys.version_info >= (3, 11):
            exc.add_note(text)
        else:  # no add_note before 3.11: the same attribute, where 3.11's traceback shows it
            setattr(exc, "__notes__", [*notes, text])  # noqa: B010
    return Failure(exc)  # type: ignore[no-untyped-call]


def _write_code(path: str, code: str) -> None:
    """Write ``code`` to ``path`` atomically, readable by the owner only (a code is a secret
    until it is used)."""
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(code + "\n")
    os.replace(temporary, path)
