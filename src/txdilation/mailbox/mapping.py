"""L1: what the wormhole says of its port mapping: telemetry, the status, and which link it
carried.

A :class:`MappingReporter` is the :class:`~txdilation.portmap.mapper.PortMapper`'s observer:
each change is one ``port_mapping`` telemetry record (the protocol and the lease, never an
address) and one log line, and ``changed`` is called so that the status is reported again
(the session shows the mapping). :meth:`MappingReporter.carried` says whether a selected link
came in through the mapping: a direct connection our listener accepted from a public IPv4
address while a mapping is held (behind the gateway's NAT, only a port forward lets such a
connection in; a punched connection is our own dial, never an accepted one).

Invariants: ``current`` is the mapping held (None once it is lost, forgotten or deleted);
telemetry never carries addresses or ports.
"""

from __future__ import annotations

from collections.abc import Callable

from txdilation.portmap.mapping import PortMapping, is_public
from txdilation.telemetry import Telemetry

__all__ = ["MappingReporter"]

_HELD = ("mapped", "renewed")


class MappingReporter:
    """See the module docstring."""

    def __init__(self, telemetry: Telemetry, changed: Callable[[], None]) -> None:
        self._telemetry = telemetry
        self._changed = changed
        self.current: PortMapping | None = None

    def port_mapping_changed(self, change: str, mapping: PortMapping | None) -> None:
        """(``IMappingObserver``) one record, the status again."""
        if change in _HELD:
            self.current = mapping
        elif mapping is None or mapping == self.current or change == "forgotten":
            self.current = None
        lifetime = mapping.lifetime if mapping is not None else None
        protocol = mapping.protocol.value if mapping is not None else None
        self._telemetry.port_mapping(change, protocol, lifetime)
        self._changed()

    def carried(self, description: str) -> bool:
        """Whether the connection described so (``<-tcp:HOST:PORT``: accepted) came in through
        the mapping held (see the module docstring)."""
        if self.current is None or not description.startswith("<-tcp:"):
            return False
        host = description[len("<-tcp:") :].rsplit(":", 1)[0]
        return ":" not in host and is_public(host)
