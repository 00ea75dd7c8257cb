"""L1: what ``w.dilate()`` returns, the application's handle on the dilated link.

A :class:`DilatedWormhole` only forwards to the wormhole's Manager and L5 multiplexer; it holds
nothing of its own. Stock's has the same three methods (applications import it from
``wormhole._dilation.manager``); txdilation's own callers (the session, the endpoints) read what
they need of the link through the typed additions below, never through the Manager's privates.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IStreamClientEndpoint, IStreamServerEndpoint

from txdilation.subchannels.multiplexer import Multiplexer

__all__ = ["DilatedWormhole"]


class _Manager(Protocol):
    _mux: Multiplexer

    @property
    def last_rtt(self) -> float | None: ...

    @property
    def connection(self) -> Any: ...

    @property
    def led_by_stock(self) -> bool: ...

    @property
    def port_mapping(self) -> Any: ...

    def abort_link(self) -> None: ...


class DilatedWormhole:
    """The application's handle on one dilated wormhole."""

    def __init__(self, manager: _Manager) -> None:
        self._manager = manager

    @property
    def last_rtt(self) -> float | None:
        """txdilation's addition: the last round-trip time our PINGs measured, in seconds
        (None before the first PONG)."""
        return self._manager.last_rtt

    @property
    def port_mapping(self) -> Any:
        """txdilation's addition: the port mapping of our listener the home router granted
        (a ``txdilation.portmap.mapping.PortMapping``: protocol, external port, lease), or
        None (``docs/connectivity.md``, "Port mapping")."""
        return self._manager.port_mapping

    @property
    def connected(self) -> bool:
        """txdilation's addition: whether a connection is selected now."""
        return self._manager.connection is not None

    @property
    def waiting_on_stock_leader(self) -> bool:
        """txdilation's addition: we are the Follower of a stock Leader, which never retries
        within a generation: while connecting, we send it our hints again
        (``txdilation.selection.rekindle``), and it must act."""
        return self._manager.led_by_stock

    def abort_connection(self) -> None:
        """txdilation's addition, a test and debugging aid: abort the selected connection at
        once, if there is one, and the standby path beside it, as a network cut would
        (Dilation then reconnects, as after any loss)."""
        self._manager.abort_link()

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
