"""
What an application sees of Dilation, recorded as a comparable trace.

Layer: test infrastructure for the differential semantics suite (``tests/test_semantics.py``).
A scenario (``tests.support.semantics_scenarios``) drives only the public API of a dilated
wormhole (``dilate``, ``listener_for``/``connector_for``, endpoints, ports, subchannel
transports, producers, ``w.close()``, status callbacks) from two peer processes
(``tests.support.semantics_peer``), once with stock magic-wormhole and once with txdilation
installed. Everything the application can observe is appended to a :class:`Trace`: each
callback with its arguments described by type (``connectionLost`` reasons as
``ConnectionDone()`` versus ``Failure(ConnectionDone)``), each exception a call raised, each call
made on the application's own objects (producers, status callbacks), Deferred outcomes, and
every error logged as unhandled. The two traces of each side must be equal except for the
deviations the suite lists (each one documented in ``docs/stock-defects.md``).

Invariants: a trace holds only JSON values and nothing that depends on timing or on the
implementation's internals (payloads are described by length and digest beyond 48 bytes; flow
control is described by "was it ever paused", not by counts); every wait is bounded and a
wait that expires is itself recorded (``["timeout", what]``), so a hang shows up as a
difference instead of a stuck test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import (
    IAddress,
    IHalfCloseableProtocol,
    IPullProducer,
    IPushProducer,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from tests.support.waits import sleep

#: payloads up to this many bytes are recorded verbatim (as latin-1 text)
VERBATIM_PAYLOAD = 48

Event = list[Any]


def describe_payload(data: bytes) -> str:
    """Short payloads verbatim, longer ones as ``<N bytes sha256:...>``."""
    if len(data) <= VERBATIM_PAYLOAD:
        return data.decode("latin-1")
    return f"<{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:16]}>"


def describe_reason(reason: object) -> str:
    """``Failure(ConnectionDone)`` for a Failure, ``ConnectionDone()`` for a bare exception."""
    if isinstance(reason, Failure):
        return f"Failure({type(reason.value).__name__})"
    return f"{type(reason).__name__}()"


def describe_value(value: object) -> str:
    """A type-level description of a result: ``None``, ``str``, ``float``, a class name."""
    if value is None:
        return "None"
    if isinstance(value, Failure):
        return describe_reason(value)
    return type(value).__name__


def describe_address(address: object) -> list[Any]:
    """``[class name]`` plus the subprotocol for subchannel addresses."""
    described: list[Any] = [type(address).__name__]
    subprotocol = getattr(address, "subprotocol", None)
    if subprotocol is not None:
        described.append(subprotocol)
    described.append(IAddress.providedBy(address))
    return described


class Trace:
    """An ordered list of JSON-able events (each a list whose first item names it)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, *event: Any) -> None:
        self.events.append(list(event))


# ---------------------------------------------------------------------------------------------
# application objects that record what is done to them


class RecordingProtocol(Protocol):
    """Records every callback; ``received`` accumulates the payload.

    :param summarize: record ``dataReceived`` chunk sizes and a digest at the end (for bulk
        transfers) instead of one event per chunk.
    """

    def __init__(self, trace: Trace, label: str, *, summarize: bool = False) -> None:
        self.trace = trace
        self.label = label
        self.summarize = summarize
        self.received = bytearray()
        self.chunks: list[int] = []
        self.made: Deferred[None] = Deferred()
        self.lost: Deferred[None] = Deferred()
        self._data_waiters: list[tuple[int, Deferred[None]]] = []
        self.raise_in: set[str] = set()
        #: callback name -> what the protocol does, synchronously, inside that callback
        self.reactions: dict[str, Callable[[RecordingProtocol], object]] = {}

    def react(self, callback: str) -> None:
        """Run the reaction to ``callback`` (inside it), recording what it raised."""
        reaction = self.reactions.get(callback)
        if reaction is None:
            return
        try:
            reaction(self)
        except Exception as e:
            self.trace.add("reaction raised", self.label, callback, type(e).__name__)

    def connectionMade(self) -> None:
        self.trace.add("connectionMade", self.label)
        self.made.callback(None)
        factory = getattr(self, "factory", None)
        if isinstance(factory, RecordingFactory):
            factory.connected(self)
        self.react("connectionMade")
        if "connectionMade" in self.raise_in:
            raise RuntimeError("application error in connectionMade")

    def dataReceived(self, data: bytes) -> None:
        if not self.summarize:
            self.trace.add("dataReceived", self.label, describe_payload(data))
        self.received += data
        self.chunks.append(len(data))
        for waiter in list(self._data_waiters):
            size, d = waiter
            if len(self.received) >= size:
                self._data_waiters.remove(waiter)
                d.callback(None)
        self.react("dataReceived")
        if "dataReceived" in self.raise_in:
            raise RuntimeError("application error in dataReceived")

    def connectionLost(self, reason: object = None) -> None:  # type: ignore[override]
        if self.summarize:
            self.record_summary()
        self.trace.add("connectionLost", self.label, describe_reason(reason))
        if not self.lost.called:
            self.lost.callback(None)
        self.react("connectionLost")

    def record_summary(self) -> None:
        """One event for everything received so far (sizes, total, digest)."""
        self.trace.add(
            "received",
            self.label,
            len(self.received),
            hashlib.sha256(self.received).hexdigest()[:16],
            _compress_sizes(self.chunks),
        )

    def when_received(self, size: int) -> Deferred[None]:
        """Fires once at least ``size`` bytes arrived in all."""
        d: Deferred[None] = Deferred()
        if len(self.received) >= size:
            d.callback(None)
        else:
            self._data_waiters.append((size, d))
        return d


