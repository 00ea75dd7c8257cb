"""L3: one generation's listener and the direct hints that advertise it.

An :class:`Advertiser`, owned by the :class:`~txdilation.selection.connector.Connector`,
listens (dual-stack; ``SO_REUSEPORT`` with ``punch`` on), discovers this host's addresses off
the reactor thread, and hands each new direct hint to ``publish``: at once, and again when
:meth:`Advertiser.network_changed` finds new addresses; it also publishes the punched hint
(:mod:`txdilation.selection.punch`) and, with a
:class:`~txdilation.portmap.mapper.PortMapper`, the mapped address. Accepted connections are
admitted within ``max_unauthenticated`` (:mod:`txdilation.selection.listener`).

Invariants: address discovery never blocks the reactor; nothing is published once
:meth:`Advertiser.close` ran or for a listener that is not ours any more; a direct hint is
published at most once per generation (:attr:`Advertiser.published` for a rekindle); a listener
that comes up after the race ended is handed to ``late``. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.protocol import ServerFactory
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole import ipaddrs

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.portmap.mapper import PortMapper
from txdilation.portmap.mapping import PortMapping
from txdilation.selection import punch
from txdilation.selection.addresses import bound_addresses, ipv6_addresses
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.hints import DirectTCPV1Hint, Hint, describe_inbound
from txdilation.selection.listener import LISTEN_BACKLOG, OldestFirstCap, listen
from txdilation.wire.contracts import IDilationReactor

if TYPE_CHECKING:
    from txdilation.selection.connector_settings import ConnectorSettings

__all__ = ["LISTEN_RETRIES", "LISTEN_RETRY_DELAY", "Advertiser"]

LISTEN_RETRIES = 50
LISTEN_RETRY_DELAY = 0.1
MAPPED_PORT_RETRIES = 3

#: the connector's logger: the split into modules changes no log line
_log = Logger()


class Advertiser:
    """One generation's listener and its direct hints; see the module docstring."""

    def __init__(
        self,
        settings: ConnectorSettings,
        reactor: IDilationReactor,
        *,
        attempt_log: AttemptLog | None,
        accept: Callable[[str, Attempt | None], DilatedConnectionProtocol],
        publish: Callable[[list[Hint]], None],
        punched: Callable[[], None],
        late: Callable[[], None],
        mapper: PortMapper | None = None,
        mapped: Callable[[], None] = lambda: None,
    ) -> None:
        """
        :param attempt_log: where each accepted connection is one telemetry attempt, if given.
        :param accept: the L2 protocol for a connection the listener accepted (its description
            and telemetry attempt).
        :param publish: fresh direct hints to send to the peer.
        :param punched: punched hints were found for publication.
        :param late: a listener came up after :meth:`close`: close everything again.
        :param mapper: asked to map the listening port (None: no port mapping).
        :param mapped: a mapped hint went out.
        """
        self._settings = settings
        self._reactor = reactor
        self._attempt_log = attempt_log
        self._accept = accept
        self._publish = publish
        self._punched = punched
        self._late = late
        self._mapper = mapper
        self._on_mapped = mapped
        self._closed = False  # the race is over: no more listeners
        self.listeners: list[IListeningPort] = []
        #: direct hints sent to the peer this generation, in the order sent (an ordered set)
        self._published: dict[Hint, None] = {}
        self.listen_retry: IDelayedCall | None = None
        #: hole punching: listen with SO_REUSEPORT and dial direct hints from that port
        self.punch = (
            settings.network.punch and settings.tor is None and punch.sockets_reusable(reactor)
        )
        self._dual_stack = settings.tor is None and punch.sockets_reusable(reactor)
        self.port: int | None = None  # the listener's port, once it listens
        #: inbound connections not through their handshake yet (a flood cannot hold more)
        self.unauthenticated: OldestFirstCap[DilatedConnectionProtocol] = OldestFirstCap(
            settings.max_unauthenticated, lambda c: c.prologue_received
        )

    @property
    def published(self) -> list[Hint]:
        """The direct hints published this generation, in the order they were."""
        return list(self._published)

    def punch_port(self) -> int | None:
        """The port direct dials start from: the listening port while punching, else None."""
        return self.port if self.punch else None

    def start(self, attempt: int = 0, *, mapped_port: bool = True) -> None:
        """Listen (on the port the mapper keeps mapped, if any and unless a port is set);
        publish our direct hints once listening."""
        self.listen_retry = None
        network = self._settings.network
        interface = network.listen_interface or ""
        port = network.listen_port
        mapped = self._mapper.port if self._mapper is not None and self._maps() else None
        from_mapper = not port and mapped_port and mapped is not None
        if from_mapper:
            port = mapped or 0
        factory = _InboundFactory(self)
        if self._dual_stack:
            d: Deferred[Any] = maybeDeferred(
                punch.listen,
                self._reactor,
                factory,
                port,
                interface,
                reuse_port=self.punch,
                backlog=LISTEN_BACKLOG,
            )
        else:
            d = listen(self._reactor, port, interface, factory)
        d.addCallback(self._listening)

        def failed(f: Failure) -> None:
            # A fixed port may still be held by the previous generation's listener, whose
            # socket closes a reactor turn after stopListening(): try again shortly. The
            # mapped port is given up sooner (another program may hold it): then any port.
            if f.check(CannotListenError) and not self._closed:  # type: ignore[no-untyped-call]
                if network.listen_port and attempt < LISTEN_RETRIES:
                    retry = lambda: self.start(attempt + 1)  # noqa: E731
                elif from_mapper:
                    again = attempt < MAPPED_PORT_RETRIES
                    retry = lambda: self.start(attempt + 1 if again else 0, mapped_port=again)  # noqa: E731
                else:
                    retry = None
                if retry is not None:
                    self.listen_retry = self._reactor.callLater(LISTEN_RETRY_DELAY, retry)
                    return
            _log.failure("dilation listener failed", f)

        d.addErrback(failed)

    def _maps(self) -> bool:
        """Whether the listener is worth mapping: it takes every address (the gateway reaches
        it), and no hint port says a forward is configured already."""
        network = self._settings.network
        return not network.listen_interface and not network.hint_port

    def _listening(self, port: IListeningPort) -> Deferred[Any]:
        self.listeners.append(port)
        if self._closed:  # selected or stopped while the listener was starting
            self._late()
            return succeed(None)
        self.port = port.getHost().port  # type: ignore[attr-defined]
        d = self._publish_direct_hints(port)
        if self._mapper is not None and self._maps():
            self._mapper.map(self.port, lambda mapping: self._mapped(port, mapping))
        return d

    def _mapped(self, port: IListeningPort, mapping: PortMapping) -> None:
        """The gateway maps ``mapping.external_port`` to our listener: publish it once (unless
        a hint to the same address and port was published: the punched one, say)."""
        if self._closed or port not in self.listeners:
            return
        where = (mapping.external_address, mapping.external_port)
        self._on_mapped()
        if where in self._places():
            return
        hint = DirectTCPV1Hint(*where, 0.0)
        self._published[hint] = None
        self._publish([hint])

    def _places(self) -> set[tuple[str, int]]:
        """The addresses and ports of the direct hints published (whatever their priority)."""
        return {(h.hostname, h.port) for h in self._published if isinstance(h, DirectTCPV1Hint)}

    def network_changed(self) -> None:
        """The host's addresses or routes changed: publish direct hints for addresses found now
        and not published yet (the listener takes every address, so they work at once).
        Nothing before the listener is up, nor after :meth:`close`."""
        if self._closed or not self.listeners or self.port is None:
            return
        self._publish_direct_hints(self.listeners[-1])

    def _publish_direct_hints(self, port: IListeningPort) -> Deferred[Any]:
        """Discover our addresses and publish each direct (and punched) hint once."""
        assert self.port is not None
        portnum = self._settings.network.hint_port or self.port
        d = self._find_addresses()

        def publish(addresses: Sequence[str]) -> None:
            if port not in self.listeners:
                return  # stopped meanwhile
            hints: list[Hint] = [DirectTCPV1Hint(a, portnum, 0.0) for a in addresses]
            if self.punch:
                public = self._settings.public_addresses
                punched = punch.punched_hints(public, portnum, addresses)
                if punched:
                    self._punched()
                hints.extend(punched)
            places = self._places()  # (a mapped hint may have gone out to the same place)
            fresh = [
                h
                for h in hints
                if h not in self._published
                and not (isinstance(h, DirectTCPV1Hint) and (h.hostname, h.port) in places)
            ]
            self._published.update(dict.fromkeys(fresh))
            if fresh:
                self._publish(fresh)

        d.addCallback(publish)
        d.addErrback(lambda f: _log.failure("address discovery failed", f))
        return d

    def _find_addresses(self) -> Deferred[Sequence[str]]:
        configured = self._settings.network.hint_addresses
        if configured is not None:
            return succeed(configured)
        bound = bound_addresses(self._settings.network.listen_interface)
        if bound is not None:  # the listener takes no other address: advertise only that one
            return succeed(bound)
        pool = getattr(self._reactor, "getThreadPool", None)
        # IPv6 addresses only where the listener takes IPv6 (no interface, or an IPv6 one)
        ipv6 = self._dual_stack and ":" in (self._settings.network.listen_interface or ":")
        find = _find_addresses_with_ipv6 if ipv6 else ipaddrs.find_addresses
        if pool is None:
            return succeed(_usable_addresses(find()))
        d: Deferred[list[str]] = deferToThreadPool(self._reactor, pool(), find)
        return d.addCallback(_usable_addresses)

    def accepted(self, addr: object) -> DilatedConnectionProtocol:
        """The L2 protocol for a connection our listener accepted from ``addr`` (one inbound
        telemetry attempt), held among the unauthenticated ones."""
        log = self._attempt_log
        attempt = log.started("direct-tcp-v1", "inbound") if log is not None else None
        connection = self._accept(describe_inbound(addr), attempt)
        self._admit(connection)
        return connection

    def _admit(self, connection: DilatedConnectionProtocol) -> None:
        """Hold a connection our listener accepted; close the oldest beyond the cap."""
        cap = self.unauthenticated
        first = cap.evicted == 0
        for old in cap.admit(connection):
            if first:
                first = False
                _log.info(
                    "listener holds {n} unauthenticated connections: closing the oldest",
                    n=cap.limit,
                )
            old.abort()

    def stop_listening(self) -> None:
        """The race is over: stop every listener, forget unauthenticated connections (the
        Connector closes them) and listen no more."""
        self._closed = True
        for port in self.listeners:
            port.stopListening()
        self.listeners.clear()
        self.unauthenticated.clear()

    def cancel_retry(self) -> None:
        """The race is over: a listener being retried is not any more."""
        if self.listen_retry is not None and self.listen_retry.active():
            self.listen_retry.cancel()
        self.listen_retry = None


def _find_addresses_with_ipv6() -> list[str]:
    """Stock's IPv4 discovery and our IPv6 one (blocking: run in a thread)."""
    return [*ipaddrs.find_addresses(), *ipv6_addresses()]


def _usable_addresses(addresses: Iterable[str]) -> list[str]:
    """Stock's rule: advertise non-loopback addresses, or loopback only if it is all we have."""
    found = list(addresses)
    non_loopback = [a for a in found if a not in ("127.0.0.1", "::1")]
    return non_loopback or found


class _InboundFactory(ServerFactory):
    noisy = False  # one listener per generation: no "Starting/Stopping factory" log lines

    def __init__(self, advertiser: Advertiser) -> None:
        self.advertiser = advertiser

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        p = self.advertiser.accepted(addr)
        p.factory = self
        return p
