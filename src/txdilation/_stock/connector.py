"""``wormhole._dilation.connector``: ``Connector`` (stock's ``wormhole.create()`` asks it for
``get_connection_abilities()``) and the module attribute ``ipaddrs`` tests patch."""

from __future__ import annotations

from txdilation.selection.connector import Connector, ConnectorSettings, IConnectorOwner, ipaddrs

__all__ = ["Connector", "ConnectorSettings", "IConnectorOwner", "ipaddrs"]
