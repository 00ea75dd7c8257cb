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
port, every direct dial to an IP literal starts from that port. A dial to a punched hint of the
peer's follows a :class:`~txdilation.selection.punch_schedule.PunchPlan`: it waits for the
expiry probe (once per generation and address family), its first SYN may have a low TTL
(:mod:`txdilation.selection.punch_dial` makes that socket), and when it fails it is dialled
again as the plan says (soon after a refusal, at once after an expiry, else every
``punch.PUNCH_RETRY_DELAY`` seconds) until ``punch.PUNCH_WINDOW`` has passed since its first
try.
:meth:`Dialer.relay_grace` is how long the Leader holds a relay candidate, longer while a
punched dial is under way.

Invariants: after :meth:`Dialer.cancel_attempts` nothing is dialed any more (the cancelled
direct dials ending there start no relay dial, no punch retry follows, the expiry probe stops);
the same relay endpoint is dialed at most once per generation; a punch retry is the same
outstanding direct attempt as its first try; every dial is one telemetry attempt when an
:class:`~txdilation.selection.attempts.AttemptLog` is given.
"""

from __future__ import annotations

import ipaddress
import random
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
from twisted.internet.tcp import makeBinding
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._status import DilationHint

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.link.framer import relay_handshake_line
from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.selection import punch
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.hints import (
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
from txdilation.selection.punch_dial import ExpiryProbe, punched_endpoint
from txdilation.selection.punch_schedule import LOW_TTLS, PunchPlan, Verdict, outcome_of
from txdilation.selection.relays import RELAY_CONNECT_TIMEOUT, relays_to_dial
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
        punch_dial_started: Callable[[], None],
        selected: Callable[[], bool],
    ) -> None:
        """
        :param bind_port: the listening port direct dials start from (hole punching), or None.
        :param hint_status: told which hints are being tried.
        :param punch_dial_started: a dial to a punched hint of the peer's started.
        :param selected: whether a connection was selected (relays are not started then).
        """
        self._settings = settings
        self._reactor = reactor
        self._attempt_log = attempt_log
        self._build = build
        self._bind_port = bind_port
        self._hint_status = hint_status
        self._punch_dial_started = punch_dial_started
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
        self._punching: set[Deferred[Any]] = set()  # dials to the peer's punched hints
        self._rng = random.Random()  # punch retry spacing
        self._expiry = ExpiryProbe(reactor, LOW_TTLS[0])  # do low-TTL first SYNs survive?
        #: when we published punched hints and when we last dialled a punched hint
        self._punch_marks: list[float] = []

    @property
    def busy(self) -> bool:
        """A dial is in progress, relays wait for their delay, or a punch retry is due."""
        return bool(self.attempts or self.deferred_relays or self.punch_retries)

    def punched_hints_published(self) -> None:
        """We published punched hints now (the peer's SYN to them follows)."""
        self._punch_marks.append(self._reactor.seconds())

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
            self._attempt(d, via_relay=False)
            made_direct = True
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
        self, hint: RelayEndpoint, *, via_relay: bool, plan: PunchPlan | None = None
    ) -> None:
        s = self._settings
        timeout = (
            min(s.handshake_timeout, RELAY_CONNECT_TIMEOUT) if via_relay else s.handshake_timeout
        )
        endpoint: IStreamClientEndpoint | None = None
        local: tuple[str, int] | None = None  # dialled from: hole punching's listening port
        # a direct TCP dial, when hole punching may bind it to the listening port
        punchable: TCPHint | None = None
        listen_port = self._bind_port()
        if not via_relay and listen_port and not isinstance(hint, WebSocketHint):
            punchable = hint
            local = punch.dial_address(hint, listen_port, s.network.listen_interface or None)
        punched = local is not None and punchable is not None and punch.is_punched(punchable)
        if isinstance(hint, WebSocketHint):
            host, port, path = websocket_address(hint)
            endpoint = WebSocketClientEndpoint(
                self._reactor, host, port, path, secure=hint.secure, timeout=timeout
            )
        elif s.tor is not None:
            endpoint = s.tor.stream_via(hint.hostname, hint.port)
            punched = False
        elif local is not None and not punched:
            endpoint = TCP4ClientEndpoint(  # IP literals of either family; see selection.punch
                self._reactor,
                hint.hostname,
                hint.port,
                timeout=s.handshake_timeout,
                bindAddress=makeBinding(*local, reuseAddress=True, reusePort=True),
            )
        elif local is None:
            endpoint = _tcp_client_endpoint(self._reactor, hint, timeout)
        relay_line = None
        if via_relay:
            relay_line = relay_handshake_line(derive_relay_token(s.dilation_key), s.side)
        elif plan is None:  # a punch retry is still the same outstanding attempt
            self.direct_outstanding += 1
        if punched and plan is None:
            plan = PunchPlan(self._reactor.seconds(), self._rng)
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
        d: Deferred[Any]
        if endpoint is not None:
            d = endpoint.connect(factory)
        else:  # a punched hint: see selection.punch_schedule
            assert plan is not None and local is not None and punchable is not None
            host, port = punchable.hostname, punchable.port
            known = self._expiry.known(host)
            if known is not None and plan.verdict is None:
                plan.probed(known)
            # a low-TTL dial, if one survives here, waits for the probe to know; others
            # start it (for the dials after a refusal) and dial at once
            waits = plan.wants_verdict
            now: Deferred[Verdict | None] = Deferred()
            d = self._expiry.verdict(host, port, local[0]) if waits else now
            self._punching.add(d)  # before it dials: the relay hold counts it
            d.addCallback(self._punched_dial, punchable, local, plan, factory)
            if not waits:
                self._expiry.start(host, port, local[0])
                now.callback(None)
        self.attempts.add(d)
        if punched:
            self._punching.add(d)

        def done(result: object) -> None:
            self.attempts.discard(d)
            self._punching.discard(d)
            if isinstance(result, Failure):
                if log is not None and attempt is not None:
                    log.connect_failed(attempt, result)
                retrying = (
                    plan is not None
                    and punchable is not None
                    and self._retry_punch(punchable, plan, result)
                )
                if not via_relay and not retrying:
                    self.direct_attempt_over()
                _log.debug(
                    "attempt {desc} failed: {why}",
                    desc=factory.description,
                    why=result.getErrorMessage(),
                )

        d.addBoth(done)

    def _punched_dial(
        self,
        verdict: Verdict | None,
        hint: TCPHint,
        local: tuple[str, int],
        plan: PunchPlan,
        factory: _OutboundFactory,
    ) -> Deferred[Any]:
        """Dial a punched hint from ``local``, its first SYN's TTL as ``plan`` says (with the
        expiry probe's ``verdict`` if the dial waited for it)."""
        if verdict is not None:
            plan.probed(verdict)
        now = self._reactor.seconds()
        ttl = plan.dial(now)
        self._punch_marks.append(now)
        self._punch_dial_started()
        timeout = self._settings.handshake_timeout
        endpoint = punched_endpoint(
            self._reactor, hint.hostname, hint.port, local, ttl=ttl, timeout=timeout
        )
        return endpoint.connect(factory)

    def _retry_punch(self, hint: TCPHint, plan: PunchPlan, failure: Failure) -> bool:
        """Dial ``hint`` from the listening port again when ``plan`` says so (its last dial
        failed with ``failure``); whether it will be."""
        outcome = outcome_of(failure, low_ttl=plan.last_ttl is not None)
        delay = None if self._closed else plan.again(outcome, self._reactor.seconds())
        if delay is None:
            return False

        def again() -> None:
            self.punch_retries.discard(timer)
            if self._closed:
                return
            self._attempt(hint, via_relay=False, plan=plan)

        timer = self._reactor.callLater(delay, again)
        self.punch_retries.add(timer)
        return True

    def relay_grace(self, held_since: float | None) -> float:
        """How long from now the Leader holds a relay candidate (held since ``held_since``, or
        from now): ``direct_grace``; while a punched dial is under way, until
        ``punch.PUNCH_GRACE`` after the later of our punched hints' publication and the latest
        punched dial's start (the peer's SYN follows our hints; ours follows its hints), if
        that is later."""
        now: float = self._reactor.seconds()
        held = held_since if held_since is not None else now
        until = held + self._settings.direct_grace
        if self._punching or self.punch_retries:
            since = max(self._punch_marks, default=held)
            until = max(until, since + punch.PUNCH_GRACE)
        return max(0.0, until - now)

    def direct_attempt_over(self) -> None:
        """A direct attempt failed, or its connection closed: relays are due once none is
        left."""
        self.direct_outstanding -= 1
        if self.direct_outstanding <= 0 and self.deferred_relays and not self._selected():
            self._start_relays()

    def cancel_attempts(self) -> None:
        """The race is over: cancel every dial in progress (no punch retry follows)."""
        self._closed = True
        self._expiry.stop()
        for d in list(self.attempts):
            d.cancel()
        self.attempts.clear()

    def cancel_timers(self) -> None:
        """The race is over: cancel the relay delay and punch retries, forget deferred relays."""
        for timer in (self._relay_timer, *self.punch_retries):
            if timer is not None and timer.active():
                timer.cancel()
        self._relay_timer = None
        self.punch_retries.clear()
        self._punching.clear()
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
