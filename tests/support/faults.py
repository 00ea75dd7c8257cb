"""
Fault injection: a loopback TCP proxy whose link can be cut, black-holed, stalled, throttled,
delayed or taken down, and bounded schedules that drive it.

Layer: test infrastructure (not shipped). Put a :class:`FaultProxy` in front of a transit relay
or a peer's listener and point the clients at ``proxy.hint`` instead; everything it does happens
on 127.0.0.1.

What each fault does (``UP`` is client to target, ``DOWN`` target to client):

- ``cut()``: every live connection is reset at once, both halves (``SO_LINGER`` 0 then
  ``abortConnection``: the peers see RST, buffered data is lost, as on a real cut);
- ``blackhole(drain=False)``: the connections live now stop carrying anything, and nothing is
  closed: with ``drain=False`` the proxy stops reading (TCP windows fill up, as when packets are
  dropped), with ``drain=True`` it reads and discards. A close on one end is not passed on
  either. New connections are not affected. ``heal()`` revives them (held bytes and closes are
  delivered);
- ``stall(direction)``: that direction stops being forwarded on every connection, now and later,
  until ``unstall()`` / ``heal()`` (bytes are held, not lost);
- ``throttle(bytes_per_second)`` and ``delay(seconds)``: link conditions for every connection,
  now and later (``None`` / 0 removes them);
- ``down(refuse=False)``: cut everything, and until ``up()`` accept new connections but hold
  them without connecting onwards (a connect() during an outage that succeeds once the network
  is back); ``refuse=True`` resets new connections at once instead.

Invariants: held or delayed data is bounded (reading pauses beyond ``QUEUE_LIMIT`` per
direction); back-pressure passes through (a slow reader slows the writer); order within each
direction is kept; every timer is cancelled by ``stop()``, and a proxy stops by itself
``lifetime`` seconds after it started. Schedules (:class:`Every`, :func:`run_timeline`) always
have a bound (a count or a duration) and can be stopped early.
"""

from __future__ import annotations

import enum
import socket
import struct
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

LOOPBACK = "127.0.0.1"
QUEUE_LIMIT = 256 * 1024
DEFAULT_LIFETIME = 600.0

__all__ = [
    "DOWN",
    "UP",
    "Direction",
    "Every",
    "FaultProxy",
    "ProxyStats",
    "free_port",
    "run_timeline",
    "start_fault_proxy",
]


class Direction(enum.Enum):
    """Which way bytes travel through the proxy."""

    UP = "client to target"
    DOWN = "target to client"


UP, DOWN = Direction.UP, Direction.DOWN


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def _reset(transport: Any) -> None:
    """Close ``transport`` with an RST (linger 0), dropping whatever is buffered."""
    sock = getattr(transport, "socket", None)
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abortConnection()


@dataclass
class ProxyStats:
    """Counters for one proxy (cumulative since it started)."""

    accepted: int = 0
    cuts: int = 0
    connections_cut: int = 0
    blackholed: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_discarded: int = 0


class _End(Protocol):
    """One TCP end of a proxied connection (the accepted client, or our connection onward)."""

    def __init__(self, link: _Link, direction_out: Direction) -> None:
        self.link = link
        self.direction_out = direction_out  # bytes read here travel this way
        self.lost = False

    def connectionMade(self) -> None:
        self.link.end_connected(self)

    def dataReceived(self, data: bytes) -> None:
        self.link.pipes[self.direction_out].feed(data)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost = True
        self.link.end_lost(self)


