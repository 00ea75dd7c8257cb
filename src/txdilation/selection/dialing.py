"""L3: one generation's outbound dials to the peer's hints: direct, punched, Tor and relay.

A :class:`Dialer` is owned by the :class:`~txdilation.selection.connector.Connector`. It dials
every direct hint the peer publishes, highest priority first; relay hints are dialed at once
when there is no direct hint to try (or we do not listen), else after ``relay_delay`` seconds or
as soon as every direct attempt has failed, whichever comes first
(:mod:`txdilation.selection.relays` states how several relays race). Each dial's connection is
built by the Connector (``build``), which collects the candidates; the Dialer only learns from it
when a direct connection it dialed closes (:meth:`Dialer.direct_attempt_over`) and reports back
through the narrow callbacks given to it: ``hint_status`` (the hints being tried),
``punch_dial_started`` (the Leader may hold a relay candidate longer) and ``selected`` (whether
the race ended in a selection, so that relays are not started any more).

Hole punching (:mod:`txdilation.selection.punch`): while ``bind_port()`` names the listening
port, every direct dial to an IP literal starts from that port, and a dial to a punched hint of
the peer's that fails early is retried every ``punch.PUNCH_RETRY_DELAY`` seconds until
``punch.PUNCH_WINDOW`` has passed since its first try, so that both peers' SYNs cross.
:meth:`Dialer.go_on_in_background` turns a Dialer whose generation selected a relayed link
into the background dialer of a path upgrade (``path-upgrade-v1``): relay dials end, and every
direct hint of the peer's (punched ones included, from the listening port) is dialed again at
the times of a :class:`~txdilation.selection.upgrade.RetrySchedule`, each dial given
``upgrade.BACKGROUND_CONNECT_TIMEOUT`` seconds, until the race ends for good.

Invariants: after :meth:`Dialer.cancel_attempts` nothing is dialed any more (the cancelled
direct dials ending there start no relay dial, no punch retry follows); the same relay endpoint
is dialed at most once per generation, and none once in the background; at most one dial per
direct hint is in flight in the background; a punch retry is the same outstanding direct attempt as
its first try; every dial is one telemetry attempt when an
:class:`~txdilation.selection.attempts.AttemptLog` is given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
)
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint
from twisted.internet.protocol import ClientFactory
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._status import DilationHint

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.link.framer import relay_handshake_line
from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.selection import punch
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.hints import (
    DirectTCPV1Hint,
    Hint,
    RelayEndpoint,
    RelayV1Hint,
    TCPHint,
    TorTCPV1Hint,
    WebSocketHint,
    describe_outbound,
    hint_url,
    websocket_address,
)
from txdilation.selection.relays import RELAY_CONNECT_TIMEOUT, relays_to_dial
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, RetrySchedule
from txdilation.wire.keys import derive_relay_token

if TYPE_CHECKING:
    from txdilation.selection.connector_settings import ConnectorSettings

__all__ = ["BuildProtocol", "Dialer"]

#: the connector's logger: the split into modules changes no log line
_log = Logger(namespace="txdilation.selection.connector")

#: ``build(description, is_direct, relay_line, attempt, relay)``: the Connector's
#: ``build_protocol``, the L2 protocol for a new TCP connection
BuildProtocol = Callable[
    [str, bool, bytes | None, Attempt | None, RelayEndpoint | None], DilatedConnectionProtocol
]


class Dialer:
    """One generation's outbound dials; see the module docstring."""

    def __init__(
        self,
        settings: ConnectorSettings,
        reactor: Any,
        *,
        attempt_log: AttemptLog | None,
        build: BuildProtocol,
        bind_port: Callable[[], int | None],
        hint_status: Callable[[list[DilationHint]], None],
        selected: Callable[[], bool],
    ) -> None:
        """
        :param bind_port: the listening port direct dials start from (hole punching), or None.
        :param hint_status: told which hints are being tried.
        :param selected: whether a connection was selected (relays are not started then).
        """
        self._settings = settings
        self._reactor = reactor
        self._attempt_log = attempt_log
        self._build = build
        self._bind_port = bind_port
        self._hint_status = hint_status
        self._selected = selected
        self._closed = False  # the race is over: no punch retries
        self.attempts: set[Deferred[Any]] = set()
        self.deferred_relays: list[RelayEndpoint] = []
        self._relay_timer: IDelayedCall | None = None
        self._relays_started = False
        #: direct attempts not over yet (a punch retry is its first try's attempt)
        self.direct_outstanding = 0
        self._used_relays: set[RelayEndpoint] = set()
        self.punch_retries: set[IDelayedCall] = set()
        #: the peer's direct hints, in the order they came (dialed again in the background)
        self.direct_hints: list[TCPHint] = []
        #: the dial in flight to each direct hint, and when it started
        self._dialing: dict[TCPHint, tuple[Deferred[Any], float]] = {}
        self._relay_dials: set[Deferred[Any]] = set()
        #: the schedule of background dials, once the generation selected a relayed link
        self._background: RetrySchedule | None = None
        self._background_timer: IDelayedCall | None = None

    @property
    def busy(self) -> bool:
        """A dial is in progress, relays wait for their delay, or a punch retry is due."""
        return bool(self.attempts or self.deferred_relays or self.punch_retries)

    @property
    def in_background(self) -> bool:
        """Whether this Dialer dials direct hints again for a path upgrade."""
        return self._background is not None

    def use_hints(self, hints: list[Hint]) -> None:
        """Dial the peer's hints (relay hints now or later); report those being tried."""
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
            if d not in self.direct_hints:
                self.direct_hints.append(d)
            if d not in self._dialing:
                self._attempt(d, via_relay=False)
            made_direct = True
        if self._background is not None:  # a path upgrade: no relay any more
            fresh = []
        self._used_relays.update(fresh)
        status.extend(DilationHint(hint_url(h), False) for h in fresh)
        if made_direct and not s.no_listen and not self._relays_started:
            self.deferred_relays.extend(fresh)
            if self._relay_timer is None:
                self._relay_timer = self._reactor.callLater(s.relay_delay, self._start_relays)
        else:
            for h in fresh:
                self._attempt(h, via_relay=True)
        if status:
            self._hint_status(status)

    def _start_relays(self) -> None:
        """Relay attempts begin after the delay, or once every direct attempt has failed
        (never after :meth:`cancel_attempts`: the cancelled direct dials end there too)."""
        if self._closed:
            return
        if self._relay_timer is not None and self._relay_timer.active():
            self._relay_timer.cancel()
        self._relay_timer = None
        self._relays_started = True
        pending, self.deferred_relays = self.deferred_relays, []
        for h in pending:
            self._attempt(h, via_relay=True)

    def _attempt(
        self, hint: RelayEndpoint, *, via_relay: bool, first_try: float | None = None
    ) -> None:
        s = self._settings
        timeout = (
            min(s.handshake_timeout, RELAY_CONNECT_TIMEOUT) if via_relay else s.handshake_timeout
        )
        if self._background is not None:
            timeout = min(timeout, BACKGROUND_CONNECT_TIMEOUT)
        endpoint: IStreamClientEndpoint
        binding = None
        # a direct TCP dial, when hole punching may bind it to the listening port
        punchable: TCPHint | None = None
        listen_port = self._bind_port()
        if not via_relay and listen_port:
            punchable = None if isinstance(hint, WebSocketHint) else hint
            if punchable is not None:
                binding = punch.dial_binding(
                    punchable, listen_port, s.network.listen_interface or None
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
                timeout=timeout,
                bindAddress=binding,
            )
        else:
            endpoint = _tcp_client_endpoint(self._reactor, hint, timeout)
        relay_line = None
        if via_relay:
            relay_line = relay_handshake_line(derive_relay_token(s.dilation_key), s.side)
        elif first_try is None:  # a punch retry is still the same outstanding attempt
            self.direct_outstanding += 1
        started = self._reactor.seconds() if first_try is None else first_try
        log = self._attempt_log
        attempt = None
        if log is not None:
            attempt = log.started(_hint_type(hint, via_relay), "outbound")
        factory = _OutboundFactory(
            self._build,
            describe_outbound(hint, via_relay=via_relay, tor=s.tor is not None),
            not via_relay,
            relay_line,
            attempt,
            hint if via_relay else None,
        )
        d = endpoint.connect(factory)
        self.attempts.add(d)
        if via_relay:
            self._relay_dials.add(d)
        elif isinstance(hint, (DirectTCPV1Hint, TorTCPV1Hint)):
            self._dialing[hint] = (d, self._reactor.seconds())

        def done(result: object) -> None:
            self.attempts.discard(d)
            self._relay_dials.discard(d)
            if self._dialing.get(hint, (None, 0.0))[0] is d:  # type: ignore[arg-type]
                del self._dialing[hint]  # type: ignore[arg-type]
            if isinstance(result, Failure):
                if log is not None and attempt is not None:
                    log.connect_failed(attempt, result)
                retrying = (
                    self._background is None
                    and binding is not None
                    and punchable is not None
                    and punch.worth_retrying(punchable, result)
                    and self._retry_punch(punchable, started)
                )
                if not via_relay and not retrying:
                    self.direct_attempt_over()
                _log.debug(
                    "attempt {desc} failed: {why}",
                    desc=factory.description,
                    why=result.getErrorMessage(),
                )

        d.addBoth(done)

    def _retry_punch(self, hint: TCPHint, started: float) -> bool:
        """Dial ``hint`` from the listening port again shortly, if still within the punch
        window (the peer's SYN may not have opened its NAT yet); whether it will be."""
        if self._closed or self._reactor.seconds() - started >= punch.PUNCH_WINDOW:
            return False

        def again() -> None:
            self.punch_retries.discard(timer)
            if self._closed:
                return
            self._attempt(hint, via_relay=False, first_try=started)

        timer = self._reactor.callLater(punch.PUNCH_RETRY_DELAY, again)
        self.punch_retries.add(timer)
        return True

    def direct_attempt_over(self) -> None:
        """A direct attempt failed, or its connection closed: relays are due once none is
        left."""
        self.direct_outstanding -= 1
        if self.direct_outstanding <= 0 and self.deferred_relays and not self._selected():
            self._start_relays()

    def go_on_in_background(self, schedule: RetrySchedule) -> None:
        """The generation selected a relayed link and the peer moves links: no more relay
        dials; the direct hints are dialed again on ``schedule`` (see the module docstring)."""
        self._background = schedule
        self._relays_started = True  # none deferred will start
        self.deferred_relays.clear()
        if self._relay_timer is not None and self._relay_timer.active():
            self._relay_timer.cancel()
        self._relay_timer = None
        for d in list(self._relay_dials):
            d.cancel()
        for timer in self.punch_retries:
            if timer.active():
                timer.cancel()
        self.punch_retries.clear()
        self._arm_background()

    def dial_again_now(self) -> None:
        """(Background) the network changed: dial every direct hint now, then the quick
        retries again."""
        if self._background is None or self._closed:
            return
        self._background.restart(self._reactor.seconds())
        self._background_dials()
        self._arm_background()

    def _arm_background(self) -> None:
        if self._background is None or self._closed:
            return
        if self._background_timer is not None and self._background_timer.active():
            self._background_timer.cancel()
        now = self._reactor.seconds()
        delay = self._background.next_after(now) - now
        self._background_timer = self._reactor.callLater(delay, self._background_tick)

    def _background_tick(self) -> None:
        self._background_timer = None
        self._background_dials()
        self._arm_background()

    def _background_dials(self) -> None:
        """Dial every direct hint with no dial in flight; give up one that has been
        connecting for longer than a background dial may (its SYNs may have been lost while
        the path was blocked: a new dial starts over)."""
        now = self._reactor.seconds()
        for hint in self.direct_hints:
            in_flight = self._dialing.get(hint)
            if in_flight is not None:
                if now - in_flight[1] < BACKGROUND_CONNECT_TIMEOUT:
                    continue
                in_flight[0].cancel()
            self._attempt(hint, via_relay=False)

    def cancel_attempts(self) -> None:
        """The race is over: cancel every dial in progress (no punch retry follows)."""
        self._closed = True
        for d in list(self.attempts):
            d.cancel()
        self.attempts.clear()

    def cancel_timers(self) -> None:
        """The race is over: cancel the relay delay and punch retries, forget deferred relays."""
        for timer in (self._relay_timer, self._background_timer, *self.punch_retries):
            if timer is not None and timer.active():
                timer.cancel()
        self._relay_timer = self._background_timer = None
        self.punch_retries.clear()
        self.deferred_relays.clear()


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


def _hint_type(hint: RelayEndpoint, via_relay: bool) -> str:
    """The telemetry hint type of an outbound attempt (never its address)."""
    if via_relay:
        return "relay-v1"
    return "tor-tcp-v1" if isinstance(hint, TorTCPV1Hint) else "direct-tcp-v1"


class _OutboundFactory(ClientFactory):
    noisy = False  # one factory per attempt: no "Starting/Stopping factory" log lines

    def __init__(
        self,
        build: BuildProtocol,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None,
        relay: RelayEndpoint | None = None,
    ) -> None:
        self.build = build
        self.description = description
        self.is_direct = is_direct
        self.relay_line = relay_line
        self.attempt = attempt
        self.relay = relay

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        p = self.build(self.description, self.is_direct, self.relay_line, self.attempt, self.relay)
        p.factory = self
        return p
