"""``wormhole._dilation.connector``: ``Connector`` (stock's ``wormhole.create()`` asks it for
``get_connection_abilities()``), the module attribute ``ipaddrs`` tests patch, and
``describe_inbound``."""

from __future__ import annotations

from txdilation.selection.connector import Connector, ConnectorSettings, IConnectorOwner, ipaddrs
from txdilation.selection.hints import describe_inbound

__all__ = ["Connector", "ConnectorSettings", "IConnectorOwner", "describe_inbound", "ipaddrs"]