@implementer(IPushProducer)
class _Pipe:
    """One direction of one connection: reads ``src``, writes ``dst``, honouring the faults."""

    def __init__(self, link: _Link, direction: Direction) -> None:
        self.link = link
        self.direction = direction
        self.src: _End | None = None
        self.dst: _End | None = None
        self.queue: deque[tuple[float, bytes]] = deque()
        self.queued = 0
        self.dst_full = False
        self.reading = True
        self.free_at = 0.0
        self.timer: Any = None
        self.close_after_flush = False
        self.forwarded = 0  # bytes delivered this way on this connection

    # IPushProducer, registered with dst's transport: dst's write buffer is full or drained.
    def pauseProducing(self) -> None:
        self.dst_full = True
        self.update_reading()

    def resumeProducing(self) -> None:
        self.dst_full = False
        self.update_reading()

    def stopProducing(self) -> None:
        self.dst_full = True

    @property
    def proxy(self) -> FaultProxy:
        return self.link.proxy

    def blocked(self) -> bool:
        """Nothing may be delivered now (black hole, stall, no onward connection yet)."""
        return (
            self.link.blackholed
            or self.direction in self.proxy._stalled
            or self.dst is None
            or self.link.closed
        )

    def feed(self, data: bytes) -> None:
        proxy = self.proxy
        if self.link.closed:
            return
        if self.link.blackholed and self.link.drain:
            proxy.stats.bytes_discarded += len(data)
            return
        if not self.queue and not self.blocked() and not proxy._delay and not proxy._rate:
            self._write(data)
            return
        self.queue.append((proxy._reactor.seconds(), data))
        self.queued += len(data)
        self.flush()

    def _write(self, data: bytes) -> None:
        assert self.dst is not None and self.dst.transport is not None
        self.forwarded += len(data)
        if self.direction is UP:
            self.proxy.stats.bytes_up += len(data)
        else:
            self.proxy.stats.bytes_down += len(data)
        self.dst.transport.write(data)

    def flush(self) -> None:
        """Deliver what is due, re-arm the timer for the rest, and adjust reading."""
        proxy = self.proxy
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None
        now = proxy._reactor.seconds()
        while self.queue and not self.blocked():
            arrived, data = self.queue[0]
            due = max(arrived + proxy._delay, self.free_at)
            if due > now:
                self.timer = proxy._reactor.callLater(due - now, self.flush)
                break
            self.queue.popleft()
            self.queued -= len(data)
            self._write(data)
            if proxy._rate:
                self.free_at = max(now, self.free_at) + len(data) / proxy._rate
        if not self.queue and self.close_after_flush and self.dst is not None:
            self.close_after_flush = False
            if self.dst.transport is not None:
                self.dst.transport.loseConnection()
        self.update_reading()

    def update_reading(self) -> None:
        src = self.src
        if src is None or src.transport is None or self.link.closed:
            return
        proxy = self.proxy
        want = not (
            self.dst_full
            or self.queued > QUEUE_LIMIT
            or (self.link.blackholed and not self.link.drain)
            or self.direction in proxy._stalled
            or (proxy._rate and self.queue)
        )
        if want != self.reading:
            self.reading = want
            if want:
                src.transport.resumeProducing()
            else:
                src.transport.pauseProducing()

    def cancel(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None
        self.queue.clear()
        self.queued = 0


class _Link:
    """One proxied connection: the accepted client end, the onward end, a pipe each way."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.pipes = {UP: _Pipe(self, UP), DOWN: _Pipe(self, DOWN)}
        self.client: _End | None = None
        self.target: _End | None = None
        self.blackholed = False
        self.drain = False
        self.closed = False
        self.lost_while_blackholed: list[_End] = []
        self.connecting: Deferred[Any] | None = None

    def ends(self) -> list[_End]:
        return [e for e in (self.client, self.target) if e is not None]

    def end_connected(self, end: _End) -> None:
        up, down = self.pipes[UP], self.pipes[DOWN]
        assert end.transport is not None
        if self.closed:  # cut while this end was connecting
            _reset(end.transport)
            return
        if end.direction_out is UP:  # the accepted client
            self.client = end
            up.src, down.dst = end, end
            end.transport.registerProducer(down, True)
            self.proxy._accepted(self)
        else:
            self.target = end
            down.src, up.dst = end, end
            end.transport.registerProducer(up, True)
            for pipe in (up, down):
                pipe.flush()
        for pipe in (up, down):
            pipe.update_reading()

    def connect_onward(self) -> None:
        """Open the connection to the target (once)."""
        if self.connecting is not None or self.closed:
            return
        proxy = self.proxy
        endpoint = TCP4ClientEndpoint(proxy._reactor, proxy.target_host, proxy.target_port)  # type: ignore[no-untyped-call]
        self.connecting = endpoint.connect(_EndFactory(self, DOWN))
        self.connecting.addErrback(self._onward_failed)

    def _onward_failed(self, failure: Failure) -> None:
        if not self.closed and self.client is not None and self.client.transport is not None:
            _reset(self.client.transport)

    def end_lost(self, end: _End) -> None:
        if all(e.lost for e in self.ends()) and (self.closed or not self.blackholed):
            self.proxy._links.discard(self)
        if self.closed:
            return
        if self.blackholed:  # a dead link carries no FIN or RST either
            self.lost_while_blackholed.append(end)
            return
        self._pass_on_close(end)

    def _pass_on_close(self, end: _End) -> None:
        # Bytes this end sent still reach the other end, then the other end is closed.
        outgoing = self.pipes[end.direction_out]
        incoming = self.pipes[DOWN if end.direction_out is UP else UP]
        incoming.cancel()
        other = self.target if end is self.client else self.client
        if other is None or other.lost:
            if self.connecting is not None and not self.connecting.called:
                self.connecting.cancel()
            self.closed = True
            self.proxy._links.discard(self)
            return
        outgoing.close_after_flush = True
        outgoing.flush()

    def cut(self) -> None:
        self.closed = True
        for pipe in self.pipes.values():
            pipe.cancel()
        if self.connecting is not None and not self.connecting.called:
            self.connecting.cancel()
        for end in self.ends():
            if end.transport is not None:
                _reset(end.transport)

    def set_blackholed(self, drain: bool) -> None:
        self.blackholed = True
        self.drain = drain
        for pipe in self.pipes.values():
            if drain:
                self.proxy.stats.bytes_discarded += pipe.queued
                pipe.cancel()
            pipe.update_reading()

    def heal(self) -> None:
        if not self.blackholed:
            return
        self.blackholed = False
        for pipe in self.pipes.values():
            pipe.flush()
        lost, self.lost_while_blackholed = self.lost_while_blackholed, []
        for end in lost:
            self._pass_on_close(end)


class _EndFactory(Factory):
    def __init__(self, link: _Link, direction_out: Direction) -> None:
        self.link = link
        self.direction_out = direction_out

    def buildProtocol(self, addr: Any) -> _End:
        return _End(self.link, self.direction_out)


class _AcceptFactory(Factory):
    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy

    def buildProtocol(self, addr: Any) -> _End:
        return _End(_Link(self.proxy), UP)


class FaultProxy:
    """
    A TCP proxy on 127.0.0.1 in front of ``target_host:target_port``; see the module docstring
    for the faults. Build it with :func:`start_fault_proxy`.

    Attributes: ``port`` (where it listens), ``hint`` (``tcp:127.0.0.1:PORT``), ``stats``
    (:class:`ProxyStats`).
    """

    def __init__(self, reactor: Any, target_host: str, target_port: int) -> None:
        self._reactor = reactor
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.stats = ProxyStats()
        self._links: set[_Link] = set()
        self._held: list[_Link] = []
        self._listening: Any = None
        self._deadline: Any = None
        self._stalled: set[Direction] = set()
        self._rate: float | None = None
        self._delay = 0.0
        self._down = False
        self._refuse = False
        self._stopped = False

    @property
    def hint(self) -> str:
        """The proxy as a transit hint: ``tcp:127.0.0.1:PORT``."""
        return f"tcp:{LOOPBACK}:{self.port}"

    @property
    def live_connections(self) -> int:
        """How many proxied connections are open now (black-holed ones included)."""
        return len(self._links)

    def _accepted(self, link: _Link) -> None:
        self.stats.accepted += 1
        assert link.client is not None and link.client.transport is not None
        if self._stopped or (self._down and self._refuse):
            link.closed = True
            _reset(link.client.transport)
            return
        self._links.add(link)
        if self._down:
            self._held.append(link)
        else:
            link.connect_onward()

    # --- faults ---

    def cut(self, *, carried: int = 0, below: int | None = None) -> int:
        """
        Reset every live connection (RST both ways); new connections are not affected.

        :param carried: only cut connections that have forwarded at least this many bytes in
            each direction (e.g. more than any handshake, to spare connections still in
            theirs, whatever the time they take); 0 cuts all, held ones too.
        :param below: only cut connections that have forwarded fewer bytes than this in
            either direction (connections still in their handshake); None: no such bound.
        :returns: how many connections were cut.
        """
        links = [
            link
            for link in self._links
            if min(pipe.forwarded for pipe in link.pipes.values()) >= carried
            and (below is None or max(pipe.forwarded for pipe in link.pipes.values()) < below)
        ]
        self._links.difference_update(links)
        self._held = [link for link in self._held if link not in links]
        for link in links:
            link.cut()
        self.stats.connections_cut += len(links)
        if links:
            self.stats.cuts += 1
        return len(links)

    def blackhole(self, *, drain: bool = False) -> int:
        """
        Stop forwarding on every live connection without closing anything (see the module
        docstring); connections made later are forwarded normally.

        :param drain: read and discard instead of not reading.
        :returns: how many connections were black-holed.
        """
        live = [link for link in self._links if not link.blackholed]
        for link in live:
            link.set_blackholed(drain)
        self.stats.blackholed += len(live)
        return len(live)

    def stall(self, direction: Direction) -> None:
        """Stop forwarding ``direction`` on every connection (now and later); bytes are held."""
        self._stalled.add(direction)
        self._refresh()

    def unstall(self, direction: Direction) -> None:
        """Forward ``direction`` again, held bytes first."""
        self._stalled.discard(direction)
        self._refresh()

    def throttle(self, bytes_per_second: float | None) -> None:
        """
        Limit each direction of each connection to ``bytes_per_second`` (``None``: no limit).

        :raises ValueError: for a rate that is not positive.
        """
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError(f"a rate must be positive, not {bytes_per_second!r}")
        self._rate = bytes_per_second
        self._refresh()

    def delay(self, seconds: float) -> None:
        """
        Deliver every chunk ``seconds`` after it arrived (0: no delay).

        :raises ValueError: for a negative delay.
        """
        if seconds < 0:
            raise ValueError(f"a delay cannot be negative: {seconds!r}")
        self._delay = seconds
        self._refresh()

    def down(self, *, refuse: bool = False) -> int:
        """
        The link goes down: cut every connection; until ``up()``, hold new connections (or,
        with ``refuse``, reset them at once).

        :returns: how many connections were cut.
        """
        self._down = True
        self._refuse = refuse
        return self.cut()

    def up(self) -> None:
        """The link is back: held connections are connected onwards, new ones forwarded."""
        self._down = False
        self._refuse = False
        held, self._held = self._held, []
        for link in held:
            link.connect_onward()

    def heal(self) -> None:
        """Undo every fault: black holes, stalls, throttle, delay and ``down``."""
        self._stalled.clear()
        self._rate = None
        self._delay = 0.0
        for link in list(self._links):
            link.heal()
        self._refresh()
        if self._down:
            self.up()

    def _refresh(self) -> None:
        for link in list(self._links):
            for pipe in link.pipes.values():
                pipe.flush()

    # --- lifecycle ---

    def stop(self) -> Deferred[None]:
        """
        Stop listening, reset every connection, cancel every timer. Idempotent.

        :returns: a Deferred that fires once the listening port is closed.
        """
        if self._stopped:
            return succeed(None)
        self._stopped = True
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        self.cut()
        stopped = self._listening.stopListening() if self._listening is not None else None
        if stopped is None:
            return succeed(None)
        d: Deferred[None] = Deferred()
        stopped.addBoth(lambda _: d.callback(None))
        return d


async def start_fault_proxy(
    reactor: Any,
    target_port: int,
    *,
    target_host: str = LOOPBACK,
    port: int = 0,
    lifetime: float = DEFAULT_LIFETIME,
) -> FaultProxy:
    """
    Start a :class:`FaultProxy` on 127.0.0.1 in front of ``target_host:target_port``.

    :param reactor: the reactor to listen, connect and time with.
    :param target_port: where connections are forwarded.
    :param target_host: the target's address (loopback by default).
    :param port: where to listen; 0 picks a free port.
    :param lifetime: seconds after which the proxy stops by itself.
    :returns: the running proxy; stop it with ``stop()`` (e.g. in a test cleanup).
    :raises twisted.internet.error.CannotListenError: if the port is taken.
    """
    proxy = FaultProxy(reactor, target_host, target_port)
    endpoint = TCP4ServerEndpoint(reactor, port, interface=LOOPBACK)  # type: ignore[no-untyped-call]
    proxy._listening = await endpoint.listen(_AcceptFactory(proxy))
    proxy.port = proxy._listening.getHost().port
    proxy._deadline = reactor.callLater(lifetime, proxy.stop)
    return proxy


# ---------------------------------------------------------------------------------------------
# schedules


class Every:
    """
    Call ``action`` every ``interval`` seconds, at most ``count`` times and for at most
    ``duration`` seconds (at least one bound is required); ``done`` fires with the number of
    calls once a bound is reached or ``stop()`` is called. An exception from ``action`` stops
    the schedule and fails ``done``.
    """

    def __init__(
        self,
        reactor: Any,
        interval: float,
        action: Callable[[], object],
        *,
        count: int | None = None,
        duration: float | None = None,
    ) -> None:
        if count is None and duration is None:
            raise ValueError("a schedule needs a count or a duration")
        if interval <= 0:
            raise ValueError(f"the interval must be positive, not {interval!r}")
        self._reactor = reactor
        self._interval = interval
        self._action = action
        self._count = count
        self._ends_at = None if duration is None else reactor.seconds() + duration
        self.runs = 0
        self.done: Deferred[int] = Deferred()
        self._call: Any = reactor.callLater(interval, self._run)

    def _run(self) -> None:
        self._call = None
        if self._ends_at is not None and self._reactor.seconds() > self._ends_at:
            self.stop()
            return
        try:
            self._action()
        except Exception:
            if not self.done.called:
                self.done.errback(Failure())
            return
        self.runs += 1
        if self._count is not None and self.runs >= self._count:
            self.stop()
            return
        self._call = self._reactor.callLater(self._interval, self._run)

    def stop(self) -> None:
        """Stop now (idempotent); ``done`` fires with the number of calls made."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if not self.done.called:
            self.done.callback(self.runs)


async def run_timeline(
    reactor: Any, steps: Sequence[tuple[float, Callable[[], object]]]
) -> list[float]:
    """
    Run each ``(offset, action)`` at ``offset`` seconds after the start, in offset order.

    :param reactor: the reactor to time with.
    :param steps: offsets (seconds from now) and zero-argument actions.
    :returns: the reactor time at which each action ran, in the order they ran.
    :raises Exception: whatever an action raised (later steps do not run).
    """
    from tests.support.waits import sleep

    started = reactor.seconds()
    ran: list[float] = []
    for offset, action in sorted(steps, key=lambda step: step[0]):
        wait = started + offset - reactor.seconds()
        if wait > 0:
            await sleep(wait, reactor)
        action()
        ran.append(reactor.seconds())
    return ran
