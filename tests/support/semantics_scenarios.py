"""
The differential semantics scenarios: two sides each, public API only.

Layer: test infrastructure (see ``tests.support.semantics``). Side ``a`` allocates the code,
side ``b`` joins. Dilation roles (Leader/Follower) are random and must not matter: nothing
recorded depends on them. Each scenario is written so that its trace is deterministic with
stock magic-wormhole (the suite checks this by running stock twice where asked): peers
synchronise with barriers and waits on observed events, never on sleeps alone; where a
scenario checks that something does NOT happen it waits a fixed time and records ``fired``.
"""

from __future__ import annotations

from collections.abc import Callable
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


@scenario("echo", "a opens a subchannel, b echoes; addresses, payloads, close by a")
class _Echo:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        addresses(ctx, protocol)
        ctx.trace.add("connect result is the protocol", protocol is protocol.factory.protocols[0])
        await ctx.barrier("addressed")
        ctx.call("write", protocol.transport.write, b"hello")
        await ctx.wait(protocol.when_received(5), "echo")
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is None:
            return
        addresses(ctx, protocol)
        await ctx.barrier("addressed")
        await ctx.wait(protocol.when_received(5), "hello")
        ctx.call("write", protocol.transport.write, bytes(protocol.received))
        await lost(ctx, protocol)


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


@scenario("unicode-name", "a non-ASCII subprotocol name reaches the peer intact")
class _UnicodeName:
    NAME = "ünïcödé/名前 x"

    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, _UnicodeName.NAME)
        if protocol is not None:
            addresses(ctx, protocol)
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx, _UnicodeName.NAME)
        if protocol is not None:
            addresses(ctx, protocol)
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


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


@scenario("write-sequence", "writeSequence() is one record: one dataReceived at the peer")
class _WriteSequence:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("writeSequence", protocol.transport.writeSequence, [b"ab", b"cd", b""])
            ctx.call("writeSequence", protocol.transport.writeSequence, iter([b"ef"]))
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(6), "data")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("message-boundaries", "each write() arrives as one dataReceived(), up to 1 MiB")
class _Boundaries:
    SIZES = (1, 1000, 65519, 65520, 1 << 20)

    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            for i, size in enumerate(_Boundaries.SIZES):
                protocol.transport.write(bytes([65 + i]) * size)
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(sum(_Boundaries.SIZES)), "all data")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("empty-write", "write(b'') then write(b'x'): what the peer receives")
class _EmptyWrite:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"")
            ctx.call("write", protocol.transport.write, b"x")
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(1), "x")
            await ctx.sleep(0.2)
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("write-non-bytes", "write('text') is refused")
class _WriteText:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("write(str)", protocol.transport.write, "text")
            ctx.call("write", protocol.transport.write, b"bytes")
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(5), "bytes")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("bulk-both-ways", "4 MiB each way in 64 KiB writes, at once")
class _Bulk:
    TOTAL = 4 << 20
    CHUNK = 1 << 16

    @staticmethod
    def send(protocol: Any) -> None:
        chunk = b"\x5a" * _Bulk.CHUNK
        for _ in range(_Bulk.TOTAL // _Bulk.CHUNK):
            protocol.transport.write(chunk)

    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, summarize=True)
        if protocol is not None:
            _Bulk.send(protocol)
            await ctx.wait(protocol.when_received(_Bulk.TOTAL), "bulk", timeout=30)
            await ctx.barrier("received")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx, summarize=True)
        if protocol is not None:
            _Bulk.send(protocol)
            await ctx.wait(protocol.when_received(_Bulk.TOTAL), "bulk", timeout=30)
            await ctx.barrier("received")
            await lost(ctx, protocol)


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
# closing


@scenario("close-by-opener", "a loseConnection(): both get connectionLost (reason types)")
class _CloseByOpener:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("write", protocol.transport.write, b"bye")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            ctx.trace.add("disconnecting", getattr(protocol.transport, "disconnecting", None))
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)


@scenario("close-by-accepter", "b loseConnection() on the subchannel a opened")
class _CloseByAccepter:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


