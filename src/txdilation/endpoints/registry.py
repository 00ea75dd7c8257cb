"""Which ``dilation:`` endpoints share a wormhole: one per code, per reactor.

Layer: application edge. :func:`acquire` returns the one
:class:`~txdilation.endpoints.shared.SharedWormhole` per (reactor, mailbox, appid, code or code
file), creating it on first use (a :class:`~txdilation.endpoints.shared_pairing.SharedPairing` when
a pairing file is named).

Invariants: its dilation settings are those of the first endpoint (a later one that disagrees is
a ``ValueError``); a wormhole that ended (closed, failed, the peer left) is forgotten (it calls
back :func:`_forget`), so a later ``acquire`` makes a new one; every wormhole of a reactor is
closed when that reactor shuts down, each close bounded by
:data:`~txdilation.endpoints.shared.CLOSE_TIMEOUT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, DeferredList

from txdilation.endpoints.endpoint_settings import EndpointSettings
from txdilation.endpoints.shared import SharedWormhole
from txdilation.endpoints.shared_pairing import SharedPairing

__all__ = ["acquire"]


@dataclass
class _Registry:
    """The shared wormholes of one reactor."""

    wormholes: dict[tuple[str, str, str | None, str | None], SharedWormhole] = field(
        default_factory=dict
    )


_registries: dict[int, _Registry] = {}


def acquire(reactor: Any, settings: EndpointSettings) -> SharedWormhole:
    """The wormhole ``settings`` name, created on first use.

    :raises ValueError: when an endpoint sharing it has other dilation settings.
    """
    registry = _registries.get(id(reactor))
    if registry is None:
        registry = _registries[id(reactor)] = _Registry()
        reactor.addSystemEventTrigger("before", "shutdown", _close_all, reactor)
    shared = registry.wormholes.get(settings.wormhole_key)
    if shared is None:
        kind = SharedWormhole if settings.pairing is None else SharedPairing
        shared = kind(reactor, settings, _forget)
        if not shared.ended:  # (a paired wormhole can fail at once: its file in use)
            registry.wormholes[settings.wormhole_key] = shared
    elif shared.settings.dilation != settings.dilation:
        raise ValueError(
            "dilation: endpoints sharing a wormhole (same mailbox, appid and code or code-file) "
            "must agree on relay, no-listen, ping-interval, status and exit-on-failure"
        )
    return shared


def _forget(shared: SharedWormhole) -> None:
    registry = _registries.get(id(shared.reactor))
    if registry is not None and registry.wormholes.get(shared.key) is shared:
        del registry.wormholes[shared.key]


def _close_all(reactor: Any) -> Deferred[Any]:
    """Reactor shutdown: close every wormhole of ``reactor`` (the peers hear we left)."""
    registry = _registries.pop(id(reactor), None)
    wormholes = list(registry.wormholes.values()) if registry is not None else []
    return DeferredList([w.close() for w in wormholes], consumeErrors=True)
