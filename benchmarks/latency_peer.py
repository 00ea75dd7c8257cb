"""The latency benchmark's peers, each in its own process: ``python -m benchmarks.latency_peer``.

Layer: benchmark infrastructure (not shipped). The same machinery as ``benchmarks.peer`` (stock
confined to 127.0.0.1, txdilation installed as the drop-in, one JSON result line on stdout),
with two roles of its own:

- ``latency-server`` (the Leader): echoes every ``dataReceived`` on subchannels named
  ``echo``, and swallows whatever arrives on ``bulk``, until the parent closes its stdin;
- ``latency-client``: measures, one phase after the other, on the one dilated link:

  1. ``first``: ``--first`` times, a new ``echo`` subchannel: from ``connect()`` to the whole
     echo of the 100-byte message its protocol writes in ``connectionMade`` (the subchannel is
     closed and the link left idle for ``--settle`` seconds before the next);
  2. ``idle``: on one ``echo`` subchannel, ``--samples`` round trips of a 100-byte message per
     write spacing of ``--spacings`` (milliseconds from an echo's arrival to the next write);
  3. ``bulk``: a ``bulk`` subchannel streams 64 KiB writes from a push producer without end;
     after ``--bulk-warmup`` seconds, ``--bulk-samples`` echo round trips on the ``echo``
     subchannel, ``--bulk-spacing`` ms apart; then the bulk stream stops. The bulk rate over
     the measured window (bytes the producer wrote) comes with it.

Each round trip is timed in the client alone (``time.perf_counter``), in milliseconds.
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from zope.interface import implementer

from benchmarks import peer as base
from benchmarks.peer import ECHO_MESSAGE, EchoServer, Peer, bulk_chunks, peer_finished

BULK_CHUNK = 64 << 10


class Sink(Protocol):
    """Counts and drops what arrives."""

    def __init__(self) -> None:
        self.bytes = 0

    def dataReceived(self, data: bytes) -> None:
        self.bytes += len(data)


async def latency_server(peer: Peer) -> dict[str, Any]:
    """Echo on ``echo``, swallow ``bulk``, until the client is done."""
    w, dilated, times = await peer.dilate(peer.args.code)
    sinks: list[Sink] = []

    def sink() -> Sink:
        sinks.append(Sink())
        return sinks[-1]

    await dilated.listener_for("echo").listen(Factory.forProtocol(EchoServer))
    await dilated.listener_for("bulk").listen(Factory.forProtocol(sink))
    await peer_finished(peer)
    await w.close()
    return {**times, "bulk_bytes": sum(s.bytes for s in sinks)}


class Echoes(Protocol):
    """Writes a message when asked; :meth:`round_trip` fires with the milliseconds until the
    whole echo came back. ``write_on_connect`` also writes one in ``connectionMade``."""

    def __init__(self, write_on_connect: bool = False) -> None:
        self._write_on_connect = write_on_connect
        #: the round trip under way (the one written in ``connectionMade`` from the start)
        self._waiting: Deferred[float] | None = Deferred() if write_on_connect else None
        self.first_echo = self._waiting
        self._sent_at = time.perf_counter()
        self._received = 0
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        if self._write_on_connect:
            self.transport.write(ECHO_MESSAGE)

    def round_trip(self) -> Deferred[float]:
        """Write the message now; fires with the round trip in ms."""
        assert self._waiting is None, "one round trip at a time"
        self._waiting = Deferred()
        self._sent_at = time.perf_counter()
        self.transport.write(ECHO_MESSAGE)
        return self._waiting

    def dataReceived(self, data: bytes) -> None:
        self._received += len(data)
        if self._received >= len(ECHO_MESSAGE) and self._waiting is not None:
            self._received -= len(ECHO_MESSAGE)
            waiting, self._waiting = self._waiting, None
            waiting.callback((time.perf_counter() - self._sent_at) * 1000)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


@implementer(IPushProducer)
class EndlessSender(Protocol):
    """Writes 64 KiB blocks as a push producer (up to 16 per turn) until :meth:`finish`."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        self._blocks = itertools.cycle(bulk_chunks("txdilation-latency", BULK_CHUNK))
        self._paused = False
        self._scheduled = False
        self._finished = False
        self.written = 0
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self._pump()

    def _pump(self) -> None:
        self._scheduled = False
        for _ in range(16):
            if self._paused or self._finished:
                return
            self.transport.write(next(self._blocks))
            self.written += BULK_CHUNK
        if not self._paused and not self._scheduled:
            self._scheduled = True
            self._reactor.callLater(0, self._pump)

    def finish(self) -> None:
        """Stop writing and close the subchannel."""
        self._finished = True
        self.transport.unregisterProducer()
        self.transport.loseConnection()

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if not self._scheduled:
            self._pump()

    def stopProducing(self) -> None:
        self._paused = True

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