@scenario("close-twice", "loseConnection() twice before the peer answers, and once after")
class _CloseTwice:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("loseConnection", protocol.transport.loseConnection)
            ctx.call("loseConnection again", protocol.transport.loseConnection)
            await lost(ctx, protocol)
            ctx.call("loseConnection after close", protocol.transport.loseConnection)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)
            ctx.call("loseConnection after close", protocol.transport.loseConnection)


@scenario("write-after-close", "write() after loseConnection(), and after connectionLost")
class _WriteAfterClose:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is not None:
            ctx.call("loseConnection", protocol.transport.loseConnection)
            ctx.call("write while closing", protocol.transport.write, b"late")
            await lost(ctx, protocol)
            ctx.call("write after close", protocol.transport.write, b"later")

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)
            ctx.call("write after close", protocol.transport.write, b"later")


@scenario("half-close", "half-closeable protocols: a closes its write side first, then b")
class _HalfClose:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, half_close=True)
        if protocol is None:
            return
        ctx.call("write", protocol.transport.write, b"request")
        ctx.call("loseWriteConnection", protocol.transport.loseWriteConnection)
        ctx.call("write after loseWriteConnection", protocol.transport.write, b"x")
        await ctx.wait(protocol.read_lost, "readConnectionLost")
        await ctx.pending("connectionLost", protocol.lost, 0.5)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx, half_close=True)
        if protocol is None:
            return
        await ctx.wait(protocol.read_lost, "readConnectionLost")
        ctx.call("write", protocol.transport.write, b"response")
        ctx.call("loseWriteConnection", protocol.transport.loseWriteConnection)
        await ctx.pending("connectionLost", protocol.lost, 0.5)


@scenario("half-close-misuse", "loseConnection on a half-closeable protocol, and vice versa")
class _HalfCloseMisuse:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx, half_close=True)
        if protocol is None:
            return
        await ctx.barrier("b tried")
        ctx.call("loseConnection", protocol.transport.loseConnection)
        ctx.call("loseWriteConnection", protocol.transport.loseWriteConnection)
        ctx.call("loseWriteConnection again", protocol.transport.loseWriteConnection)
        await ctx.wait(protocol.read_lost, "readConnectionLost")
        ctx.call("loseConnection after both", protocol.transport.loseConnection)
        ctx.call("loseWriteConnection after both", protocol.transport.loseWriteConnection)
        await ctx.pending("connectionLost", protocol.lost, 0.5)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is None:
            return
        ctx.call("loseWriteConnection", protocol.transport.loseWriteConnection)
        await ctx.barrier("b tried")
        await lost(ctx, protocol)


# ---------------------------------------------------------------------------------------------
# producers and flow control


@scenario(
    "push-producer",
    "a registers a full IPushProducer and writes; b closes; what is called on the producer",
)
class _PushProducer:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        producer = PushProducer(ctx.trace, "push")
        ctx.call("registerProducer", protocol.transport.registerProducer, producer, True)
        for i in range(3):
            protocol.transport.write(f"chunk-{i}".encode())
        await lost(ctx, protocol)
        await ctx.sleep(0.2)
        ctx.call("unregisterProducer after close", protocol.transport.unregisterProducer)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await ctx.wait(protocol.when_received(21), "chunks")
            ctx.call("loseConnection", protocol.transport.loseConnection)
            await lost(ctx, protocol)


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


@scenario("pull-producer", "an IPullProducer writes five chunks, unregisters and closes")
class _PullProducer:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        chunks = [f"pull-{i};".encode() for i in range(5)]
        producer = PullProducer(
            ctx.trace, "pull", protocol.transport, chunks, then=protocol.transport.loseConnection
        )
        ctx.call("registerProducer", protocol.transport.registerProducer, producer, False)
        await ctx.wait(producer.done, "all chunks produced")
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)


