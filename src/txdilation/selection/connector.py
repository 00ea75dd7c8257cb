"""L3: one generation's race of connection hints, ending in the selection of one connection.

A :class:`Connector` listens (unless told not to, or over Tor), publishes direct and relay
hints, connects to the peer's hints, and collects candidates: L2 connections whose KCM
exchange reached the point where they may be selected.

Selection policy (module-level Automat machine ``connector_machine``):
- the Follower takes the first connection on which the Leader's KCM arrived (the wire rule);
- the Leader takes a direct candidate at once; a relay candidate is held for
  ``direct_grace`` seconds (``punch.PUNCH_GRACE`` while a dial to a punched hint of the
  peer's is under way) in case a direct one completes too (direct beats relay when both
  become viable at about the same time), then taken; when no direct connection can come any
  more (no listener, no direct attempt or candidate left) it is taken at once.

Direct TCP reaches through NATs and over IPv6 (``selection.punch``): on a real reactor the
listener is dual-stack and, unless ``NetworkSettings.punch`` is off, bound with
``SO_REUSEPORT``; every direct dial to an IP literal then starts from the listening port, our
public address from the mailbox's welcome (``ConnectorSettings.public_addresses``) is
advertised with that port as a low-priority direct hint, and a dial from that port to a punched
hint of the peer's that fails early is retried for a few seconds, so that both peers' SYNs
cross (a TCP simultaneous open).

Invariants: once a connection is selected or the connector stops, every other connection,
listener and pending attempt is closed or cancelled, and any connection that completes later
is aborted; address discovery never blocks the reactor; a Tor connector never listens; the
listener has a large backlog and holds at most ``max_unauthenticated`` connections before
their handshake, closing the oldest beyond that (``selection.listener``: a flood neither
refuses the real peer nor grows our memory).

Relay hints may name several relays, each over TCP or WebSocket: every relay endpoint is dialed
at once when relays are due, and the first to finish its handshake wins
(:mod:`txdilation.selection.relays` states the policy; WebSocket dials go through
:class:`txdilation.link.websocket.WebSocketClientEndpoint`). The selected relay endpoint, if
any, is reported to the owner with the selection.

Given the session's :class:`~txdilation.telemetry.Telemetry`, every outbound dial (each direct,
Tor or relay hint tried) and every connection our listener accepts is one telemetry attempt,
followed by an :class:`~txdilation.selection.attempts.AttemptLog` (outcomes and durations are
defined there).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from typing import Protocol as TypingProtocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
)
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IStreamClientEndpoint
from twisted.internet.protocol import ClientFactory, ServerFactory
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole import ipaddrs
from wormhole._interfaces import IDilationConnector
from wormhole._status import DilationHint
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.link.framer import relay_handshake_line
from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.selection import punch
from txdilation.selection.addresses import ipv6_addresses
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.connector_settings import (
    DIRECT_GRACE,
    RELAY_DELAY,
    ConnectorSettings,
    IConnectorOwner,
)
from txdilation.selection.hints import (
    DirectTCPV1Hint,
    Hint,
    RelayEndpoint,
    RelayV1Hint,
    TCPHint,
    TorTCPV1Hint,
    WebSocketHint,
    describe_inbound,
    describe_outbound,
    encode_hint,
    hint_url,
    websocket_address,
)
from txdilation.selection.listener import LISTEN_BACKLOG, OldestFirstCap, listen
from txdilation.selection.relays import (
    RELAY_CONNECT_TIMEOUT,
    RelayUsed,
    relay_index,
    relay_transport,
    relays_to_dial,
)
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import ICandidateOwner
from txdilation.wire.keys import derive_relay_token
from txdilation.wire.machines import complete
from txdilation.wire.roles import LEADER, Role

__all__ = [
    "DIRECT_GRACE",
    "RELAY_DELAY",
    "Connector",
    "ConnectorSettings",
    "IConnectorOwner",
    "ipaddrs",
]

LISTEN_RETRIES = 50
LISTEN_RETRY_DELAY = 0.1

_log = Logger(namespace="txdilation.selection.connector")


class ConnectorEvents(TypingProtocol):
    """Inputs of one generation's connector."""

    def listener_ready(self, hints: list[Hint]) -> None:
        """Our listener is up; these direct hints describe it."""

    def hints_received(self, hints: list[Hint]) -> None:
        """The peer published hints."""

    def decisive_candidate(self, connection: DilatedConnectionProtocol) -> None:
        """A candidate to select at once (any for the Follower, a direct one for the Leader)."""

    def tentative_candidate(self, connection: DilatedConnectionProtocol) -> None:
        """A relay candidate the Leader holds briefly in case a direct one appears."""

    def tentative_gone(self) -> None:
        """Every held relay candidate closed before the grace period ended."""

    def grace_expired(self) -> None:
        """The grace period for a held relay candidate ended."""

    def stop(self) -> None:
        """Stop this generation: close everything that is not selected."""


