"""
The differential semantics scenarios: two sides each, public API only.

Layer: test infrastructure (see ``tests.support.semantics``). Side ``a`` allocates the code,
side ``b`` joins. Dilation roles (Leader/Follower) are random and must not matter: nothing
recorded depends on them. Each scenario is written so that its trace is deterministic with
stock magic-wormhole (the suite checks this by running stock twice where asked): peers
synchronise with barriers and waits on observed events, never on sleeps alone; where a
scenario checks that something does NOT happen it waits a fixed time and records ``fired``.
The scenarios of one shape (a opens one subchannel, b accepts it, each runs steps on its
protocol) are rows of ``EXCHANGES`` run by one runner; the others are classes (``@scenario``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred

from tests.support.semantics import (
    Ctx,
    PullProducer,
    PushProducer,
    PushProducerWithoutStop,
    Scenario,
)

SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, doc: str, **options: Any) -> Callable[[type], type]:
    """Register the class's static ``a`` and ``b`` coroutines as scenario ``name``."""

    def register(cls: type) -> type:
        SCENARIOS[name] = Scenario(name, doc, cls.a, cls.b, **options)  # type: ignore[attr-defined]
        return cls

    return register


async def dilated(ctx: Ctx, timeout: float = 10.0, **kwargs: Any) -> Any:
    """dilate() and wait for when_dilated(); returns the DilatedWormhole."""
    dw = ctx.dilate(**kwargs)
    await ctx.outcome("when_dilated", dw.when_dilated(), timeout)
    return dw


async def opened(ctx: Ctx, name: str = "chat", **factory_options: Any) -> Any:
    """Side a: dilate, wait until b listens, open one subchannel ``name``; returns its
    protocol. Pairs with :func:`accepted` (the ``listening`` barrier)."""
    await dilated(ctx)
    await ctx.barrier("listening")
    return await ctx.connect(name, ctx.factory(name, **factory_options))


async def accepted(
    ctx: Ctx, name: str = "chat", timeout: float = 10.0, **factory_options: Any
) -> Any:
    """Side b: dilate, listen on ``name`` and wait for the first subchannel's protocol (each
    wait bounded by ``timeout``)."""
    await dilated(ctx, timeout)
    factory = ctx.factory(name, **factory_options)
    await ctx.listen(name, factory, timeout)
    await ctx.barrier("listening")
    return await ctx.wait(factory.nth(0), "first subchannel", timeout)


def addresses(ctx: Ctx, protocol: Any) -> None:
    """Record getHost()/getPeer() and whether getPeer() equals the buildProtocol address."""
    t = protocol.transport
    host, peer = t.getHost(), t.getPeer()
    ctx.trace.add("getHost", type(host).__name__)
    ctx.trace.add("getPeer", type(peer).__name__, getattr(peer, "subprotocol", None))


async def lost(ctx: Ctx, protocol: Any, what: str = "connectionLost") -> None:
    await ctx.wait(protocol.lost, what)


# ---------------------------------------------------------------------------------------------
# dilation and the DilatedWormhole


@scenario("dilate", "when_dilated() fires None on both sides, again when asked again")
class _Dilate:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = await dilated(ctx)
        await ctx.outcome("when_dilated again", dw.when_dilated())
        for name in ("when_dilated", "listener_for", "connector_for"):
            ctx.trace.add("has", name, callable(getattr(dw, name, None)))

    b = a


@scenario("dilate-twice", "a second dilate() raises CanOnlyDilateOnceError (stock's class)")
class _DilateTwice:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        from wormhole._dilation.manager import CanOnlyDilateOnceError

        try:
            ctx.wormhole.dilate()
        except CanOnlyDilateOnceError as e:
            ctx.trace.add("second dilate", type(e).__name__)
        except Exception as e:
            ctx.trace.add("second dilate", "other", type(e).__name__)
        else:
            ctx.trace.add("second dilate", "returned")

    b = a