@implementer(IHalfCloseableProtocol)
class HalfCloseRecordingProtocol(RecordingProtocol):
    """A RecordingProtocol that is half-closeable (read and write sides close separately)."""

    def __init__(self, trace: Trace, label: str, *, summarize: bool = False) -> None:
        super().__init__(trace, label, summarize=summarize)
        self.read_lost: Deferred[None] = Deferred()
        self.write_lost: Deferred[None] = Deferred()

    def readConnectionLost(self) -> None:
        self.trace.add("readConnectionLost", self.label)
        self.read_lost.callback(None)
        self.react("readConnectionLost")

    def writeConnectionLost(self) -> None:
        self.trace.add("writeConnectionLost", self.label)
        self.write_lost.callback(None)
        self.react("writeConnectionLost")


def _compress_sizes(sizes: Iterable[int]) -> list[list[int]]:
    """Run-length encoding of chunk sizes: ``[[size, count], ...]``."""
    runs: list[list[int]] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    return runs


class RecordingFactory(Factory):
    """Builds recording protocols labelled ``name#1``, ``name#2``, ...; records each build.

    :param returns_none: ``buildProtocol`` returns None (a factory refusing connections).
    """

    def __init__(
        self,
        trace: Trace,
        name: str,
        *,
        half_close: bool = False,
        summarize: bool = False,
        returns_none: bool = False,
        raise_in: Iterable[str] = (),
        reactions: dict[str, Callable[[RecordingProtocol], object]] | None = None,
    ) -> None:
        self.trace = trace
        self.name = name
        self.half_close = half_close
        self.summarize = summarize
        self.returns_none = returns_none
        self.raise_in = set(raise_in)
        self.reactions = dict(reactions or {})
        self.protocols: list[RecordingProtocol] = []
        self._connected: list[RecordingProtocol] = []
        self._waiters: list[tuple[int, Deferred[RecordingProtocol]]] = []

    def buildProtocol(self, addr: IAddress) -> RecordingProtocol | None:  # type: ignore[override]
        label = f"{self.name}#{len(self.protocols) + 1}"
        self.trace.add("buildProtocol", label, describe_address(addr))
        if self.returns_none:
            self.protocols.append(None)  # type: ignore[arg-type]
            return None
        cls = HalfCloseRecordingProtocol if self.half_close else RecordingProtocol
        protocol = cls(self.trace, label, summarize=self.summarize)
        protocol.factory = self
        protocol.raise_in = self.raise_in
        protocol.reactions = self.reactions
        self.protocols.append(protocol)
        return protocol

    def startFactory(self) -> None:
        self.trace.add("startFactory", self.name)

    def stopFactory(self) -> None:
        self.trace.add("stopFactory", self.name)

    def connected(self, protocol: RecordingProtocol) -> None:
        """``protocol``'s connectionMade ran: wake whoever waits for it."""
        self._connected.append(protocol)
        for waiter in list(self._waiters):
            index, d = waiter
            if index < len(self._connected):
                self._waiters.remove(waiter)
                d.callback(self._connected[index])

    def nth(self, index: int) -> Deferred[RecordingProtocol]:
        """Fires with the ``index``-th protocol (0-based) once its connectionMade has run."""
        d: Deferred[RecordingProtocol] = Deferred()
        if index < len(self._connected):
            d.callback(self._connected[index])
        else:
            self._waiters.append((index, d))
        return d


