"""L3: one generation's outbound dials to the peer's hints: direct, punched, Tor and relay.

A :class:`Dialer` is owned by the :class:`~txdilation.selection.connector.Connector`. It dials
every direct hint the peer publishes, highest priority first; relay hints are dialed at once
when there is no direct hint to try (or we do not listen), else after ``relay_delay`` seconds or
as soon as every direct attempt has failed, whichever comes first
(:mod:`txdilation.selection.relays` states how several relays race). Each dial is one
:class:`Dial` record, from its first try to its end (a punch retry is the same dial tried
again); its connection is built by the Connector (``build(dial)``), which keeps the dial with
that candidate and tells the Dialer when its connection closes (:meth:`Dialer.dial_over`). The
Dialer reports back through the narrow callbacks given to it: ``hint_status`` (the hints being
tried) and ``selected`` (whether the race ended in a selection, so that relays are not started
any more).

Hole punching (:mod:`txdilation.selection.punch`): while ``bind_port()`` names the listening
port, every direct dial to an IP literal starts from that port. A dial to a punched hint of the
peer's follows a :class:`~txdilation.selection.punch_schedule.PunchPlan`: its first SYN may
have a low TTL after a refusal, where the expiry probe (once per generation and address
family) finds such a connect survives (:mod:`txdilation.selection.punch_dial` makes that
socket), and a try that fails is made again as the plan says (soon after a refusal, at once
after an expiry, else every ``punch.PUNCH_RETRY_DELAY`` seconds) until ``punch.PUNCH_WINDOW``
has passed since its first try.

:meth:`Dialer.go_on_in_background` turns a Dialer whose generation selected a relayed link
into the background dialer of a path upgrade (``path-upgrade-v1``): relay dials end, and every
direct hint of the peer's (punched ones included, from the listening port) is dialed again at
the times of a :class:`~txdilation.selection.upgrade.RetrySchedule`, each try given at most
``upgrade.BACKGROUND_CONNECT_TIMEOUT`` seconds (a try still connecting at the next time is
given up for a new one; during the quick first retries, a refused try of a plan that relies
on crossing SYNs is made again soon for ``punch_schedule.REFUSED_BURST`` after each), until
the race ends for good.

Invariants: after :meth:`Dialer.cancel_attempts` nothing is dialed any more (the cancelled
direct dials ending there start no relay dial, no punch retry follows); the same relay endpoint
is dialed once per generation (again only by :meth:`Dialer.dial_again`, once that dial is
over), and none once in the background; a direct dial is outstanding from its first try until
it fails for good or its connection closes, and it ends once (:meth:`Dialer.dial_over`, the one
place that ends it), a punch retry, a background try or a try again being the same dial; every
try is one telemetry attempt when an :class:`~txdilation.selection.attempts.AttemptLog` is
given.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed
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
from txdilation.selection.punch_schedule import (
    CROSSING_WINDOW,
    LOW_TTLS,
    PunchPlan,
    Verdict,
    outcome_of,
)
from txdilation.selection.relays import RELAY_CONNECT_TIMEOUT, relays_to_dial
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, RetrySchedule
from txdilation.wire.keys import derive_relay_token

if TYPE_CHECKING:
    from txdilation.selection.connector_settings import ConnectorSettings

__all__ = ["BuildProtocol", "Dial", "Dialer"]

#: the connector's logger: the split into modules changes no log line
_log = Logger(namespace="txdilation.selection.connector")


@dataclass(eq=False, slots=True)
class Dial:
    """One outbound dial to one hint of the peer's, from its first try to its end (a punch
    retry is the same dial, tried again)."""

    hint: RelayEndpoint
    via_relay: bool
    description: str
    relay_line: bytes | None  # what we say to the relay first (None: not through a relay)
    started: float  # the first try (the punch window counts from it)
    attempt: Attempt | None = None  # the current try's telemetry attempt
    connecting: Deferred[Any] | None = None  # the current try's connect(), while in progress
    punching: bool = False  # the current try dials a punched hint from our listening port
    plan: PunchPlan | None = None  # a punched hint's: its tries' TTLs and retries
    retry: IDelayedCall | None = None  # the next try, while one is due
    over: bool = False  # a direct dial that failed for good, or whose connection closed

    @property
    def relay(self) -> RelayEndpoint | None:
        """The relay this dial goes through (None for a direct or Tor dial)."""
        return self.hint if self.via_relay else None


#: ``build(dial)``: the Connector's L2 protocol for the TCP connection a dial made
BuildProtocol = Callable[[Dial], DilatedConnectionProtocol]


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
        self._rng = random.Random()  # punch retry spacing
        self._expiry = ExpiryProbe(reactor, LOW_TTLS[0])  # do low-TTL first SYNs survive?
        self._dials: list[Dial] = []  # every dial of this generation, in the order started
        self.deferred_relays: list[RelayEndpoint] = []
        self._relay_timer: IDelayedCall | None = None
        self._relays_started = False
        self._relays_held_until = 0.0  # (hold_relays) no relay dial before then
        self._used_relays: set[RelayEndpoint] = set()
        #: the schedule of background dials, once the generation selected a relayed link
        self._background: RetrySchedule | None = None
        self._background_timer: IDelayedCall | None = None

    @property
    def busy(self) -> bool:
        """A dial is in progress, relays wait for their delay, or a punch retry is due."""
        return bool(self.deferred_relays) or any(
            d.connecting is not None or d.retry is not None for d in self._dials
        )

    @property
    def direct_outstanding(self) -> int:
        """Direct dials not over yet (connecting, retrying, or their connection still open)."""
        return sum(1 for d in self._dials if not d.via_relay and not d.over)

    @property
    def punch_retries(self) -> set[IDelayedCall]:
        """The punch retries due."""
        return {d.retry for d in self._dials if d.retry is not None}

    @property
    def in_background(self) -> bool:
        """Whether this Dialer dials direct hints again for a path upgrade."""
        return self._background is not None

    @property
    def direct_dials(self) -> list[Dial]:
        """The direct dials of this generation (one per hint of the peer's)."""
        return [d for d in self._dials if not d.via_relay]

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
        dialing = {d.hint for d in self._dials}
        for d in direct:
            if isinstance(d, TorTCPV1Hint) and s.tor is None:
                continue
            status.append(DilationHint(hint_url(d), True))
            if d not in dialing:  # a hint published again (after a network change)
                self._dial(d, via_relay=False)
            made_direct = True
        if self._background is not None:  # a path upgrade: no relay any more
            fresh = []
        self._used_relays.update(fresh)
        status.extend(DilationHint(hint_url(h), False) for h in fresh)
        held = self._relays_held_until > self._reactor.seconds() and not self._relays_started
        if (made_direct and not s.no_listen and not self._relays_started) or held:
            self.deferred_relays.extend(fresh)
            if self._relay_timer is None:
                self._relay_timer = self._reactor.callLater(s.relay_delay, self._start_relays)
        else:
            for h in fresh:
                self._dial(h, via_relay=True)
        if status:
            self._hint_status(status)

    def hold_relays(self, seconds: float) -> None:
        """Dial no relay for ``seconds`` from now (relay hints wait, as those deferred for
        direct ones do); relays dialed already go on. Nothing once relays started."""
        if self._relays_started or self._closed or self._background is not None:
            return
        self._relays_held_until = self._reactor.seconds() + seconds
        if self._relay_timer is not None and self._relay_timer.active():
            self._relay_timer.cancel()
        self._relay_timer = self._reactor.callLater(seconds, self._start_relays)

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
            self._dial(h, via_relay=True)

    def _dial(self, hint: RelayEndpoint, *, via_relay: bool) -> None:
        s = self._settings
        relay_line = None
        if via_relay:
            relay_line = relay_handshake_line(derive_relay_token(s.dilation_key), s.side)
        description = describe_outbound(hint, via_relay=via_relay, tor=s.tor is not None)
        dial = Dial(hint, via_relay, description, relay_line, self._reactor.seconds())
        self._dials.append(dial)
        self._try(dial)

    def _try(self, dial: Dial) -> None:
        """Dial ``dial``'s hint (its first try, or a punch retry)."""
        s = self._settings
        hint, via_relay = dial.hint, dial.via_relay
        timeout = (
            min(s.handshake_timeout, RELAY_CONNECT_TIMEOUT) if via_relay else s.handshake_timeout
        )
        if self._background is not None:
            timeout = min(timeout, BACKGROUND_CONNECT_TIMEOUT)
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
                timeout=timeout,
                bindAddress=makeBinding(*local, reuseAddress=True, reusePort=True),
            )
        elif local is None:
            endpoint = _tcp_client_endpoint(self._reactor, hint, timeout)
        log = self._attempt_log
        attempt = dial.attempt = None
        if log is not None:
            attempt = dial.attempt = log.started(_hint_type(hint, via_relay), "outbound")
        factory = _OutboundFactory(self._build, dial)
        d: Deferred[Any]
        if endpoint is not None:
            d = endpoint.connect(factory)
        else:  # a punched hint: see selection.punch_schedule
            assert local is not None and punchable is not None
            if dial.plan is None:
                dial.plan = PunchPlan(dial.started, self._rng)
            d = self._punched_try(dial.plan, punchable, local, timeout, factory)
        dial.connecting = d
        dial.punching = punched

        def done(result: object) -> None:
            dial.connecting = None  # this try is the dial's latest: a retry follows a failure
            dial.punching = False
            if isinstance(result, Failure):
                if log is not None and attempt is not None:
                    log.connect_failed(attempt, result)
                retrying = dial.plan is not None and self._retry_punch(dial, result)
                if not retrying:
                    self.dial_over(dial)
                _log.debug(
                    "attempt {desc} failed: {why}",
                    desc=dial.description,
                    why=result.getErrorMessage(),
                )

        d.addBoth(done)

    def _punched_try(
        self,
        plan: PunchPlan,
        hint: TCPHint,
        local: tuple[str, int],
        timeout: float,
        factory: _OutboundFactory,
    ) -> Deferred[Any]:
        """A try of a punched hint from ``local``, its first SYN's TTL as ``plan`` says: one
        that would have a low TTL if such a connect survives here waits for the expiry probe
        to know; the others start the probe (for the tries after a refusal) and dial at
        once."""
        known = self._expiry.known(hint.hostname)
        if known is not None and plan.verdict is None:
            plan.probed(known)
        waiting: Deferred[Any]
        if plan.wants_verdict:
            waiting = self._expiry.verdict(hint.hostname, hint.port, local[0])
        else:
            self._expiry.start(hint.hostname, hint.port, local[0])
            waiting = succeed(None)

        def dial(verdict: Verdict | None) -> Deferred[Any]:
            if verdict is not None:
                plan.probed(verdict)
            ttl = plan.dial(self._reactor.seconds())
            endpoint = punched_endpoint(
                self._reactor, hint.hostname, hint.port, local, ttl=ttl, timeout=timeout
            )
            return endpoint.connect(factory)

        return waiting.addCallback(dial)

    def _retry_punch(self, dial: Dial, failure: Failure) -> bool:
        """Dial the punched hint of ``dial`` from the listening port again when its plan says
        so (its try failed with ``failure``; the plan learns from it in the background too,
        where the background schedule makes the tries); whether it will be."""
        assert dial.plan is not None
        outcome = outcome_of(failure, low_ttl=dial.plan.last_ttl is not None)
        now = self._reactor.seconds()
        delay = dial.plan.again(outcome, now)
        if self._background is not None and not dial.plan.retries_in_background(outcome, now):
            return False
        if self._closed or delay is None:
            return False

        def again() -> None:
            dial.retry = None
            if self._closed:
                return
            self._try(dial)

        dial.retry = self._reactor.callLater(delay, again)
        return True

    def dial_over(self, dial: Dial) -> None:
        """``dial`` failed for good, or the connection it made closed (the Connector says so):
        a direct dial is not outstanding any more (once), and relays are due once no direct
        dial is left. A relay dial's end changes nothing here."""
        if dial.via_relay or dial.over:
            return
        dial.over = True
        if self.direct_outstanding == 0 and self.deferred_relays and not self._selected():
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
        for dial in self._dials:
            if dial.retry is not None:
                if dial.retry.active():
                    dial.retry.cancel()
                dial.retry = None
                self.dial_over(dial)  # its next try is the schedule's (over: tried again)
            if dial.via_relay and dial.connecting is not None:
                d, dial.connecting = dial.connecting, None
                d.cancel()
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
        """Try every direct dial again whose connection is not open: one still connecting is
        given up for a new try (its SYNs may have been lost while the path was blocked, and
        TCP retransmits them ever more slowly: a new try sends one now), unless it is a
        punched try with a low TTL younger than ``punch_schedule.LOW_TTL_HOLD``."""
        now = self._reactor.seconds()
        quick = self._background is not None and self._background.quick(now)
        for dial in self.direct_dials:
            crossing = dial.plan is not None and now - dial.plan.started < CROSSING_WINDOW
            if dial.plan is not None and (quick or crossing):
                dial.plan.burst(now)  # refused tries that need crossing SYNs: again soon
            if dial.plan is not None and dial.connecting is not None and dial.plan.holds(now):
                continue  # a low-TTL try, waiting for its SYN's retransmission to cross
            if dial.connecting is not None:
                d, dial.connecting = dial.connecting, None
                d.cancel()  # (it ends the dial: dial_over)
            elif not dial.over:
                continue  # its connection is open, in its handshake
            dial.over = False  # outstanding again, until this try fails or its connection ends
            self._try(dial)

    def dial_again(self, open_dials: set[Dial]) -> None:
        """(A Follower whose stock Leader stopped trying, :mod:`txdilation.selection.rekindle`)
        dial again every hint, direct or relay, whose latest dial is over: not connecting, no
        retry due, and its connection (one of ``open_dials`` while it is open) gone. Relays
        still waiting for their delay are left to it. Nothing once the race is over or in the
        background."""
        if self._closed or self._background is not None:
            return
        latest = {(dial.hint, dial.via_relay): dial for dial in self._dials}
        for dial in latest.values():
            if dial.connecting is not None or dial.retry is not None or dial in open_dials:
                continue
            dial.over = False  # outstanding again, until this try fails or its connection ends
            self._try(dial)

    def cancel_attempts(self) -> None:
        """The race is over: cancel every dial in progress (no punch retry follows)."""
        self._closed = True
        self._expiry.stop()
        for dial in self._dials:
            d, dial.connecting = dial.connecting, None
            if d is not None:
                d.cancel()

    def cancel_timers(self) -> None:
        """The race is over: cancel the relay delay and punch retries, forget deferred relays."""
        timers = [self._relay_timer, self._background_timer, *(d.retry for d in self._dials)]
        for timer in timers:
            if timer is not None and timer.active():
                timer.cancel()
        self._relay_timer = self._background_timer = None
        for dial in self._dials:
            dial.retry = None
            dial.punching = False
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
    noisy = False  # one factory per try: no "Starting/Stopping factory" log lines

    def __init__(self, build: BuildProtocol, dial: Dial) -> None:
        self.build = build
        self.dial = dial

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        p = self.build(self.dial)
        p.factory = self
        return p