@scenario(
    "old-peer",
    "the peer's wormhole cannot dilate: when_dilated/connect/listen errback OldPeerCannotDilate",
    dilation=(True, False),
)
class _OldPeer:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = ctx.dilate()
        connecting = dw.connector_for("chat").connect(ctx.factory("chat"))
        listening = dw.listener_for("chat").listen(ctx.factory("chat"))
        await ctx.outcome("when_dilated", dw.when_dilated())
        await ctx.outcome("connect", connecting)
        await ctx.outcome("listen", listening)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await ctx.outcome("get_versions", ctx.wormhole.get_versions())
        ctx.trace.add("dilate is", type(getattr(ctx.wormhole, "dilate", None)).__name__)


@scenario(
    "ping-interval-int",
    "dilate(ping_interval=5) with an int; dilation and a subchannel still work",
)
class _PingIntervalInt:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = ctx.dilate(ping_interval=5)
        if dw is not None:
            await ctx.outcome("when_dilated", dw.when_dilated())

    b = a


@scenario("status", "on_status_update: peer-connection kinds in order; generation never drops")
class _Status:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("connected")
        await ctx.sleep(0.3)
        ctx.record_status()

    b = a


@scenario(
    "status-callback-raises",
    "an on_status_update callback that raises: dilation and subchannels still work",
)
class _StatusRaises:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        def raising(status: Any) -> None:
            ctx.on_status(status)
            raise RuntimeError("application error in on_status_update")

        # stock never dilates here (its waits time out), so every wait is bounded; by the
        # same 10 s as everywhere else: a shorter bound raced our dilation on a loaded machine
        dw = ctx.dilate(on_status_update=raising)
        await ctx.outcome("when_dilated", dw.when_dilated(), timeout=10)
        await ctx.barrier("listening")
        protocol = await ctx.connect("chat", ctx.factory("chat"), timeout=10)
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"ping")
            await ctx.wait(protocol.when_received(4), "reply")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(4), "ping")
            ctx.call("write", protocol.transport.write, b"pong")
            await lost(ctx, protocol)


@scenario("send-ping", "Manager.send_ping(ping_id, on_pong) as fowl calls it: on_pong(rtt)")
class _SendPing:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        pong: Deferred[Any] = Deferred()
        manager = ctx.manager()
        ctx.call("send_ping", manager.send_ping, b"\x00\x01\x02\x03", pong.callback)
        await ctx.outcome("on_pong", pong)
        waiting: Deferred[Any] = Deferred()
        ctx.call("send_ping", manager.send_ping, b"\x00\x01\x02\x04", waiting.callback)
        ctx.call("send_ping duplicate id", manager.send_ping, b"\x00\x01\x02\x04")
        await ctx.outcome("on_pong", waiting)

    b = a


# ---------------------------------------------------------------------------------------------
# endpoints and ports


@scenario("connect-before-dilated", "connect()/listen() called before dilation completes")
class _ConnectEarly:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = ctx.dilate()
        factory = ctx.factory("early")
        connecting = dw.connector_for("early").connect(factory)
        protocol = await ctx.outcome("connect", connecting)
        await ctx.outcome("when_dilated", dw.when_dilated())
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"early bird")
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        dw = ctx.dilate()
        factory = ctx.factory("early")
        listening = dw.listener_for("early").listen(factory)
        # Whether a's OPEN comes before or after listen() fires is a race in stock too (an
        # OPEN held until then is delivered inside listen(), before its result): listen's
        # outcome is recorded once the data arrived, when it has fired either way.
        protocol = await ctx.wait(factory.nth(0), "subchannel")
        if protocol is not None:
            await ctx.wait(protocol.when_received(10), "data")
        await ctx.outcome("listen", listening)
        if protocol is not None:
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario(
    "open-before-listen", "OPEN, DATA and CLOSE arrive before b listens: held, then delivered"
)
class _OpenBeforeListen:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, "late")
        if protocol is None:
            return
        ctx.call("write", protocol.transport.write, b"early-1")
        ctx.call("write", protocol.transport.write, b"early-2")
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await ctx.barrier("sent")
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("listening")  # (it does not listen yet)
        await ctx.barrier("sent")
        await ctx.sleep(0.5)
        factory = ctx.factory("late")
        await ctx.listen("late", factory)
        protocol = await ctx.wait(factory.nth(0), "held subchannel")
        if protocol is not None:
            await lost(ctx, protocol)