class _ProducerBase:
    def __init__(self, trace: Trace, label: str) -> None:
        self.trace = trace
        self.label = label
        self.paused = False
        self.ever_paused = False
        self.resumes = 0

    def pauseProducing(self) -> None:
        self.paused = True
        self.ever_paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self.resumes += 1


class PushProducerWithoutStop(_ProducerBase):
    """A push producer with only pauseProducing/resumeProducing (as fowl's are)."""


@implementer(IPushProducer)
class PushProducer(_ProducerBase):
    """A full IPushProducer; ``stopProducing`` calls are recorded."""

    def stopProducing(self) -> None:
        self.trace.add("producer.stopProducing", self.label)


@implementer(IPullProducer)
class PullProducer:
    """An IPullProducer writing ``chunks`` one per ``resumeProducing``, then unregistering."""

    def __init__(
        self,
        trace: Trace,
        label: str,
        transport: Any,
        chunks: list[bytes],
        *,
        then: Callable[[], object] | None = None,
    ) -> None:
        self.trace = trace
        self.label = label
        self.transport = transport
        self.chunks = list(chunks)
        self.then = then
        self.done: Deferred[None] = Deferred()

    def resumeProducing(self) -> None:
        if not self.chunks:
            return
        self.transport.write(self.chunks.pop(0))
        if not self.chunks:
            self.transport.unregisterProducer()
            if self.then is not None:
                self.then()
            self.done.callback(None)

    def stopProducing(self) -> None:
        self.trace.add("producer.stopProducing", self.label)


# ---------------------------------------------------------------------------------------------
# the scenario context


class BarrierBroken(Exception):
    """The other peer ended before reaching a barrier."""


