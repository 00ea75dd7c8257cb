"""Port mapping: one dilated wormhole's forward of its direct-hint listener, kept and let go.

:meth:`PortMapper.map` keeps a port mapped and tells ``on_mapped`` each new external address
and port: the default gateway (:func:`~txdilation.portmap.gateway.find_gateway`) is asked with
each protocol in turn, PCP, NAT-PMP, UPnP IGD (the first that maps wins); the mapping is renewed
half-way through its lease, deleted when released or at :meth:`stop`, forgotten (then asked for
again) when the network changes; the ``observer`` hears each change.

Invariants: everything runs in the background, each attempt bounded by the clients' timeouts;
a gateway that answered nothing is not asked again until the network changes; at most one
mapping is held, for the port last asked for; a mapping granted after its port was released,
the network changed or the mapper stopped is deleted at once, and so is one to an address that
is not public (a gateway behind another NAT), never reported; :meth:`stop` cancels an attempt
under way and fires once the held mapping's deletion is done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from typing import Protocol as TypingProtocol

from twisted.internet.defer import Deferred, DeferredList, ensureDeferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from txdilation.portmap.clients import NatPmpClient, PcpClient
from txdilation.portmap.gateway import Gateway, find_gateway
from txdilation.portmap.mapping import (
    REQUESTED_LIFETIME,
    MappingError,
    MappingProtocol,
    PortMapping,
    is_public,
    renew_at,
)
from txdilation.portmap.upnp import UpnpClient

__all__ = ["IMappingClient", "IMappingObserver", "PortMapper"]

_log = Logger()


class IMappingClient(TypingProtocol):
    """One protocol's client (:mod:`.clients`, :mod:`.upnp`)."""

    protocol: MappingProtocol

    async def map(
        self, gateway: Gateway, internal_port: int, lifetime: int, previous: PortMapping | None
    ) -> PortMapping: ...

    async def unmap(self, gateway: Gateway, mapping: PortMapping) -> None: ...


class IMappingObserver(TypingProtocol):
    """Who hears what happens to the mapping (the Manager: telemetry and status)."""

    def port_mapping_changed(self, change: str, mapping: PortMapping | None) -> None:
        """``change``: ``mapped``, ``renewed`` (``mapping`` is the new one), ``lost`` (a
        renewal failed), ``forgotten`` (the network changed), ``deleted``, or ``unavailable``
        (no protocol mapped: ``mapping`` is None)."""