@scenario("listen-twice", "a second listen() on the same name errbacks ValueError")
class _ListenTwice:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.listen("x", ctx.factory("x"))
        await ctx.listen("x", ctx.factory("x"))

    b = a


@scenario(
    "listening-port",
    "the listening port: getHost(); after stopListening() the peer opens that name",
)
class _ListeningPort:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        factory = ctx.factory("x")
        port = await ctx.listen("x", factory)
        if port is not None:
            ctx.trace.add("port.getHost", type(port.getHost()).__name__)
            ctx.call("port.stopListening", port.stopListening)
        await ctx.barrier("stopped")
        await ctx.barrier("opened")
        await ctx.sleep(1.0)
        ctx.trace.add("built after stopListening", len(factory.protocols))

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("stopped")
        protocol = await ctx.connect("x", ctx.factory("x"))
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"anyone?")
        await ctx.barrier("opened")


@scenario("empty-names", "connector_for('') raises ValueError; listener_for('') does not")
class _EmptyNames:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = await dilated(ctx)
        ctx.call("connector_for('')", dw.connector_for, "")
        ctx.call("listener_for('')", dw.listener_for, "")

    b = a


@scenario("many-subchannels", "five subchannels opened at once, interleaved writes, each in order")
class _Many:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("listening")
        factory = ctx.factory("many")
        protocols = []
        for _ in range(5):
            protocols.append(await ctx.connect("many", factory))
        for round_ in range(3):
            for i, protocol in enumerate(protocols):
                protocol.transport.write(f"{i}:{round_};".encode())
        for protocol in protocols:
            protocol.transport.loseConnection()
        for protocol in protocols:
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        factory = ctx.factory("many")
        await ctx.listen("many", factory)
        await ctx.barrier("listening")
        for i in range(5):
            protocol = await ctx.wait(factory.nth(i), f"subchannel {i}")
            if protocol is not None:
                await lost(ctx, protocol)


@scenario(
    "expected-subprotocols",
    "b dilates with expected_subprotocols=['allowed']; a opens 'other' and 'allowed'",
)
class _Expected:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("listening")
        allowed = await ctx.connect("allowed", ctx.factory("allowed"))
        if allowed is not None:
            ctx.call("write", allowed.transport.write, b"hi")
            await lost(ctx, allowed)
        other = await ctx.connect("other", ctx.factory("other"))
        if other is not None:
            await ctx.pending("other connectionLost", other.lost, 1.0)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx, expected_subprotocols=["allowed"])
        factory = ctx.factory("allowed")
        await ctx.listen("allowed", factory)
        await ctx.barrier("listening")
        protocol = await ctx.wait(factory.nth(0), "allowed subchannel")
        if protocol is not None:
            await ctx.wait(protocol.when_received(2), "hi")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("factory-returns-none-connect", "connect() with a factory whose buildProtocol is None")
class _NoneConnect:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("listening")
        await ctx.connect("none", ctx.factory("none", returns_none=True))
        await ctx.barrier("tried")

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        factory = ctx.factory("none")
        await ctx.listen("none", factory)
        await ctx.barrier("listening")
        await ctx.barrier("tried")
        await ctx.sleep(0.5)
        ctx.trace.add("subchannels built", len(factory.protocols))


@scenario(
    "factory-returns-none-listen",
    "b's listening factory returns None for a's OPEN; the link carries on",
)
class _NoneListen:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, "refused")
        if protocol is not None:
            await ctx.pending("connectionLost", protocol.lost, 1.5)
        second = await ctx.connect("fine", ctx.factory("fine"))
        if second is not None:
            ctx.call("write", second.transport.write, b"still here")
            await lost(ctx, second)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.listen("refused", ctx.factory("refused", returns_none=True))
        factory = ctx.factory("fine")
        await ctx.listen("fine", factory)
        await ctx.barrier("listening")
        protocol = await ctx.wait(factory.nth(0), "second subchannel")
        if protocol is not None:
            await ctx.wait(protocol.when_received(10), "data")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


