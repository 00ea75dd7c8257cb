"""Tests for txdilation.subchannels.app_endpoints: the endpoints and the listening port, over a
fake SubchannelSource (tests/subchannels/test_multiplexer.py runs them over the real one)."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.interfaces import (
    IListeningPort,
    IProtocolFactory,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txdilation.subchannels.app_endpoints import (
    SubchannelConnectorEndpoint,
    SubchannelListenerEndpoint,
    SubchannelListeningPort,
)
from txdilation.wire.dilation_errors import WormholeClosedError


class Source:
    """A SubchannelSource that dilates when told and records what the endpoints ask."""

    host_address: Any = object()

    def __init__(self) -> None:
        self.dilation: Deferred[None] = Deferred()
        self.opened: list[tuple[str, IProtocolFactory]] = []
        self.unlistened: list[SubchannelListeningPort] = []

    def when_dilated(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.dilation.addBoth(lambda r: d.callback(r) if not d.called else None)
        return d

    def open_subchannel(self, name: str, factory: IProtocolFactory) -> Protocol:
        self.opened.append((name, factory))
        return Protocol()

    def listen_subchannel(self, name: str, factory: IProtocolFactory) -> SubchannelListeningPort:
        return SubchannelListeningPort(self, name, factory)

    def unlisten(self, port: SubchannelListeningPort) -> None:
        self.unlistened.append(port)


class CountingFactory(Factory):
    started = stopped = 0

    def doStart(self) -> None:
        self.started += 1

    def doStop(self) -> None:
        self.stopped += 1


class EndpointTests(SynchronousTestCase):
    def test_connect_waits_for_dilation(self) -> None:
        """connect() opens the subchannel only once dilated, and fires with its protocol."""
        source = Source()
        endpoint = SubchannelConnectorEndpoint(source, "chat")
        verifyObject(IStreamClientEndpoint, endpoint)
        factory = Factory.forProtocol(Protocol)
        d = endpoint.connect(factory)
        self.assertEqual(source.opened, [])
        source.dilation.callback(None)
        self.assertIsInstance(self.successResultOf(d), Protocol)
        self.assertEqual(source.opened, [("chat", factory)])

    def test_connect_fails_with_the_dilation(self) -> None:
        """A failed dilation (or a closed wormhole) is connect()'s failure; nothing opens."""
        source = Source()
        source.when_dilated = lambda: fail(WormholeClosedError("closed"))  # type: ignore[method-assign]
        d = SubchannelConnectorEndpoint(source, "chat").connect(Factory())
        self.failureResultOf(d, WormholeClosedError)
        self.assertEqual(source.opened, [])

    def test_connect_can_be_cancelled_while_waiting(self) -> None:
        """Cancelling a waiting connect() opens nothing, even once dilated."""
        source = Source()
        d = SubchannelConnectorEndpoint(source, "chat").connect(Factory())
        d.cancel()
        self.failureResultOf(d, CancelledError)
        source.dilation.callback(None)
        self.assertEqual(source.opened, [])

    def test_names(self) -> None:
        """A connector endpoint needs a non-empty str name."""
        for bad in ("", b"chat", None):
            self.assertRaises(ValueError, SubchannelConnectorEndpoint, Source(), bad)

    def test_listen_and_stop_listening(self) -> None:
        """listen() gives a port once dilated; stopListening() unregisters it and stops the
        factory once, however often it is called; getHost() is the wormhole's address."""
        source = Source()
        endpoint = SubchannelListenerEndpoint(source, "chat")
        verifyObject(IStreamServerEndpoint, endpoint)
        factory = CountingFactory()
        d = endpoint.listen(factory)
        self.assertNoResult(d)
        source.dilation.callback(None)
        port = self.successResultOf(d)
        verifyObject(IListeningPort, port)
        self.assertIs(port.getHost(), source.host_address)
        port.stopListening()
        port.stopListening()
        self.assertEqual(source.unlistened, [port])
        self.assertEqual(factory.stopped, 1)

    def test_stock_port_does_not_unlisten(self) -> None:
        """With unlisten=False (stock), stopListening() does nothing."""
        source = Source()
        factory = CountingFactory()
        port = SubchannelListeningPort(source, "chat", factory, unlisten=False)
        port.stopListening()
        self.assertEqual((source.unlistened, factory.stopped), ([], 0))
