"""L1: the wormhole's port mapping: whether it has a mapper, and what it says of the mapping
(telemetry, the status, which link it carried).

:func:`port_mapper_for` says whether the wormhole maps its listener's port. A
:class:`MappingReporter` observes the :class:`~txdilation.portmap.mapper.PortMapper`: each
change is one ``port_mapping`` telemetry record and one log line, and ``changed`` is called so
the status is reported again. :meth:`MappingReporter.carried` says whether a selected link came
in through the mapping (accepted by our listener from a public IPv4 address while a mapping is
held: behind the gateway's NAT only a port forward lets that in).

Invariants: ``current`` is the mapping held (None once it is lost, forgotten or deleted);
telemetry never carries addresses or ports.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorUDP

from txdilation.portmap.mapper import PortMapper
from txdilation.portmap.mapping import PortMapping, is_public
from txdilation.settings import Settings
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import IDilationReactor

__all__ = ["MappingReporter", "free_port", "port_mapper_for"]

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


def free_port() -> int:
    """A TCP port free now on every address (0 if none could be had: any port then)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])
    except OSError:
        return 0


def port_mapper_for(
    reactor: IDilationReactor,
    settings: Settings,
    no_listen: bool,
    tor: Any,
    reporter: MappingReporter,
) -> PortMapper | None:
    """The wormhole's port mapper, unless mapping is off, there is no listener to map (no
    listening, Tor), the listener is not on every address (a listen interface: the gateway
    may not reach it), a forward is configured by hand (a hint port), or the reactor has no
    UDP."""
    network = settings.network
    if not network.port_mapping or no_listen or tor is not None:
        return None
    if network.listen_interface or network.hint_port:
        return None
    if not IReactorUDP.providedBy(reactor):
        return None
    return PortMapper(reactor, observer=reporter)