# ---------------------------------------------------------------------------------------------
# writing


@scenario("link-cut", "the L2 link is cut between writes: all data once, in order")
class _LinkCut:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        for i in range(5):
            protocol.transport.write(f"before-{i};".encode())
        await ctx.wait(protocol.when_received(3), "ack")
        ctx.call("disconnect", ctx.manager()._connection.disconnect)
        for i in range(5):
            protocol.transport.write(f"after-{i};".encode())
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is None:
            return
        await ctx.wait(protocol.when_received(5 * 9), "before")
        ctx.call("write", protocol.transport.write, b"ack")
        await ctx.wait(protocol.when_received(5 * 9 + 5 * 8), "after", timeout=30)
        ctx.trace.add("all", protocol.received.decode())
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await lost(ctx, protocol)


# ---------------------------------------------------------------------------------------------
# producers and flow control


@scenario(
    "push-producer-without-stop",
    "push producers without stopProducing (as fowl's) on both sides; either side closes",
)
class _PushWithoutStop:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("listening")
        first = await ctx.connect("first", ctx.factory("first"))
        await ctx.barrier("first registered")
        second = await ctx.connect("second", ctx.factory("second"))
        for protocol in (first, second):
            if protocol is not None:
                producer = PushProducerWithoutStop(ctx.trace, protocol.label)
                ctx.call("registerProducer", protocol.transport.registerProducer, producer, True)
                protocol.transport.write(b"data")
        if first is not None:
            await lost(ctx, first)  # b closes the first
        if second is not None:
            ctx.call("loseConnection", second.transport.loseConnection)
            await lost(ctx, second)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        factories = {name: ctx.factory(name) for name in ("first", "second")}
        for name, factory in factories.items():
            await ctx.listen(name, factory)
        await ctx.barrier("listening")
        for name, factory in factories.items():
            protocol = await ctx.wait(factory.nth(0), name)
            if protocol is None:
                continue
            producer = PushProducerWithoutStop(ctx.trace, protocol.label)
            ctx.call("registerProducer", protocol.transport.registerProducer, producer, True)
            if name == "first":
                await ctx.barrier("first registered")
            await ctx.wait(protocol.when_received(4), "data")
            if name == "first":
                ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


# ---------------------------------------------------------------------------------------------
# application errors


@scenario("protocol-raises", "b's protocol raises in dataReceived; then a writes again")
class _ProtocolRaises:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        ctx.call("write", protocol.transport.write, b"boom")
        await ctx.barrier("raised")
        await ctx.pending("connectionLost", protocol.lost, 1.0)
        second = await ctx.connect("after", ctx.factory("after"))
        if second is not None:
            ctx.call("write", second.transport.write, b"fine")
            await lost(ctx, second)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        first = ctx.factory("chat", raise_in=["dataReceived"])
        await ctx.listen("chat", first)
        factory = ctx.factory("after")
        await ctx.listen("after", factory)
        await ctx.barrier("listening")
        protocol = await ctx.wait(first.nth(0), "first subchannel")
        if protocol is not None:
            await ctx.wait(protocol.when_received(4), "boom")
        await ctx.barrier("raised")
        second = await ctx.wait(factory.nth(0), "second subchannel")
        if second is not None:
            await ctx.wait(second.when_received(4), "fine")
            ctx.call("loseConnection", second.transport.loseConnection)
            await lost(ctx, second)


@scenario("protocol-raises-in-connectionMade", "b's protocol raises in connectionMade")
class _RaisesInMade:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        ctx.call("write", protocol.transport.write, b"hello")
        await ctx.barrier("made")
        await ctx.pending("connectionLost", protocol.lost, 1.0)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        factory = ctx.factory("chat", raise_in=["connectionMade"])
        await ctx.listen("chat", factory)
        await ctx.barrier("listening")
        protocol = await ctx.wait(factory.nth(0), "subchannel")
        await ctx.barrier("made")
        if protocol is not None:
            await ctx.pending("connectionLost", protocol.lost, 1.0)
            ctx.trace.add("received", len(protocol.received))


