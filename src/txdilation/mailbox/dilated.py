"""L1: what ``w.dilate()`` returns, the application's handle on the dilated link.

A :class:`DilatedWormhole` only forwards to the wormhole's L5 multiplexer; it holds nothing of
its own (stock's has the same three methods and applications import it from
``wormhole._dilation.manager``).
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IStreamClientEndpoint, IStreamServerEndpoint

from txdilation.subchannels.multiplexer import Multiplexer

__all__ = ["DilatedWormhole"]


class _HasMultiplexer(Protocol):
    _mux: Multiplexer


class DilatedWormhole:
    """The application's handle on one dilated wormhole."""

    def __init__(self, manager: _HasMultiplexer) -> None:
        self._manager = manager

    def when_dilated(self) -> Deferred[None]:
        """Fires (on a later turn) once the first connection is selected; errbacks with
        OldPeerCannotDilateError (and, with TWISTED semantics, WormholeClosedError if the
        wormhole closes first)."""
        return self._manager._mux.when_dilated()

    def listener_for(self, subprotocol_name: str) -> IStreamServerEndpoint:
        """An endpoint whose ``listen(factory)`` accepts subchannels opened by the peer."""
        endpoint: IStreamServerEndpoint = self._manager._mux.listener_for(subprotocol_name)
        return endpoint

    def connector_for(self, subprotocol_name: str) -> IStreamClientEndpoint:
        """An endpoint whose ``connect(factory)`` opens a subchannel to the peer.

        :raises ValueError: for an empty name.
        """
        endpoint: IStreamClientEndpoint = self._manager._mux.connector_for(subprotocol_name)
        return endpoint