@dataclass
class Ctx:
    """What a scenario side gets: the wormhole, the trace, and bounded waiting helpers.

    ``barrier(name)`` returns once both peers reached ``name`` (the parent releases them).
    """

    reactor: Any
    trace: Trace
    role: str
    impl: str
    wormhole: Any
    barrier_fn: Callable[[str], Awaitable[None]]
    statuses: list[str] = field(default_factory=list)
    generations: list[int] = field(default_factory=list)
    status_recording: bool = True
    closed: bool = False
    dilated: Any = None

    # --- waiting ---

    async def barrier(self, name: str) -> None:
        """Wait until the other peer reaches the barrier of the same name."""
        await self.barrier_fn(name)

    async def sleep(self, seconds: float) -> None:
        await sleep(seconds, self.reactor)

    async def settle(self, d: Deferred[Any], seconds: float) -> None:
        """Wait until ``d`` fired or ``seconds`` passed, recording nothing (so that what the
        peer sent over the link before a barrier has arrived before we go on)."""
        fired: list[Any] = []
        d.addBoth(lambda r: fired.append(r) or r)
        deadline = self.reactor.seconds() + seconds
        while not fired and self.reactor.seconds() < deadline:
            await self.sleep(0.01)

    async def wait(
        self,
        d: Deferred[Any] | Awaitable[Any],
        what: str,
        timeout: float = 10.0,
        *,
        on_fire: Callable[[Any], object] | None = None,
    ) -> Any:
        """The result of ``d``; on timeout records ``["timeout", what]`` and returns None.

        A failure is returned as the Failure (not raised). ``on_fire(result)`` runs at the
        moment ``d`` fires (to record it in the order things happened)."""
        if not isinstance(d, Deferred):
            d = ensureDeferred(d)  # type: ignore[arg-type]
        box: list[Any] = []
        waiter: Deferred[None] = Deferred()

        def done(result: Any) -> None:
            box.append(result)
            if not waiter.called:
                waiter.callback(None)

        def fired(result: Any) -> None:
            if on_fire is not None and not waiter.called:
                on_fire(result)
            # Wake the scenario on a later reactor turn, never inside the callback that fired
            # ``d``: a scenario models an application reacting to an event, not code
            # re-entering the transport from inside a callback (the "reentrant-*" scenarios
            # do that on purpose, through protocol reactions).
            self.reactor.callLater(0, done, result)

        d.addBoth(fired)
        timer = self.reactor.callLater(timeout, lambda: waiter.called or waiter.callback(None))
        await waiter
        if timer.active():
            timer.cancel()
        if not box:
            self.trace.add("timeout", what)
            return None
        return box[0]

    async def outcome(self, what: str, d: Deferred[Any], timeout: float = 10.0) -> Any:
        """Wait for ``d`` and record ``["result", what, description]`` when it fires; return its
        value (None on failure or timeout)."""
        result = await self.wait(
            d,
            what,
            timeout,
            on_fire=lambda r: self.trace.add("result", what, describe_value(r)),
        )
        return None if isinstance(result, Failure) else result

    async def pending(self, what: str, d: Deferred[Any], seconds: float) -> None:
        """Record whether ``d`` fired within ``seconds`` (``["pending", what, bool]``)."""
        fired: list[Any] = []
        d.addBoth(lambda r: fired.append(r))
        await self.sleep(seconds)
        self.trace.add("fired", what, describe_value(fired[0]) if fired else "no")

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn``; record ``["call", what, "ok"]`` or the exception's class name."""
        try:
            value = fn(*args, **kwargs)
        except Exception as e:
            self.trace.add("call", what, type(e).__name__)
            return None
        self.trace.add("call", what, "ok")
        return value

    # --- the API under test ---

    def on_status(self, status: Any) -> None:
        """The ``on_status_update`` callback: peer connection kinds and generations."""
        if not self.status_recording:
            return
        kind = type(status.peer_connection).__name__
        if not self.statuses or self.statuses[-1] != kind:
            self.statuses.append(kind)
        self.generations.append(status.generation)

    def dilate(self, **kwargs: Any) -> Any:
        """``w.dilate(on_status_update=..., **kwargs)``; records an exception it raises."""
        kwargs.setdefault("on_status_update", self.on_status)
        self.dilated = self.call("dilate", self.wormhole.dilate, **kwargs)
        return self.dilated

    def factory(self, name: str, **kwargs: Any) -> RecordingFactory:
        return RecordingFactory(self.trace, name, **kwargs)

    async def connect(self, name: str, factory: Factory, timeout: float = 10.0) -> Any:
        """``connector_for(name).connect(factory)``; records the outcome."""
        endpoint = self.call(f"connector_for({name!r})", self.dilated.connector_for, name)
        if endpoint is None:
            return None
        return await self.outcome(f"connect({name!r})", endpoint.connect(factory), timeout)

    async def listen(self, name: str, factory: Factory, timeout: float = 10.0) -> Any:
        """``listener_for(name).listen(factory)``; records the outcome."""
        endpoint = self.call(f"listener_for({name!r})", self.dilated.listener_for, name)
        if endpoint is None:
            return None
        return await self.outcome(f"listen({name!r})", endpoint.listen(factory), timeout)

    def manager(self) -> Any:
        """Stock's private path to the dilation manager (fowl uses it for ``send_ping``)."""
        return self.wormhole._boss._D._manager

    def record_status(self) -> None:
        """Record the peer-connection kinds seen so far and whether generations only grew;
        status recording stops here (what follows the end barrier races the peer's close)."""
        self.trace.add("status", list(self.statuses))
        pairs = zip(self.generations, self.generations[1:], strict=False)
        monotonic = all(a <= b for a, b in pairs)
        self.trace.add("generation-never-decreases", monotonic)
        self.status_recording = False

    async def close(self, timeout: float = 15.0) -> None:
        """``w.close()``; records its outcome."""
        self.closed = True
        await self.outcome("close", self.wormhole.close(), timeout)


Side = Callable[[Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    """Two sides of one scenario and how their wormholes are made.

    :param dilation: per side, whether ``wormhole.create(dilation=True)``.
    :param end_barrier: the runner adds a final barrier and closes both wormholes after it.
    """

    name: str
    doc: str
    a: Side
    b: Side
    dilation: tuple[bool, bool] = (True, True)
    end_barrier: bool = True
    timeout: float = 60.0