# ---------------------------------------------------------------------------------------------
# closing the wormhole


@scenario(
    "close-wormhole-with-subchannels",
    "a calls w.close() with a subchannel open: what each side's protocol sees",
    end_barrier=False,
)
class _CloseWormhole:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"last words")
        await ctx.barrier("open")
        ctx.record_status()
        await ctx.close()
        if protocol is not None:
            await ctx.pending("connectionLost", protocol.lost, 1.0)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(10), "last words")
        await ctx.barrier("open")
        ctx.record_status()
        if protocol is not None:
            await ctx.pending("connectionLost", protocol.lost, 3.0)
        await ctx.close()


@scenario(
    "close-wormhole-before-dilation",
    "a closes while when_dilated/connect/listen wait (b never dilates)",
    end_barrier=False,
)
class _CloseBeforeDilation:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = ctx.dilate()
        waiting = dw.when_dilated()
        connecting = dw.connector_for("x").connect(ctx.factory("x"))
        listening = dw.listener_for("x").listen(ctx.factory("x"))
        await ctx.outcome("get_verifier", ctx.wormhole.get_verifier())
        await ctx.barrier("keyed")
        await ctx.close()
        await ctx.pending("when_dilated", waiting, 0.5)
        await ctx.pending("connect", connecting, 0.1)
        await ctx.pending("listen", listening, 0.1)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await ctx.outcome("get_verifier", ctx.wormhole.get_verifier())
        await ctx.barrier("keyed")
        await ctx.close()


@scenario(
    "connect-after-close",
    "connect() and listen() after w.close()",
    end_barrier=False,
)
class _ConnectAfterClose:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        dw = await dilated(ctx)
        await ctx.barrier("dilated")
        await ctx.close()
        await ctx.pending("connect", dw.connector_for("x").connect(ctx.factory("x")), 0.5)
        await ctx.pending("listen", dw.listener_for("x").listen(ctx.factory("x")), 0.1)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        await dilated(ctx)
        await ctx.barrier("dilated")
        await ctx.close()


# ---------------------------------------------------------------------------------------------
# the common shape, as a table: a opens one subchannel, b accepts it, each side runs its steps
# on its protocol (nothing, if the subchannel never came); one row per scenario, one runner

#: One step of one side: given the context and that side's protocol, what it does (awaited).
Step = Callable[[Ctx, Any], Awaitable[object]]


