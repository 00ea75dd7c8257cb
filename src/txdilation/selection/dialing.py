"""L3: one generation's outbound dials to the peer's hints: direct, punched, Tor and relay.

A :class:`Dialer`, owned by the Connector, dials every direct hint of the peer's, highest
priority first, and relay hints at once when there is no direct hint to try (or we do not
listen), else after ``relay_delay`` seconds or once every direct dial failed; each dial is one
:class:`Dial` record, each try's endpoint :mod:`txdilation.selection.dial_endpoint`'s; under
``path-upgrade-v1``, :meth:`Dialer.go_on_in_background`. The story: docs/connectivity.md.

Invariants: after :meth:`Dialer.cancel_attempts` nothing is dialed any more; the same relay
endpoint is dialed once per generation (again only by :meth:`Dialer.dial_again`), none in the
background; a direct dial is outstanding from its first try until it fails for good or its
connection closes, and it ends once (:meth:`Dialer.dial_over`); every try is one telemetry
attempt when an ``AttemptLog`` is given.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._status import DilationHint

from txdilation.link.framer import relay_handshake_line
from txdilation.selection.attempts import AttemptLog
from txdilation.selection.dial_endpoint import (
    BuildProtocol,
    Dial,
    OutboundFactory,
    hint_type,
    punched_connect,
    route_for,
)
from txdilation.selection.hints import (
    Hint,
    RelayEndpoint,
    RelayV1Hint,
    TorTCPV1Hint,
    WebSocketHint,
    describe_outbound,
    hint_url,
)
from txdilation.selection.punch_dial import ExpiryProbe
from txdilation.selection.punch_schedule import (
    CROSSING_WINDOW,
    LOW_TTLS,
    PunchPlan,
    outcome_of,
)
from txdilation.selection.relays import RELAY_CONNECT_TIMEOUT, relays_to_dial
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, RetrySchedule
from txdilation.wire.keys import derive_relay_token
from txdilation.wire.timer import RestartableTimer

if TYPE_CHECKING:
    from txdilation.selection.connector_settings import ConnectorSettings

__all__ = ["BuildProtocol", "Dial", "Dialer"]

#: the connector's logger: the split into modules changes no log line
_log = Logger()


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
        self._relay_timer = RestartableTimer(reactor, self._start_relays)
        self._relays_started = False
        self._relays_held_until = 0.0  # (hold_relays) no relay dial before then
        self._used_relays: set[RelayEndpoint] = set()
        #: the schedule of background dials, once the generation selected a relayed link
        self._background: RetrySchedule | None = None
        self._background_timer = RestartableTimer(reactor, self._background_tick)

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
            if not self._relay_timer.pending:
                self._relay_timer.start(s.relay_delay)
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
        self._relay_timer.start(seconds)

    def _start_relays(self) -> None:
        """Relay attempts begin after the delay, or once every direct attempt has failed
        (never after :meth:`cancel_attempts`: the cancelled direct dials end there too)."""
        if self._closed:
            return
        self._relay_timer.cancel()
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
        route = route_for(
            self._reactor,
            hint,
            via_relay=via_relay,
            listen_port=self._bind_port(),
            listen_interface=s.network.listen_interface or None,
            tor=s.tor,
            timeout=timeout,
        )
        log = self._attempt_log
        attempt = dial.attempt = None
        if log is not None:
            attempt = dial.attempt = log.started(hint_type(hint, via_relay), "outbound")
        factory = OutboundFactory(self._build, dial)
        d: Deferred[Any]
        if route.endpoint is not None:
            d = route.endpoint.connect(factory)
        else:  # a punched hint: see selection.punch_schedule
            assert route.local is not None and route.punchable is not None
            if dial.plan is None:
                dial.plan = PunchPlan(dial.started, self._rng)
            d = punched_connect(
                self._reactor,
                self._expiry,
                dial.plan,
                route.punchable,
                route.local,
                timeout,
                factory,
            )
        dial.connecting = d
        dial.punching = route.punched

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
        dials; the direct hints are dialed again on ``schedule`` (see the module docstring).
        A punched dial refused by the peer's NAT keeps its retry that is due: where its plan
        relies on crossing SYNs, its tries go on as a burst (``punch_schedule``), since only
        their rate opens the path."""
        self._background = schedule
        self._relays_started = True  # none deferred will start
        self.deferred_relays.clear()
        self._relay_timer.cancel()
        now = self._reactor.seconds()
        for dial in self._dials:
            if dial.plan is not None and dial.retry is not None and dial.plan.refused:
                dial.plan.burst(now)  # its (crossing) tries go on, without a pause until the
                continue  # schedule's first try (both peers switch within a relay trip)
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
        now = self._reactor.seconds()
        delay = self._background.next_after(now) - now
        self._background_timer.start(delay)

    def _background_tick(self) -> None:
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
        self._relay_timer.cancel()
        self._background_timer.cancel()
        for dial in self._dials:
            if dial.retry is not None and dial.retry.active():
                dial.retry.cancel()
            dial.retry = None
            dial.punching = False
        self.deferred_relays.clear()