def _tcp_client_endpoint(reactor: Any, hint: TCPHint, timeout: float) -> IStreamClientEndpoint:
    try:
        address = ipaddress.ip_address(hint.hostname)
    except ValueError:
        return HostnameEndpoint(reactor, hint.hostname.encode("idna"), hint.port, timeout=timeout)
    endpoint_class: Any = TCP6ClientEndpoint if address.version == 6 else TCP4ClientEndpoint
    endpoint: IStreamClientEndpoint = endpoint_class(
        reactor, hint.hostname, hint.port, timeout=timeout
    )
    return endpoint


@implementer(ICandidateOwner, IDilationConnector)
class Connector:
    """One generation of connection attempts; see the module docstring."""

    def __init__(
        self,
        settings: ConnectorSettings,
        *,
        owner: IConnectorOwner,
        reactor: Any,
        telemetry: Telemetry | None = None,
        eventually: Callable[..., object] | None = None,
    ) -> None:
        """
        :param settings: what to do (the same for every generation).
        :param owner: where hints and the selected connection go (the Manager).
        :param reactor: IReactorTCP + IReactorTime (+ a thread pool for address discovery).
        :param telemetry: the session's telemetry; None records no attempts.
        :param eventually: ``eventually(f, *args)`` calls ``f(*args)`` on a later reactor
            turn, in order (stock's ``EventualQueue.eventually``; default: ``callLater(0)``):
            a candidate is taken on the turn after its KCM exchange, as stock takes it.
        """
        self._settings = settings
        self._eventually = (
            eventually if eventually is not None else lambda f, *a: reactor.callLater(0, f, *a)
        )
        self._owner = owner
        self._reactor = reactor
        self._listeners: list[IListeningPort] = []
        self._published: set[Hint] = set()  # direct hints sent to the peer this generation
        self._attempts: set[Deferred[Any]] = set()
        self._connections: set[DilatedConnectionProtocol] = set()
        self._held: list[DilatedConnectionProtocol] = []
        #: candidates waiting for their turn (_consider); one lost meanwhile is dropped from it
        self._considering: set[DilatedConnectionProtocol] = set()
        self._grace_timer: IDelayedCall | None = None
        self._relay_timer: IDelayedCall | None = None
        self._deferred_relays: list[RelayEndpoint] = []
        self._relays_started = False
        self._direct_outstanding = 0
        self._used_relays: set[RelayEndpoint] = set()
        self._relay_of: dict[DilatedConnectionProtocol, RelayEndpoint] = {}
        self.selected: DilatedConnectionProtocol | None = None
        self._finished = False  # selected or stopped: no more listeners or attempts
        self._listen_retry: IDelayedCall | None = None
        #: hole punching: listen with SO_REUSEPORT and dial direct hints from that port
        self._punch = (
            settings.network.punch and settings.tor is None and punch.sockets_reusable(reactor)
        )
        self._dual_stack = settings.tor is None and punch.sockets_reusable(reactor)
        self._listen_port: int | None = None  # the listener's port, once it listens
        self._punch_retries: set[IDelayedCall] = set()
        self._punching: set[Deferred[Any]] = set()  # dials to the peer's punched hints
        self._held_since: float | None = None  # when the first relay candidate was held
        #: when we published punched hints and when we last dialled a punched hint
        self._punch_marks: list[float] = []
        self._attempt_log = AttemptLog(telemetry, reactor) if telemetry is not None else None
        self._attempt_of: dict[DilatedConnectionProtocol, Attempt] = {}
        #: inbound connections not through their handshake yet (a flood cannot hold more)
        self._unauthenticated: OldestFirstCap[DilatedConnectionProtocol] = OldestFirstCap(
            settings.max_unauthenticated, lambda c: c.prologue_received
        )
        self.candidates = 0
        """How many connections reached the selectable point before the race ended."""
        self.events: ConnectorEvents = connector_machine(self)

    @classmethod
    def get_connection_abilities(cls) -> list[dict[str, str]]:
        """The ``dilation-abilities`` we advertise in the ``version`` message (as stock)."""
        return [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]

    @property
    def role(self) -> Role:
        return self._settings.role

    @property
    def busy(self) -> bool:
        """Something may still produce a connection: an attempt in progress, a candidate in
        its handshake, relay attempts waiting for their delay, a listener being retried.
        (Our listener alone does not count: the peer may have given up on it.)"""
        return bool(
            self._attempts
            or self._connections
            or self._held
            or self._deferred_relays
            or self._listen_retry is not None
            or self._punch_retries
        )

    # --- starting ---

    def start(self) -> None:
        """Listen (when allowed), publish relay hints and connect to our own relay."""
        s = self._settings
        if not s.no_listen and s.tor is None:
            self._start_listener()
        if s.relay_hints:
            self._owner.send_hints([encode_hint(h) for h in s.relay_hints])
            self._use_hints(list(s.relay_hints))

    def _start_listener(self, attempt: int = 0) -> None:
        self._listen_retry = None
        network = self._settings.network
        interface = network.listen_interface or ""
        factory = _InboundFactory(self)
        if self._dual_stack:
            d: Deferred[Any] = maybeDeferred(
                punch.listen,
                self._reactor,
                factory,
                network.listen_port,
                interface,
                reuse_port=self._punch,
                backlog=LISTEN_BACKLOG,
            )
        else:
            d = listen(self._reactor, network.listen_port, interface, factory)
        d.addCallback(self._listening)

        def failed(f: Failure) -> None:
            # A fixed port may still be held by the previous generation's listener, whose
            # socket closes a reactor turn after stopListening(): try again shortly.
            if (
                f.check(CannotListenError)  # type: ignore[no-untyped-call]
                and network.listen_port
                and attempt < LISTEN_RETRIES
                and not self._finished
            ):
                self._listen_retry = self._reactor.callLater(
                    LISTEN_RETRY_DELAY, self._start_listener, attempt + 1
                )
                return
            _log.failure("dilation listener failed", f)

        d.addErrback(failed)

    def _listening(self, port: IListeningPort) -> Deferred[Any]:
        self._listeners.append(port)
        if self._finished:  # selected or stopped while the listener was starting
            self._close_others(keep=self.selected)
            return succeed(None)
        self._listen_port = port.getHost().port  # type: ignore[attr-defined]
        return self._publish_direct_hints(port)

    def network_changed(self) -> None:
        """The host's addresses or routes changed while this generation connects: direct
        hints for addresses found now and not published yet go to the peer (the listener
        takes every address, so they work at once). Nothing before the listener is up, nor
        after selection."""
        if self._finished or not self._listeners or self._listen_port is None:
            return
        self._publish_direct_hints(self._listeners[-1])

    def _publish_direct_hints(self, port: IListeningPort) -> Deferred[Any]:
        """Discover our addresses and publish each direct (and punched) hint once."""
        assert self._listen_port is not None
        portnum = self._settings.network.hint_port or self._listen_port
        d = self._find_addresses()

        def publish(addresses: Sequence[str]) -> None:
            if port not in self._listeners:
                return  # stopped meanwhile
            hints: list[Hint] = [DirectTCPV1Hint(a, portnum, 0.0) for a in addresses]
            if self._punch:
                public = self._settings.public_addresses
                punched = punch.punched_hints(public, portnum, addresses)
                if punched:
                    self._punch_marks.append(self._reactor.seconds())
                hints.extend(punched)
            fresh = [h for h in hints if h not in self._published]
            self._published.update(fresh)
            if fresh:
                self.events.listener_ready(fresh)

        d.addCallback(publish)
        d.addErrback(lambda f: _log.failure("address discovery failed", f))
        return d

    def _find_addresses(self) -> Deferred[Sequence[str]]:
        configured = self._settings.network.hint_addresses
        if configured is not None:
            return succeed(configured)
        pool = getattr(self._reactor, "getThreadPool", None)
        # IPv6 addresses only where the listener takes IPv6 (no interface, or an IPv6 one)
        ipv6 = self._dual_stack and ":" in (self._settings.network.listen_interface or ":")
        find = _find_addresses_with_ipv6 if ipv6 else ipaddrs.find_addresses
        if pool is None:
            return succeed(_usable_addresses(find()))
        d: Deferred[list[str]] = deferToThreadPool(self._reactor, pool(), find)
        return d.addCallback(_usable_addresses)

    # --- peer hints ---

    def got_hints(self, hints: list[Hint]) -> None:
        """Hints arrived from the peer (the manager filters stale generations)."""
        self.events.hints_received(hints)

    def _use_hints(self, hints: list[Hint]) -> None:
        s = self._settings
        status: list[DilationHint] = []
        direct = sorted(
            (h for h in hints if not isinstance(h, RelayV1Hint)), key=lambda h: -h.priority
        )
        fresh = relays_to_dial((h for h in hints if isinstance(h, RelayV1Hint)), self._used_relays)
        if s.tor is not None:  # WebSocket relays are not dialed through Tor
            fresh = [h for h in fresh if not isinstance(h, WebSocketHint)]
        made_direct = False
        for d in direct:
            if isinstance(d, TorTCPV1Hint) and s.tor is None:
                continue
            status.append(DilationHint(hint_url(d), True))
            self._attempt(d, via_relay=False)
            made_direct = True
        self._used_relays.update(fresh)
        status.extend(DilationHint(hint_url(h), False) for h in fresh)
        if made_direct and not s.no_listen and not self._relays_started:
            self._deferred_relays.extend(fresh)
            if self._relay_timer is None:
                self._relay_timer = self._reactor.callLater(s.relay_delay, self._start_relays)
        else:
            for h in fresh:
                self._attempt(h, via_relay=True)
        if status:
            self._owner.hint_status(status)

    def _start_relays(self) -> None:
        """Relay attempts begin after the delay, or once every direct attempt has failed."""
        if self._relay_timer is not None and self._relay_timer.active():
            self._relay_timer.cancel()
        self._relay_timer = None
        self._relays_started = True
        pending, self._deferred_relays = self._deferred_relays, []
        for h in pending:
            self._attempt(h, via_relay=True)

    def _attempt(
        self, hint: RelayEndpoint, *, via_relay: bool, first_try: float | None = None
    ) -> None:
        s = self._settings
        timeout = (
            min(s.handshake_timeout, RELAY_CONNECT_TIMEOUT) if via_relay else s.handshake_timeout
        )
        endpoint: IStreamClientEndpoint
        binding = None
        # a direct TCP dial, when hole punching may bind it to the listening port
        punchable: TCPHint | None = None
        if self._punch and not via_relay and self._listen_port:
            punchable = None if isinstance(hint, WebSocketHint) else hint
            if punchable is not None:
                binding = punch.dial_binding(
                    punchable, self._listen_port, s.network.listen_interface or None
                )
        if isinstance(hint, WebSocketHint):
            host, port, path = websocket_address(hint)
            endpoint = WebSocketClientEndpoint(
                self._reactor, host, port, path, secure=hint.secure, timeout=timeout
            )
        elif s.tor is not None:
            endpoint = s.tor.stream_via(hint.hostname, hint.port)
        elif binding is not None:
            endpoint = TCP4ClientEndpoint(  # IP literals of either family; see selection.punch
                self._reactor,
                hint.hostname,
                hint.port,
                timeout=s.handshake_timeout,
                bindAddress=binding,
            )
        else:
            endpoint = _tcp_client_endpoint(self._reactor, hint, timeout)
        relay_line = None
        if via_relay:
            relay_line = relay_handshake_line(derive_relay_token(s.dilation_key), s.side)
        elif first_try is None:  # a punch retry is still the same outstanding attempt
            self._direct_outstanding += 1
        started = self._reactor.seconds() if first_try is None else first_try
        log = self._attempt_log
        attempt = None
        if log is not None:
            attempt = log.started(_hint_type(hint, via_relay), "outbound")
        factory = _OutboundFactory(
            self,
            describe_outbound(hint, via_relay=via_relay, tor=s.tor is not None),
            not via_relay,
            relay_line,
            attempt,
            hint if via_relay else None,
        )
        d = endpoint.connect(factory)
        self._attempts.add(d)
        if binding is not None and punchable is not None and punch.is_punched(punchable):
            self._punching.add(d)
            self._punch_marks.append(self._reactor.seconds())
            self._extend_grace()

        def done(result: object) -> None:
            self._attempts.discard(d)
            self._punching.discard(d)
            if isinstance(result, Failure):
                if log is not None and attempt is not None:
                    log.connect_failed(attempt, result)
                retrying = (
                    binding is not None
                    and punchable is not None
                    and punch.worth_retrying(punchable, result)
                    and self._retry_punch(punchable, started)
                )
                if not via_relay and not retrying:
                    self._direct_attempt_over()
                _log.debug(
                    "attempt {desc} failed: {why}",
                    desc=factory.description,
                    why=result.getErrorMessage(),
                )

        d.addBoth(done)

    def _retry_punch(self, hint: TCPHint, started: float) -> bool:
        """Dial ``hint`` from the listening port again shortly, if still within the punch
        window (the peer's SYN may not have opened its NAT yet); whether it will be."""
        if self._finished or self._reactor.seconds() - started >= punch.PUNCH_WINDOW:
            return False

        def again() -> None:
            self._punch_retries.discard(timer)
            if self._finished:
                return
            self._attempt(hint, via_relay=False, first_try=started)

        timer = self._reactor.callLater(punch.PUNCH_RETRY_DELAY, again)
        self._punch_retries.add(timer)
        return True

    def _relay_grace(self) -> float:
        """How long from now the Leader holds a relay candidate: ``direct_grace``; while a
        punched dial is under way, until ``punch.PUNCH_GRACE`` after the later of our
        punched hints' publication and the latest punched dial's start (the peer's SYN
        follows our hints; ours follows its hints), if that is later."""
        now: float = self._reactor.seconds()
        held = self._held_since if self._held_since is not None else now
        until = held + self._settings.direct_grace
        if self._punching or self._punch_retries:
            since = max(self._punch_marks, default=held)
            until = max(until, since + punch.PUNCH_GRACE)
        return max(0.0, until - now)

    def _extend_grace(self) -> None:
        """A punched dial started while a relay candidate is held: hold it longer if the
        grace now ends later."""
        timer = self._grace_timer
        if timer is None or not timer.active():
            return
        if self._reactor.seconds() + self._relay_grace() > timer.getTime():
            timer.reset(self._relay_grace())

    def _direct_attempt_over(self) -> None:
        self._direct_outstanding -= 1
        if self._direct_outstanding <= 0 and self._deferred_relays and self.selected is None:
            self._start_relays()

    # --- connections (ICandidateOwner) ---

    def build_protocol(
        self,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None = None,
        relay: RelayEndpoint | None = None,
    ) -> DilatedConnectionProtocol:
        """The L2 protocol for a new TCP connection (``attempt``: its telemetry attempt)."""
        s = self._settings
        p = DilatedConnectionProtocol(
            role=s.role,
            dilation_key=s.dilation_key,
            owner=self,
            description=description,
            is_direct=is_direct,
            relay_line=relay_line,
            clock=self._reactor,
            max_record_size=s.max_record_size,
            handshake_timeout=s.handshake_timeout,
        )
        self._connections.add(p)
        if relay is not None:
            self._relay_of[p] = relay
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.connected(attempt)
            self._attempt_of[p] = attempt
        return p

    def _inbound_attempt(self) -> Attempt | None:
        log = self._attempt_log
        return log.started("direct-tcp-v1", "inbound") if log is not None else None

    def _admit_inbound(self, connection: DilatedConnectionProtocol) -> None:
        """Hold a connection our listener accepted; close the oldest beyond the cap."""
        cap = self._unauthenticated
        first = cap.evicted == 0
        for old in cap.admit(connection):
            if first:
                first = False
                _log.info(
                    "listener holds {n} unauthenticated connections: closing the oldest",
                    n=cap.limit,
                )
            old.abort()

    def candidate_ready(self, connection: Any) -> None:
        self._unauthenticated.discard(connection)
        attempt = self._attempt_of.get(connection)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.ready(attempt)
        if not self._finished:
            self.candidates += 1
        # Taken on the next turn, as stock's connector takes it (through its eventual queue):
        # the Leader's KCM, and so its first records, then go out in the order and the TCP
        # segments stock's would (applications such as fowl's tests depend on that timing).
        self._considering.add(connection)
        self._eventually(self._consider, connection)

    def _consider(self, connection: Any) -> None:
        if connection not in self._considering:  # lost meanwhile
            return
        self._considering.discard(connection)
        if self.role is LEADER and not connection.is_direct and self._direct_still_possible():
            self.events.tentative_candidate(connection)
        else:
            self.events.decisive_candidate(connection)

    def _direct_still_possible(self) -> bool:
        """A direct connection may yet complete: we listen, a direct attempt is pending, or a
        direct candidate is in its handshake. (If not, a relay candidate is taken at once:
        holding it would only widen the window in which a flaky link can cut it.)"""
        return bool(
            self._listeners
            or self._direct_outstanding > 0
            or any(c.is_direct for c in self._connections)
        )

    def candidate_failed(self, connection: Any, reason: str) -> None:
        self._unauthenticated.discard(connection)
        self._considering.discard(connection)
        self._connections.discard(connection)
        self._relay_of.pop(connection, None)
        attempt = self._attempt_of.pop(connection, None)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.closed(attempt, reason)
        _log.debug("candidate {desc} closed: {reason}", desc=connection.description, reason=reason)
        if connection.is_direct and connection.description.startswith("->"):
            self._direct_attempt_over()
        if connection in self._held:
            self._held.remove(connection)
            if not self._held:
                self.events.tentative_gone()

    # --- teardown helpers ---

    def _close_others(self, keep: DilatedConnectionProtocol | None) -> None:
        self._finished = True
        if self._attempt_log is not None:
            self._attempt_log.race_over(self._attempt_of.values())
            self._attempt_of.clear()
        for port in self._listeners:
            port.stopListening()
        self._listeners.clear()
        self._unauthenticated.clear()
        for d in list(self._attempts):
            d.cancel()
        self._attempts.clear()
        timers = (self._relay_timer, self._grace_timer, self._listen_retry, *self._punch_retries)
        for timer in timers:
            if timer is not None and timer.active():
                timer.cancel()
        self._relay_timer = self._grace_timer = self._listen_retry = None
        self._punch_retries.clear()
        self._punching.clear()
        self._deferred_relays.clear()
        for c in {*self._connections, *self._held}:
            if c is not keep:
                c.abort()
        self._connections.clear()
        self._held.clear()
        self._relay_of = {c: r for c, r in self._relay_of.items() if c is keep}

    def _select(self, connection: DilatedConnectionProtocol) -> None:
        self.selected = connection
        attempt = self._attempt_of.pop(connection, None)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.selected(attempt)
        self._close_others(keep=connection)
        link = self._owner.link_for(connection)
        connection.events.select(link)
        endpoint = self._relay_of.pop(connection, None)
        relay = None
        if endpoint is not None:
            relay = RelayUsed(
                hint_url(endpoint),
                relay_transport(endpoint),
                relay_index(self._settings.relay_hints, endpoint),
            )
        self._owner.connector_connection_made(link, self.candidates, relay)
        connection.deliver_held()