@scenario("register-producer-twice", "a second registerProducer() raises; unregister without one")
class _RegisterTwice:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        t = protocol.transport
        ctx.call("registerProducer", t.registerProducer, PushProducer(ctx.trace, "one"), True)
        ctx.call("registerProducer again", t.registerProducer, PushProducer(ctx.trace, "2"), True)
        ctx.call("unregisterProducer", t.unregisterProducer)
        ctx.call("unregisterProducer again", t.unregisterProducer)
        ctx.call("loseConnection", t.loseConnection)
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)


@scenario("register-producer-after-close", "registerProducer() on a closed subchannel")
class _RegisterAfterClose:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await lost(ctx, protocol)
        producer = PushProducer(ctx.trace, "late")
        ctx.call("registerProducer", protocol.transport.registerProducer, producer, True)
        await ctx.sleep(0.3)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is not None:
            await lost(ctx, protocol)


@scenario("pause-reading", "b pauses its subchannel's reading, a writes, b resumes")
class _PauseReading:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        await ctx.barrier("paused")
        for i in range(3):
            protocol.transport.write(f"msg-{i}".encode())
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is None:
            return
        ctx.call("pauseProducing", protocol.transport.pauseProducing)
        await ctx.barrier("paused")
        await ctx.sleep(0.5)
        ctx.trace.add("received while paused", len(protocol.received))
        ctx.call("resumeProducing", protocol.transport.resumeProducing)
        await ctx.wait(protocol.when_received(15), "all messages")
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await lost(ctx, protocol)


@scenario("stop-producing", "b calls stopProducing() on its subchannel transport, a writes on")
class _StopProducing:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        protocol = await opened(ctx)
        if protocol is None:
            return
        await ctx.barrier("stopped")
        await ctx.settle(protocol.lost, 1.0)  # b's CLOSE, if it sent one, travels the link
        ctx.call("write", protocol.transport.write, b"after")
        await ctx.barrier("written")
        await ctx.sleep(0.3)
        ctx.call("loseConnection", protocol.transport.loseConnection)
        await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        protocol = await accepted(ctx)
        if protocol is None:
            return
        ctx.call("stopProducing", protocol.transport.stopProducing)
        await ctx.barrier("stopped")
        await ctx.barrier("written")
        await ctx.pending("connectionLost", protocol.lost, 1.0)


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
# applications calling back into the transport from inside its callbacks


def _write(data: bytes) -> Callable[[Any], object]:
    return lambda p: p.transport.write(data)


@scenario(
    "reentrant-calls",
    "protocols write and close from inside connectionMade/dataReceived/connectionLost",
)
class _Reentrant:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        reactions = {"connectionMade": _write(b"hello")}
        protocol = await opened(ctx, reactions=reactions)
        if protocol is not None:
            await lost(ctx, protocol)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        def answer_and_close(p: Any) -> None:
            p.transport.write(b"world")
            p.transport.loseConnection()
            p.transport.write(b"too late")

        reactions = {
            "dataReceived": answer_and_close,
            "connectionLost": lambda p: p.transport.loseConnection(),
        }
        protocol = await accepted(ctx, reactions=reactions)
        if protocol is not None:
            await lost(ctx, protocol)


@scenario(
    "reentrant-half-close",
    "half-closeable protocols that answer and half-close from inside readConnectionLost",
)
class _ReentrantHalfClose:
    @staticmethod
    async def a(ctx: Ctx) -> None:
        def request(p: Any) -> None:
            p.transport.write(b"request")
            p.transport.loseWriteConnection()

        reactions = {"connectionMade": request}
        protocol = await opened(ctx, half_close=True, reactions=reactions)
        if protocol is not None:
            await ctx.wait(protocol.read_lost, "readConnectionLost")
            await ctx.pending("connectionLost", protocol.lost, 0.5)

    @staticmethod
    async def b(ctx: Ctx) -> None:
        def respond(p: Any) -> None:
            p.transport.write(b"response")
            p.transport.loseWriteConnection()

        reactions = {"readConnectionLost": respond}
        protocol = await accepted(ctx, half_close=True, reactions=reactions)
        if protocol is not None:
            await ctx.wait(protocol.write_lost, "writeConnectionLost")
            await ctx.pending("connectionLost", protocol.lost, 0.5)


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
