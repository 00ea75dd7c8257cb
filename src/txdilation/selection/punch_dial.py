"""L3: the sockets of hole punching: a dial whose first SYN has a low TTL, and the probe that
tells whether such a dial survives on this host and path (the policy: ``punch_schedule``).

:class:`PunchEndpoint` makes the socket itself, since the TTL must be set between the socket's
creation and its ``connect()`` and restored right after: it binds our listening port, sets
``IP_TTL``, connects without blocking, restores the TTL and adopts the connected socket.
:class:`ExpiryProbe` sends such a SYN from an ephemeral port and reports a
:class:`~txdilation.selection.punch_schedule.Verdict`. Without a real POSIX reactor
:func:`punched_endpoint` is a plain ``TCP4ClientEndpoint`` and the probe answers ``ABORTED``.

Invariants: a socket made here is closed exactly once, by whoever ends its attempt (connected
and adopted, failed, timed out or cancelled), and is off the reactor before that; a cancelled
dial or probe sends nothing more (closing a connecting socket sends no RST).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectBindError, ConnectError, TimeoutError, getConnectError
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
)
from twisted.internet.tcp import makeBinding
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.selection.punch import sockets_reusable
from txdilation.selection.punch_schedule import PROBE_WAIT, Verdict
from txdilation.wire.waiting import Waiters

__all__ = ["ExpiryProbe", "PunchEndpoint", "punched_endpoint"]

_log = Logger()
_CONNECTING = (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)
_EXPIRED = (errno.EHOSTUNREACH, errno.ENETUNREACH)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _ttl_option(family: socket.AddressFamily) -> tuple[int, int]:
    if family == socket.AF_INET6:
        return socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS
    return socket.IPPROTO_IP, socket.IP_TTL


def _start(
    family: socket.AddressFamily,
    local: tuple[str, int] | None,
    remote: tuple[str, int],
    ttl: int | None,
    *,
    restore: bool,
) -> tuple[socket.socket, int]:
    """A non-blocking socket (bound to ``local`` with address and port reuse, if given) whose
    connect to ``remote`` has started, its SYN sent with TTL ``ttl`` (and the TTL put back
    afterwards if ``restore``); and the connect's result code.

    :raises ConnectBindError: when ``local`` cannot be bound.
    """
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if local is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                sock.bind(local)
            except OSError as e:
                raise ConnectBindError(e.errno, e.strerror) from None  # type: ignore[no-untyped-call]
        level, name = _ttl_option(family)
        system = sock.getsockopt(level, name)
        if ttl is not None:
            sock.setsockopt(level, name, ttl)
        code = sock.connect_ex(remote)
        if ttl is not None and restore:
            try:  # -1: the system's default again (RFC 3493; Linux for IPv4 too)
                sock.setsockopt(level, name, -1)
            except OSError:
                sock.setsockopt(level, name, system)
    except BaseException:
        sock.close()
        raise
    return sock, code


class _Connecting:
    """One connecting socket on the reactor (an ``IWriteDescriptor``): writable, or an error
    the reactor reports as a lost connection, means the connect ended; ``done(error)`` is told
    how (``error`` 0: connected), once, with the socket off the reactor."""

    def __init__(self, reactor: Any, sock: socket.socket, done: Callable[[int], None]) -> None:
        self._reactor = reactor
        self.sock: socket.socket | None = sock
        self._done: Callable[[int], None] | None = done
        reactor.addWriter(self)

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def logPrefix(self) -> str:
        return "punch"

    def doWrite(self) -> None:
        self._ended()

    def connectionLost(self, reason: Failure) -> None:
        self._ended(errno.ECONNABORTED)

    def _ended(self, otherwise: int = 0) -> None:
        done, self._done = self._done, None
        if self.sock is None or done is None:
            return
        self._reactor.removeWriter(self)
        error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        done(error or otherwise)

    def stop(self) -> None:
        """Off the reactor and closed (a connecting socket closed sends nothing), its
        descriptor number held until the reactor's next turn (:func:`_close_holding_number`);
        idempotent."""
        self._done = None
        if self.sock is not None:
            self._reactor.removeWriter(self)
            sock, self.sock = self.sock, None
            _close_holding_number(self._reactor, sock)


def _close_holding_number(reactor: Any, sock: socket.socket) -> None:
    """Close ``sock`` now, but keep its descriptor number taken (by ``/dev/null``) until the
    reactor's next turn. A stop made while the reactor handles another descriptor's event may
    leave this one's event in the same batch; were the number free, a socket opened meanwhile
    (a new generation's listener) could get it, and that stale event would reach it
    (``doWrite called on a Port``: the listener lost). Closed at once all the same, so that a
    dial from the same port to the same address may start again right away."""
    number = sock.detach()
    placeholder = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.dup2(placeholder, number, inheritable=False)  # the socket's last reference goes
    finally:
        os.close(placeholder)
    reactor.callLater(0, os.close, number)


@implementer(IProtocolFactory)
class _Capture:
    """Builds the dial's protocol with the caller's factory and keeps it."""

    def __init__(self, factory: IProtocolFactory) -> None:
        self.factory = factory
        self.built: IProtocol | None = None

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:
        self.built = self.factory.buildProtocol(addr)
        return self.built

    def doStart(self) -> None:
        """Nothing: the caller's factory is not started by an endpoint either."""

    def doStop(self) -> None:
        """Nothing (see doStart)."""


def _connect_error(code: int) -> ConnectError:
    """What ``connectTCP`` fails with for ``code``."""
    error: ConnectError = getConnectError((code, os.strerror(code)))  # type: ignore[no-untyped-call]
    return error


@implementer(IStreamClientEndpoint)
@dataclass(frozen=True)
class PunchEndpoint:
    """A dial to ``host:port`` from ``bind`` (our listening port), its first SYN with TTL
    ``ttl`` (``None``: the system's), given up after ``timeout`` seconds; see the module
    docstring."""

    reactor: Any
    host: str
    port: int
    bind: tuple[str, int]
    ttl: int | None
    timeout: float

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Start the dial; fires with the connected protocol, or fails as ``connectTCP``
        would (``ConnectionRefusedError``, ``ConnectError`` with ``osError``,
        ``TimeoutError``, ``ConnectBindError``)."""
        family = _family(self.host)
        try:
            sock, code = _start(family, self.bind, (self.host, self.port), self.ttl, restore=True)
        except ConnectBindError as e:
            return fail(e)
        if code not in _CONNECTING:
            sock.close()
            return fail(_connect_error(code))
        timer: IDelayedCall | None = None

        def ended(error: int) -> None:
            if timer is not None and timer.active():
                timer.cancel()
            held = attempt.sock
            attempt.sock = None  # the descriptor is off the reactor: ours to close or adopt
            assert held is not None
            try:
                if error:
                    d.errback(_connect_error(error))
                    return
                capture = _Capture(protocolFactory)
                self.reactor.adoptStreamConnection(held.fileno(), family, capture)
                if capture.built is None:
                    d.errback(_connect_error(errno.ECONNABORTED))
                else:
                    d.callback(capture.built)
            finally:
                held.close()  # adoptStreamConnection has its own descriptor

        def cancel(_: Deferred[IProtocol]) -> None:
            if timer is not None and timer.active():
                timer.cancel()
            attempt.stop()

        def too_long() -> None:
            attempt.stop()
            d.errback(TimeoutError(string=f"no answer within {self.timeout} s"))  # type: ignore[no-untyped-call]

        d: Deferred[IProtocol] = Deferred(cancel)
        attempt = _Connecting(self.reactor, sock, ended)
        timer = self.reactor.callLater(self.timeout, too_long)
        _log.debug(
            "punched dial to {host}:{port} from port {local}, first SYN TTL {ttl}",
            host=self.host,
            port=self.port,
            local=self.bind[1],
            ttl=self.ttl if self.ttl is not None else "system",
        )
        return d


def punched_endpoint(
    reactor: Any,
    host: str,
    port: int,
    bind: tuple[str, int],
    *,
    ttl: int | None,
    timeout: float,
) -> IStreamClientEndpoint:
    """The endpoint of a punched dial: a :class:`PunchEndpoint` on a real POSIX reactor, else
    the ordinary endpoint bound to the same port (``ttl`` is not used then)."""
    if sockets_reusable(reactor):
        return PunchEndpoint(reactor, host, port, bind, ttl, timeout)
    binding = makeBinding(bind[0], bind[1], reuseAddress=True, reusePort=True)
    endpoint: IStreamClientEndpoint = TCP4ClientEndpoint(
        reactor, host, port, timeout=timeout, bindAddress=binding
    )
    return endpoint


class ExpiryProbe:
    """Whether a low-TTL connect survives on this host and path, found once per address
    family by connecting from an ephemeral port with TTL ``ttl`` (never from our listening
    port: the probe's tuple is not the punch's) and waiting :data:`PROBE_WAIT` seconds."""

    def __init__(self, reactor: Any, ttl: int, *, wait: float = PROBE_WAIT) -> None:
        self._reactor = reactor
        self._ttl = ttl
        self._wait = wait
        self._known: dict[socket.AddressFamily, Verdict] = {}
        self._waiting: dict[socket.AddressFamily, Waiters[Verdict]] = {}
        self._running: dict[socket.AddressFamily, Callable[[], None]] = {}

    def known(self, host: str) -> Verdict | None:
        """The verdict for ``host``'s family, if known yet."""
        if not sockets_reusable(self._reactor):
            return Verdict.ABORTED
        return self._known.get(_family(host))

    def start(self, host: str, port: int, local: str) -> None:
        """Probe ``host``'s family (towards ``host:port``, from address ``local``) unless it is
        known or under way; the verdict is :meth:`known` later."""
        family = _family(host)
        if sockets_reusable(self._reactor) and not (
            family in self._known or family in self._running
        ):
            self._probe(family, host, port, local)

    def verdict(self, host: str, port: int, local: str) -> Deferred[Verdict]:
        """The verdict for ``host``'s family (probing ``host:port`` from address ``local``, as
        the punched dial will be, if not known yet); a Deferred of the caller's own
        (cancelling it stops nothing else)."""
        if not sockets_reusable(self._reactor):
            return succeed(Verdict.ABORTED)
        family = _family(host)
        if family in self._known:
            return succeed(self._known[family])

        d = self._waiting.setdefault(family, Waiters()).wait()
        self.start(host, port, local)
        return d

    def stop(self) -> None:
        """End any probe under way (its waiters are left unfired)."""
        for stop in list(self._running.values()):
            stop()
        self._running.clear()
        self._waiting.clear()

    def _probe(self, family: socket.AddressFamily, host: str, port: int, local: str) -> None:
        try:
            sock, code = _start(family, (local, 0), (host, port), self._ttl, restore=False)
        except OSError:
            self._found(family, Verdict.ABORTED)
            return
        if code not in _CONNECTING:
            sock.close()
            self._found(family, Verdict.ABORTED if code in _EXPIRED else Verdict.REACHED)
            return

        def ended(error: int) -> None:
            timer.cancel()
            attempt.stop()
            if error in _EXPIRED:
                self._found(family, Verdict.ABORTED)
            elif error in (0, errno.ECONNREFUSED):
                self._found(family, Verdict.REACHED)
            else:
                self._found(family, Verdict.ABORTED)

        def quiet() -> None:
            attempt.stop()  # nothing is sent when a connecting socket is closed
            self._found(family, Verdict.SURVIVES)

        def stop() -> None:
            if timer.active():
                timer.cancel()
            attempt.stop()

        attempt = _Connecting(self._reactor, sock, ended)
        timer = self._reactor.callLater(self._wait, quiet)
        self._running[family] = stop

    def _found(self, family: socket.AddressFamily, verdict: Verdict) -> None:
        self._running.pop(family, None)
        self._known[family] = verdict
        _log.debug("low-TTL SYN probe: {verdict}", verdict=verdict.value)
        waiting = self._waiting.pop(family, None)
        if waiting is not None:
            waiting.fire(verdict)