def _hint_type(hint: RelayEndpoint, via_relay: bool) -> str:
    """The telemetry hint type of an outbound attempt (never its address)."""
    if via_relay:
        return "relay-v1"
    return "tor-tcp-v1" if isinstance(hint, TorTCPV1Hint) else "direct-tcp-v1"


def _find_addresses_with_ipv6() -> list[str]:
    """Stock's IPv4 discovery and our IPv6 one (blocking: run in a thread)."""
    return [*ipaddrs.find_addresses(), *ipv6_addresses()]


def _usable_addresses(addresses: Iterable[str]) -> list[str]:
    """Stock's rule: advertise non-loopback addresses, or loopback only if it is all we have."""
    found = list(addresses)
    non_loopback = [a for a in found if a not in ("127.0.0.1", "::1")]
    return non_loopback or found


class _OutboundFactory(ClientFactory):
    noisy = False  # one factory per attempt: no "Starting/Stopping factory" log lines

    def __init__(
        self,
        connector: Connector,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None,
        relay: RelayEndpoint | None = None,
    ) -> None:
        self.connector = connector
        self.description = description
        self.is_direct = is_direct
        self.relay_line = relay_line
        self.attempt = attempt
        self.relay = relay

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        p = self.connector.build_protocol(
            self.description, self.is_direct, self.relay_line, self.attempt, self.relay
        )
        p.factory = self
        return p


