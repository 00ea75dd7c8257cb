"""L5: the endpoints an application opens and accepts subchannels with.

``connector_for(name)`` (``IStreamClientEndpoint``), ``listener_for(name)``
(``IStreamServerEndpoint``) and the ``IListeningPort`` a ``listen()`` gives; each waits for
dilation through the :class:`~txdilation.subchannels.multiplexer.Multiplexer` that made it,
which they see as a :class:`SubchannelSource` (so this module does not import it).

Invariants: a connector endpoint's name is a non-empty str; ``connect()`` and ``listen()``
answer on a later turn (the Multiplexer's ``when_dilated``) and can be cancelled while they
wait; ``stopListening()`` is idempotent.
"""

from __future__ import annotations

from typing import Protocol as TypingProtocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from zope.interface import implementer


class SubchannelSource(TypingProtocol):
    """What the endpoints need from the Multiplexer that made them."""

    @property
    def host_address(self) -> IAddress:
        "``getHost()`` of every subchannel of the wormhole."

    def when_dilated(self) -> Deferred[None]:
        "Fires (on a later turn) when dilated; errbacks if dilation fails or the wormhole closes."

    def open_subchannel(self, name: str, factory: IProtocolFactory) -> IProtocol:
        "Send OPEN for a new subchannel named ``name``; its protocol, built by ``factory``."

    def listen_subchannel(self, name: str, factory: IProtocolFactory) -> SubchannelListeningPort:
        "Build a protocol with ``factory`` for each OPEN named ``name`` (held ones first)."

    def unlisten(self, port: SubchannelListeningPort) -> None:
        "``port`` stopped listening."


@implementer(IStreamClientEndpoint)
class SubchannelConnectorEndpoint:
    """``connector_for(name)``: each ``connect()`` opens a new subchannel named ``name``.

    :raises ValueError: (constructor) when ``name`` is empty.
    """

    def __init__(self, mux: SubchannelSource, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("subprotocol must be a non-empty str")
        self._mux = mux
        self.subprotocol = name

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Wait for dilation, send OPEN, connect a protocol built by ``protocolFactory``.

        The result is the protocol (no round trip: the peer never acknowledges an OPEN). Errbacks
        with ``NoProtocol`` when the factory returns None, with the dilation failure or
        ``WormholeClosedError`` when dilation fails or the wormhole closes first; cancellable
        while waiting.
        """
        d = self._mux.when_dilated()
        return d.addCallback(lambda _: self._mux.open_subchannel(self.subprotocol, protocolFactory))


@implementer(IStreamServerEndpoint)
class SubchannelListenerEndpoint:
    """``listener_for(name)``: ``listen()`` builds a protocol for each OPEN named ``name``."""

    def __init__(self, mux: SubchannelSource, name: str) -> None:
        self._mux = mux
        self.subprotocol_name = name

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        """Wait for dilation, then register ``protocolFactory`` and take the held OPENs.

        Errbacks with ValueError when someone already listens on the name, with the dilation
        failure or ``WormholeClosedError`` when dilation fails or the wormhole closes first.
        """
        d = self._mux.when_dilated()
        return d.addCallback(
            lambda _: self._mux.listen_subchannel(self.subprotocol_name, protocolFactory)
        )


@implementer(IListeningPort)
class SubchannelListeningPort:
    """What ``listen()`` returns.

    :param unlisten: ``stopListening()`` unregisters the factory (the semantics'
        ``stop_listening_stops``); otherwise it does nothing, as stock's.
    :param stop_factory: call ``factory.doStop()`` in ``stopListening()`` (the semantics'
        ``factory_start_stop``; ``listen()`` then called ``doStart()``).
    """

    def __init__(
        self,
        mux: SubchannelSource,
        subprotocol: str,
        factory: IProtocolFactory,
        *,
        unlisten: bool = True,
        stop_factory: bool = True,
    ) -> None:
        self._mux = mux
        self.subprotocol = subprotocol
        self.factory = factory
        self._unlisten = unlisten
        self._stop_factory = stop_factory
        self._listening = True

    def startListening(self) -> None:
        """Nothing to do: ``listen()`` already registered us."""

    def stopListening(self) -> None:
        """Unregister: later OPENs for the name are held again (or nothing, as stock, without
        ``unlisten``). Idempotent."""
        if self._listening and self._unlisten:
            self._listening = False
            self._mux.unlisten(self)
            if self._stop_factory:
                self.factory.doStop()

    def getHost(self) -> IAddress:
        """The wormhole's address."""
        return self._mux.host_address


__all__ = [
    "SubchannelConnectorEndpoint",
    "SubchannelListenerEndpoint",
    "SubchannelListeningPort",
    "SubchannelSource",
]
