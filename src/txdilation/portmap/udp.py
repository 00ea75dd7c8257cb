"""Port mapping: one UDP request and its answer, with retransmissions (Twisted glue).

:func:`exchange` sends a request to ``host:port`` from a UDP socket of its own, connected to
that address (so only its datagrams are read, and an ICMP port unreachable ends the exchange at
once), again at each time of ``tries``, and fires with the first answer ``parse`` accepts.

Invariants: the exchange ends within ``timeout`` seconds of its start, by an answer,
:class:`~txdilation.portmap.mapping.NoService` (no answer, a port unreachable, or the socket
failed) or a cancellation; its socket is closed and its timers cancelled when it ends; a
datagram ``parse`` rejects (``ValueError``) is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime, IReactorUDP
from twisted.internet.protocol import DatagramProtocol

from txdilation.portmap.mapping import NoService

__all__ = ["RETRANSMISSIONS", "TIMEOUT", "exchange"]

T = TypeVar("T")

#: when the request is sent (seconds from the start): a LAN gateway answers in milliseconds
#: (RFC 6886's first retransmission is at 0.25 s)
RETRANSMISSIONS = (0.0, 0.25, 0.75)
TIMEOUT = 1.5


class _Exchange(DatagramProtocol):
    def __init__(
        self,
        host: str,
        port: int,
        request: bytes,
        parse: Callable[[bytes], Any],
        done: Deferred[Any],
    ) -> None:
        self._address = (host, port)
        self._request = request
        self._parse = parse
        self._done = done

    def startProtocol(self) -> None:
        self.transport.connect(*self._address)  # type: ignore[union-attr]

    def send(self) -> None:
        if self.transport is not None and not self._done.called:
            try:
                self.transport.write(self._request)  # type: ignore[call-arg]
            except OSError:
                self._finish(NoService(f"cannot send to {self._address[0]}"))

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        try:
            answer = self._parse(datagram)
        except ValueError:
            return  # not ours, or not an answer
        self._finish(answer)

    def connectionRefused(self) -> None:
        self._finish(NoService(f"port {self._address[1]} unreachable on {self._address[0]}"))

    def stopProtocol(self) -> None:
        # The epoll reactor closes a UDP socket whose only event is an error (an ICMP port
        # unreachable on a connected socket) instead of reading it: the exchange is over.
        self._finish(NoService(f"port {self._address[1]} unreachable on {self._address[0]}"))

    def _finish(self, result: object) -> None:
        if self._done.called:
            return
        if isinstance(result, Exception):
            self._done.errback(result)
        else:
            self._done.callback(result)


def exchange(
    reactor: Any,
    host: str,
    port: int,
    request: bytes,
    parse: Callable[[bytes], T],
    *,
    tries: Sequence[float] = RETRANSMISSIONS,
    timeout: float = TIMEOUT,
) -> Deferred[T]:
    """Send ``request`` to ``host:port`` at each time of ``tries``; the first answer ``parse``
    returns (see the module docstring).

    :param reactor: ``IReactorUDP`` and ``IReactorTime``.
    """
    assert IReactorUDP.providedBy(reactor) and IReactorTime.providedBy(reactor)
    done: Deferred[T] = Deferred()
    protocol = _Exchange(host, port, request, parse, done)
    try:
        listening: IListeningPort = reactor.listenUDP(0, protocol, "", 8192)
    except (CannotListenError, OSError) as e:
        return fail(NoService(f"no UDP socket: {e}"))
    timers: list[IDelayedCall] = [reactor.callLater(t, protocol.send) for t in tries]

    def give_up() -> None:
        protocol._finish(NoService(f"no answer from {host}:{port} within {timeout} s"))

    timers.append(reactor.callLater(timeout, give_up))

    def end(result: object) -> object:
        for timer in timers:
            if timer.active():
                timer.cancel()
        listening.stopListening()
        return result

    done.addBoth(end)
    return done