class _InboundFactory(ServerFactory):
    noisy = False  # one listener per generation: no "Starting/Stopping factory" log lines

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        c = self.connector
        p = c.build_protocol(describe_inbound(addr), True, None, c._inbound_attempt())
        p.factory = self
        c._admit_inbound(p)
        return p


def _build_connector_machine() -> Callable[[Connector], ConnectorEvents]:
    b = TypeMachineBuilder(ConnectorEvents, Connector)
    connecting = b.state("connecting")
    holding = b.state("holding")
    connected = b.state("connected")
    stopped = b.state("stopped")
    E = ConnectorEvents

    @connecting.upon(E.listener_ready).loop()
    @holding.upon(E.listener_ready).loop()
    def publish_hints(events: ConnectorEvents, c: Connector, hints: list[Hint]) -> None:
        c._owner.send_hints([encode_hint(h) for h in hints])

    @connecting.upon(E.hints_received).loop()
    @holding.upon(E.hints_received).loop()
    def use_hints(events: ConnectorEvents, c: Connector, hints: list[Hint]) -> None:
        c._use_hints(hints)

    @connecting.upon(E.decisive_candidate).to(connected)
    @holding.upon(E.decisive_candidate).to(connected)
    def select(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        c._select(connection)

    @connecting.upon(E.tentative_candidate).to(holding)
    def hold(events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol) -> None:
        c._held.append(connection)
        c._held_since = c._reactor.seconds()
        c._grace_timer = c._reactor.callLater(c._relay_grace(), events.grace_expired)

    @holding.upon(E.tentative_candidate).loop()
    def hold_another(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        c._held.append(connection)

    @holding.upon(E.grace_expired).to(connected)
    def select_held(events: ConnectorEvents, c: Connector) -> None:
        c._grace_timer = None
        c._select(c._held[0])

    @holding.upon(E.tentative_gone).to(connecting)
    def release(events: ConnectorEvents, c: Connector) -> None:
        if c._grace_timer is not None and c._grace_timer.active():
            c._grace_timer.cancel()
        c._grace_timer = None

    @connecting.upon(E.stop).to(stopped)
    @holding.upon(E.stop).to(stopped)
    @connected.upon(E.stop).to(stopped)
    def stop_everything(events: ConnectorEvents, c: Connector) -> None:
        c._close_others(keep=c.selected)

    # Late arrivals after selection or stop are closed at once (stock defect 9).
    @connected.upon(E.decisive_candidate).loop()
    @connected.upon(E.tentative_candidate).loop()
    @stopped.upon(E.decisive_candidate).loop()
    @stopped.upon(E.tentative_candidate).loop()
    def drop_late(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        connection.abort()

    # Everything else is a documented no-op: hints and listener news after selection or
    # stop, stray timer inputs, a repeated stop.
    every = (connecting, holding, connected, stopped)
    complete(b, every, [getattr(E, n) for n in vars(E) if not n.startswith("_")])
    return b.build()


connector_machine = _build_connector_machine()