async def _first_exchanges(peer: Peer, dilated: Any) -> list[float]:
    args = peer.args
    endpoint = dilated.connector_for("echo")
    times = []
    for _ in range(args.first):
        client = Echoes(write_on_connect=True)  # timed from here
        await endpoint.connect(Factory.forProtocol(lambda c=client: c))
        assert client.first_echo is not None
        times.append(await client.first_echo)
        client.transport.loseConnection()
        await client.lost
        await deferLater(peer.reactor, args.settle, lambda: None)
    return times


async def _round_trips(peer: Peer, echoes: Echoes, count: int, spacing_ms: float) -> list[float]:
    times = []
    for _ in range(count):
        times.append(await echoes.round_trip())
        await deferLater(peer.reactor, spacing_ms / 1000, lambda: None)
    return times


async def latency_client(peer: Peer) -> dict[str, Any]:
    """The three phases (see the module docstring)."""
    args = peer.args
    w, dilated, times = await peer.dilate(args.code)
    first = await _first_exchanges(peer, dilated)

    echoes = Echoes()
    await dilated.connector_for("echo").connect(Factory.forProtocol(lambda: echoes))
    await _round_trips(peer, echoes, 5, 1)  # warm-up, not counted
    idle: dict[str, list[float]] = {}
    for spacing in args.spacings.split(","):
        idle[spacing] = await _round_trips(peer, echoes, args.samples, float(spacing))

    sender = EndlessSender(peer.reactor)
    await dilated.connector_for("bulk").connect(Factory.forProtocol(lambda: sender))
    await deferLater(peer.reactor, args.bulk_warmup, lambda: None)
    written, window_started = sender.written, time.perf_counter()
    under_bulk = await _round_trips(peer, echoes, args.bulk_samples, args.bulk_spacing)
    bulk_mbps = (sender.written - written) / (time.perf_counter() - window_started) / 1e6
    sender.finish()
    echoes.transport.loseConnection()
    await sender.lost
    await echoes.lost
    await w.close()
    return {
        **times,
        "first_ms": first,
        "idle_ms": idle,
        "bulk_ms": under_bulk,
        "bulk_mbps": bulk_mbps,
    }


ROLES = {"latency-server": latency_server, "latency-client": latency_client}


def main(argv: list[str] | None = None) -> int:
    """Run one latency peer; the exit status as ``benchmarks.peer.main``'s."""
    p = base.build_parser(ROLES, "python -m benchmarks.latency_peer")
    p.add_argument("--first", type=int, default=30, help="new subchannels, one exchange each")
    p.add_argument("--settle", type=float, default=0.05, help="idle seconds after each")
    p.add_argument("--spacings", default="0,1,5,20,100", help="ms between idle writes")
    p.add_argument("--samples", type=int, default=100, help="round trips per spacing")
    p.add_argument("--bulk-warmup", type=float, default=1.0, help="seconds of bulk first")
    p.add_argument("--bulk-samples", type=int, default=200, help="round trips under bulk")
    p.add_argument("--bulk-spacing", type=float, default=10.0, help="ms between them")
    return base.main(argv, ROLES, p)


if __name__ == "__main__":
    sys.exit(main())