def call(label: str, method: str, *args: Any) -> Step:
    """``ctx.call(label, transport.<method>, *args)``: the call and its result are recorded."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        ctx.call(label, getattr(protocol.transport, method), *args)

    return step


def write(*chunks: bytes) -> Step:
    """``transport.write(chunk)`` for each chunk, unrecorded (the peer's trace shows them)."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        for chunk in chunks:
            protocol.transport.write(chunk)

    return step


def receive(size: int, what: str, timeout: float = 10.0) -> Step:
    """Wait until ``size`` bytes in all arrived (recorded as ``what`` on timeout)."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        await ctx.wait(protocol.when_received(size), what, timeout=timeout)

    return step


def barrier(name: str) -> Step:
    """Wait for the peer at the barrier ``name``."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        await ctx.barrier(name)

    return step


def pause(seconds: float) -> Step:
    """Let ``seconds`` pass (where the scenario checks that something does NOT happen)."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        await ctx.sleep(seconds)

    return step


def pending(seconds: float, what: str = "connectionLost") -> Step:
    """Record whether connectionLost comes within ``seconds``."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        await ctx.pending(what, protocol.lost, seconds)

    return step


def register(label: str, producer: str, streaming: bool = True) -> Step:
    """``ctx.call(label, transport.registerProducer, PushProducer(producer), streaming)``."""

    async def step(ctx: Ctx, protocol: Any) -> None:
        made = PushProducer(ctx.trace, producer)
        ctx.call(label, protocol.transport.registerProducer, made, streaming)

    return step


async def _lost(ctx: Ctx, protocol: Any) -> None:
    await lost(ctx, protocol)


async def _read_lost(ctx: Ctx, protocol: Any) -> None:
    await ctx.wait(protocol.read_lost, "readConnectionLost")


async def _addresses(ctx: Ctx, protocol: Any) -> None:
    addresses(ctx, protocol)


#: Wait for connectionLost (recorded).
LOST: Step = _lost
#: Wait for readConnectionLost (recorded).
READ_LOST: Step = _read_lost
#: Record getHost()/getPeer().
ADDRESSES: Step = _addresses
#: Close the subchannel (recorded).
CLOSE: Step = call("loseConnection", "loseConnection")


@dataclass(frozen=True)
class Exchange:
    """One scenario of the common shape: ``a`` opens subchannel ``name`` (factory options
    ``a_options``), ``b`` accepts it (``b_options``); each then runs its steps in order."""

    name: str
    doc: str
    a: tuple[Step, ...]
    b: tuple[Step, ...]
    subchannel: str = "chat"
    a_options: Mapping[str, Any] = field(default_factory=dict)
    b_options: Mapping[str, Any] = field(default_factory=dict)

    async def run_a(self, ctx: Ctx) -> None:
        protocol = await opened(ctx, self.subchannel, **self.a_options)
        await _run(ctx, protocol, self.a)

    async def run_b(self, ctx: Ctx) -> None:
        protocol = await accepted(ctx, self.subchannel, **self.b_options)
        await _run(ctx, protocol, self.b)


async def _run(ctx: Ctx, protocol: Any, steps: Sequence[Step]) -> None:
    """The one runner: ``steps`` on ``protocol``, none if the subchannel never came."""
    if protocol is None:
        return
    for step in steps:
        await step(ctx, protocol)


async def _write_sequences(ctx: Ctx, protocol: Any) -> None:
    t = protocol.transport
    ctx.call("writeSequence", t.writeSequence, [b"ab", b"cd", b""])
    ctx.call("writeSequence", t.writeSequence, iter([b"ef"]))


async def _disconnecting(ctx: Ctx, protocol: Any) -> None:
    ctx.trace.add("disconnecting", getattr(protocol.transport, "disconnecting", None))


async def _received_while_paused(ctx: Ctx, protocol: Any) -> None:
    ctx.trace.add("received while paused", len(protocol.received))


async def _settle_close(ctx: Ctx, protocol: Any) -> None:
    await ctx.settle(protocol.lost, 1.0)  # b's CLOSE, if it sent one, travels the link


async def _connect_result(ctx: Ctx, protocol: Any) -> None:
    ctx.trace.add("connect result is the protocol", protocol is protocol.factory.protocols[0])


async def _echo_back(ctx: Ctx, protocol: Any) -> None:
    ctx.call("write", protocol.transport.write, bytes(protocol.received))


BULK_TOTAL = 4 << 20
BULK_CHUNK = 1 << 16


async def _send_bulk(ctx: Ctx, protocol: Any) -> None:
    chunk = b"\x5a" * BULK_CHUNK
    for _ in range(BULK_TOTAL // BULK_CHUNK):
        protocol.transport.write(chunk)


async def _pull_five_then_close(ctx: Ctx, protocol: Any) -> None:
    chunks = [f"pull-{i};".encode() for i in range(5)]
    producer = PullProducer(
        ctx.trace, "pull", protocol.transport, chunks, then=protocol.transport.loseConnection
    )
    ctx.call("registerProducer", protocol.transport.registerProducer, producer, False)
    await ctx.wait(producer.done, "all chunks produced")


async def _write_lost(ctx: Ctx, protocol: Any) -> None:
    await ctx.wait(protocol.write_lost, "writeConnectionLost")


def _write(data: bytes) -> Callable[[Any], object]:
    return lambda p: p.transport.write(data)


def _answer_and_close(p: Any) -> None:
    p.transport.write(b"world")
    p.transport.loseConnection()
    p.transport.write(b"too late")


def _request(p: Any) -> None:
    p.transport.write(b"request")
    p.transport.loseWriteConnection()


def _respond(p: Any) -> None:
    p.transport.write(b"response")
    p.transport.loseWriteConnection()


BOUNDARY_SIZES = (1, 1000, 65519, 65520, 1 << 20)
UNICODE_NAME = "ünïcödé/名前 x"

EXCHANGES: tuple[Exchange, ...] = (
    # endpoints and ports
    Exchange(
        "echo",
        "a opens a subchannel, b echoes; addresses, payloads, close by a",
        a=(
            ADDRESSES,
            _connect_result,
            barrier("addressed"),
            call("write", "write", b"hello"),
            receive(5, "echo"),
            CLOSE,
            LOST,
        ),
        b=(ADDRESSES, barrier("addressed"), receive(5, "hello"), _echo_back, LOST),
    ),
    Exchange(
        "unicode-name",
        "a non-ASCII subprotocol name reaches the peer intact",
        a=(ADDRESSES, LOST),
        b=(ADDRESSES, CLOSE, LOST),
        subchannel=UNICODE_NAME,
    ),
    # writing
    Exchange(
        "write-sequence",
        "writeSequence() is one record: one dataReceived at the peer",
        a=(_write_sequences, LOST),
        b=(receive(6, "data"), CLOSE, LOST),
    ),
    Exchange(
        "message-boundaries",
        "each write() arrives as one dataReceived(), up to 1 MiB",
        a=(write(*(bytes([65 + i]) * size for i, size in enumerate(BOUNDARY_SIZES))), LOST),
        b=(receive(sum(BOUNDARY_SIZES), "all data"), CLOSE, LOST),
    ),
    Exchange(
        "empty-write",
        "write(b'') then write(b'x'): what the peer receives",
        a=(call("write", "write", b""), call("write", "write", b"x"), LOST),
        b=(receive(1, "x"), pause(0.2), CLOSE, LOST),
    ),
    Exchange(
        "write-non-bytes",
        "write('text') is refused",
        a=(call("write(str)", "write", "text"), call("write", "write", b"bytes"), LOST),
        b=(receive(5, "bytes"), CLOSE, LOST),
    ),
    Exchange(
        "bulk-both-ways",
        "4 MiB each way in 64 KiB writes, at once",
        a=(_send_bulk, receive(BULK_TOTAL, "bulk", 30), barrier("received"), CLOSE, LOST),
        b=(_send_bulk, receive(BULK_TOTAL, "bulk", 30), barrier("received"), LOST),
        a_options={"summarize": True},
        b_options={"summarize": True},
    ),
    # closing
    Exchange(
        "close-by-opener",
        "a loseConnection(): both get connectionLost (reason types)",
        a=(call("write", "write", b"bye"), CLOSE, _disconnecting, LOST),
        b=(LOST,),
    ),
    Exchange(
        "close-by-accepter",
        "b loseConnection() on the subchannel a opened",
        a=(LOST,),
        b=(CLOSE, LOST),
    ),
    Exchange(
        "close-twice",
        "loseConnection() twice before the peer answers, and once after",
        a=(
            CLOSE,
            call("loseConnection again", "loseConnection"),
            LOST,
            call("loseConnection after close", "loseConnection"),
        ),
        b=(LOST, call("loseConnection after close", "loseConnection")),
    ),
    Exchange(
        "write-after-close",
        "write() after loseConnection(), and after connectionLost",
        a=(
            CLOSE,
            call("write while closing", "write", b"late"),
            LOST,
            call("write after close", "write", b"later"),
        ),
        b=(LOST, call("write after close", "write", b"later")),
    ),
    Exchange(
        "half-close",
        "half-closeable protocols: a closes its write side first, then b",
        a=(
            call("write", "write", b"request"),
            call("loseWriteConnection", "loseWriteConnection"),
            call("write after loseWriteConnection", "write", b"x"),
            READ_LOST,
            pending(0.5),
        ),
        b=(
            READ_LOST,
            call("write", "write", b"response"),
            call("loseWriteConnection", "loseWriteConnection"),
            pending(0.5),
        ),
        a_options={"half_close": True},
        b_options={"half_close": True},
    ),
    Exchange(
        "half-close-misuse",
        "loseConnection on a half-closeable protocol, and vice versa",
        a=(
            barrier("b tried"),
            CLOSE,
            call("loseWriteConnection", "loseWriteConnection"),
            call("loseWriteConnection again", "loseWriteConnection"),
            READ_LOST,
            call("loseConnection after both", "loseConnection"),
            call("loseWriteConnection after both", "loseWriteConnection"),
            pending(0.5),
        ),
        b=(call("loseWriteConnection", "loseWriteConnection"), barrier("b tried"), LOST),
        a_options={"half_close": True},
    ),
    # producers and flow control
    Exchange(
        "push-producer",
        "a registers a full IPushProducer and writes; b closes; what is called on the producer",
        a=(
            register("registerProducer", "push"),
            write(*(f"chunk-{i}".encode() for i in range(3))),
            LOST,
            pause(0.2),
            call("unregisterProducer after close", "unregisterProducer"),
        ),
        b=(receive(21, "chunks"), CLOSE, LOST),
    ),
    Exchange(
        "pull-producer",
        "an IPullProducer writes five chunks, unregisters and closes",
        a=(_pull_five_then_close, LOST),
        b=(LOST,),
    ),
    Exchange(
        "register-producer-twice",
        "a second registerProducer() raises; unregister without one",
        a=(
            register("registerProducer", "one"),
            register("registerProducer again", "2"),
            call("unregisterProducer", "unregisterProducer"),
            call("unregisterProducer again", "unregisterProducer"),
            CLOSE,
            LOST,
        ),
        b=(LOST,),
    ),
    Exchange(
        "register-producer-after-close",
        "registerProducer() on a closed subchannel",
        a=(CLOSE, LOST, register("registerProducer", "late"), pause(0.3)),
        b=(LOST,),
    ),
    Exchange(
        "pause-reading",
        "b pauses its subchannel's reading, a writes, b resumes",
        a=(barrier("paused"), write(*(f"msg-{i}".encode() for i in range(3))), LOST),
        b=(
            call("pauseProducing", "pauseProducing"),
            barrier("paused"),
            pause(0.5),
            _received_while_paused,
            call("resumeProducing", "resumeProducing"),
            receive(15, "all messages"),
            CLOSE,
            LOST,
        ),
    ),
    Exchange(
        "stop-producing",
        "b calls stopProducing() on its subchannel transport, a writes on",
        a=(
            barrier("stopped"),
            _settle_close,
            call("write", "write", b"after"),
            barrier("written"),
            pause(0.3),
            CLOSE,
            LOST,
        ),
        b=(
            call("stopProducing", "stopProducing"),
            barrier("stopped"),
            barrier("written"),
            pending(1.0),
        ),
    ),
    # applications calling back into the transport from inside its callbacks
    Exchange(
        "reentrant-calls",
        "protocols write and close from inside connectionMade/dataReceived/connectionLost",
        a=(LOST,),
        b=(LOST,),
        a_options={"reactions": {"connectionMade": _write(b"hello")}},
        b_options={
            "reactions": {
                "dataReceived": _answer_and_close,
                "connectionLost": lambda p: p.transport.loseConnection(),
            }
        },
    ),
    Exchange(
        "reentrant-half-close",
        "half-closeable protocols that answer and half-close from inside readConnectionLost",
        a=(READ_LOST, pending(0.5)),
        b=(_write_lost, pending(0.5)),
        a_options={"half_close": True, "reactions": {"connectionMade": _request}},
        b_options={"half_close": True, "reactions": {"readConnectionLost": _respond}},
    ),
)

for _exchange in EXCHANGES:
    SCENARIOS[_exchange.name] = Scenario(
        _exchange.name, _exchange.doc, _exchange.run_a, _exchange.run_b
    )