class PortMapper:
    """See the module docstring."""

    def __init__(
        self,
        reactor: Any,
        *,
        observer: IMappingObserver | None = None,
        gateway: Callable[[], Gateway | None] = find_gateway,
        clients: Sequence[IMappingClient] | None = None,
        lifetime: int = REQUESTED_LIFETIME,
    ) -> None:
        """
        :param reactor: ``IReactorUDP``, ``IReactorTCP`` and ``IReactorTime``.
        :param gateway: finds the gateway to ask (None: none to ask).
        :param clients: the protocols' clients, in the order they are tried (default: PCP,
            NAT-PMP, UPnP IGD).
        :param lifetime: the lease asked for, in seconds.
        """
        self._reactor = reactor
        self._observer = observer
        self._find_gateway = gateway
        default: list[IMappingClient] = [
            PcpClient(reactor),
            NatPmpClient(reactor),
            UpnpClient(reactor),
        ]
        self._clients = list(clients) if clients is not None else default
        self._lifetime = lifetime
        self._wanted: int | None = None  # the port to keep mapped
        self._on_mapped: Callable[[PortMapping], None] | None = None
        self._epoch = 0  # bumped whenever what is wanted changes: late results are stale
        self._gateway: Gateway | None = None
        self._silent: set[str] = set()  # gateways that mapped nothing (until the network changes)
        self._pending: Deferred[Any] | None = None
        self._deletions: set[Deferred[None]] = set()
        self._renewal: IDelayedCall | None = None
        self._stopped = False
        self.current: PortMapping | None = None
        """The mapping held now, if any."""

    @property
    def port(self) -> int | None:
        """The port mapped or being mapped (a listener should take it), else None."""
        if self.current is None and self._pending is None:
            return None
        return self._wanted

    def map(self, internal_port: int, on_mapped: Callable[[PortMapping], None]) -> None:
        """Keep TCP ``internal_port`` mapped; tell ``on_mapped`` each new external address and
        port (at once if it is mapped already). A port asked for earlier is released."""
        if self._stopped or not internal_port:
            return
        if internal_port == self._wanted:
            self._on_mapped = on_mapped
            if self.current is not None:
                on_mapped(self.current)
            return
        self.release()
        self._wanted, self._on_mapped = internal_port, on_mapped
        self._start()

    def release(self, internal_port: int | None = None) -> None:
        """Stop keeping the port mapped (only if it is ``internal_port``, when given); delete
        its mapping in the background."""
        if internal_port is not None and internal_port != self._wanted:
            return
        self._epoch += 1
        self._wanted = None
        self._on_mapped = None
        self._cancel_renewal()
        held, self.current = self.current, None
        if held is not None:
            self._delete(held, "deleted")

    def network_changed(self) -> None:
        """Our addresses or routes changed: forget the mapping (it may lead nowhere now) and
        every silent gateway; map the wanted port again."""
        if self._stopped:
            return
        self._epoch += 1
        self._cancel_renewal()
        self._silent.clear()
        forgotten, self.current = self.current, None
        if forgotten is not None:
            self._report("forgotten", forgotten)
        if self._wanted is not None:
            self._start()

    def stop(self) -> Deferred[None]:
        """Release the port and map nothing more: an attempt under way is cancelled, and the
        Deferred fires once the mapping held is deleted (or its deletion timed out)."""
        self.release()
        self._stopped = True
        if self._pending is not None:
            self._pending.cancel()
        if not self._deletions:
            return succeed(None)
        waits = DeferredList(list(self._deletions), consumeErrors=True)
        return waits.addCallback(lambda _: None)

    # --- the attempts ---

    def _start(self) -> None:
        if self._pending is not None:
            return  # the attempt under way sees the new epoch and starts again
        gateway = self._find_gateway()
        if gateway is None or gateway.address in self._silent or self._wanted is None:
            return
        self._gateway = gateway
        epoch, port = self._epoch, self._wanted
        d = self._pending = ensureDeferred(self._first_mapping(gateway, port))
        d.addBoth(lambda result: self._attempted(result, gateway, epoch))

    async def _first_mapping(self, gateway: Gateway, port: int) -> PortMapping | None:
        for client in self._clients:
            try:
                return await client.map(gateway, port, self._lifetime, None)
            except MappingError as e:
                _log.debug("port mapping: {why}", why=str(e))
        return None

    def _attempted(self, result: object, gateway: Gateway, epoch: int) -> None:
        self._pending = None
        mapping = result if isinstance(result, PortMapping) else None
        if self._stopped:
            if mapping is not None:
                self._delete(mapping, None)
            return
        if not isinstance(result, PortMapping) and result is not None:
            _log.failure("port mapping failed", result)  # type: ignore[arg-type]
        if mapping is not None and not is_public(mapping.external_address):
            _log.info(
                "port mapping: {gateway} maps to {address}, behind another NAT: not used",
                gateway=gateway.address,
                address=mapping.external_address,
            )
            self._delete(mapping, None)
            mapping = None
        if epoch != self._epoch or self._stopped:
            if mapping is not None:
                self._delete(mapping, None)
            if not self._stopped:
                self._start()  # what is wanted changed meanwhile
            return
        if mapping is None:
            self._silent.add(gateway.address)
            self._report("unavailable", None)
            return
        self._hold(mapping, "mapped")

    def _hold(self, mapping: PortMapping, change: str) -> None:
        previous, self.current = self.current, mapping
        _log.info("port mapping {change}: {mapping}", change=change, mapping=mapping.describe())
        self._report(change, mapping)
        due = renew_at(mapping)
        if due != float("inf"):
            self._renewal = self._reactor.callLater(
                max(0.0, due - self._reactor.seconds()), self._renew
            )
        moved = previous is None or (previous.external_address, previous.external_port) != (
            mapping.external_address,
            mapping.external_port,
        )
        if moved and self._on_mapped is not None:
            self._on_mapped(mapping)

    def _renew(self) -> None:
        self._renewal = None
        held, gateway = self.current, self._gateway
        if held is None or gateway is None:
            return
        client = next(c for c in self._clients if c.protocol is held.protocol)
        epoch = self._epoch
        d = self._pending = ensureDeferred(
            client.map(gateway, held.internal_port, self._lifetime, held)
        )

        def renewed(result: object) -> None:
            self._pending = None
            if self._stopped and not isinstance(result, PortMapping):
                return
            if epoch != self._epoch or self._stopped:
                if isinstance(result, PortMapping):
                    self._delete(result, None)
                if not self._stopped:
                    self._start()
                return
            if isinstance(result, PortMapping):
                self._hold(result, "renewed")
                return
            self.current = None
            self._report("lost", held)
            self._start()  # from the first protocol again

        d.addBoth(renewed)

    def _delete(self, mapping: PortMapping, change: str | None) -> None:
        gateway = self._gateway
        if gateway is None:
            return
        client = next(c for c in self._clients if c.protocol is mapping.protocol)
        d = ensureDeferred(client.unmap(gateway, mapping))
        self._deletions.add(d)

        def deleted(_: object) -> None:
            self._deletions.discard(d)
            if change is not None:
                self._report(change, mapping)

        d.addBoth(deleted)

    def _cancel_renewal(self) -> None:
        if self._renewal is not None and self._renewal.active():
            self._renewal.cancel()
        self._renewal = None

    def _report(self, change: str, mapping: PortMapping | None) -> None:
        if self._observer is not None:
            try:
                self._observer.port_mapping_changed(change, mapping)
            except Exception:
                _log.failure("port mapping observer raised")
