"""L3: one generation's race of connection hints, ending in the selection of one connection.

A :class:`Connector` listens (unless told not to, or over Tor) and publishes direct hints
(:class:`~txdilation.selection.advertise.Advertiser`), publishes relay hints, dials the peer's
hints (:class:`~txdilation.selection.dialing.Dialer`: direct, punched, Tor and relay, with the
relay delay), and collects candidates: L2 connections whose KCM exchange reached the point where
they may be selected. This module is the facade, the candidates and the selection policy. Each
connection of the race is one :class:`Candidate` record from the moment its TCP connection is
made (the dial it came from, its telemetry attempt, whether it waits for its turn), in one
table keyed by the connection.

Selection policy (module-level Automat machine ``connector_machine``):
- the Follower takes the first connection on which the Leader's KCM arrived (the wire rule);
- the Leader takes a direct candidate at once; a relay candidate is held for
  ``direct_grace`` seconds (``punch.PUNCH_GRACE`` while a dial to a punched hint of the
  peer's is under way) in case a direct one completes too (direct beats relay when both
  become viable at about the same time), then taken; when no direct connection can come any
  more (no listener, no direct attempt or candidate left) it is taken at once.

Invariants: once a connection is selected or the connector stops, every other connection,
listener and pending attempt is closed or cancelled, and any connection that completes later
is aborted; a Tor connector never listens; the selected relay endpoint, if any, is reported to
the owner with the selection, and the selected connection delivers the records it held right
after the owner's ``connector_connection_made``.

Given the session's :class:`~txdilation.telemetry.Telemetry`, every outbound dial (each direct,
Tor or relay hint tried) and every connection our listener accepts is one telemetry attempt,
followed by an :class:`~txdilation.selection.attempts.AttemptLog` (outcomes and durations are
defined there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from typing import Protocol as TypingProtocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from wormhole import ipaddrs
from wormhole._interfaces import IDilationConnector
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.selection.advertise import Advertiser
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.connector_settings import (
    DIRECT_GRACE,
    RELAY_DELAY,
    ConnectorSettings,
    IConnectorOwner,
)
from txdilation.selection.dialing import Dial, Dialer
from txdilation.selection.hints import Hint, RelayEndpoint, encode_hint, hint_url
from txdilation.selection.relays import RelayUsed, relay_index, relay_transport
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import ICandidateOwner
from txdilation.wire.machines import complete
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.roles import LEADER, Role

__all__ = [
    "DIRECT_GRACE",
    "RELAY_DELAY",
    "Candidate",
    "Connector",
    "ConnectorSettings",
    "IConnectorOwner",
    "ipaddrs",
]

_log = Logger(namespace="txdilation.selection.connector")


class ConnectorEvents(TypingProtocol):
    """Inputs of one generation's connector."""

    def listener_ready(self, hints: list[Hint]) -> None:
        """Our listener is up; these direct hints describe it."""

    def hints_received(self, hints: list[Hint]) -> None:
        """The peer published hints."""

    def decisive_candidate(self, candidate: Candidate) -> None:
        """A candidate to select at once (any for the Follower, a direct one for the Leader)."""

    def tentative_candidate(self, candidate: Candidate) -> None:
        """A relay candidate the Leader holds briefly in case a direct one appears."""

    def tentative_gone(self) -> None:
        """Every held relay candidate closed before the grace period ended."""

    def grace_expired(self) -> None:
        """The grace period for a held relay candidate ended."""

    def stop(self) -> None:
        """Stop this generation: close everything that is not selected."""


@dataclass(eq=False, slots=True)
class Candidate:
    """One connection of the race, from its TCP connection to the race's end or its own."""

    connection: DilatedConnectionProtocol
    dial: Dial | None = None  # the outbound dial that made it (None: accepted, or not ours)
    attempt: Attempt | None = None  # its telemetry attempt
    in_line: bool = False  # ready to be selected, waiting for its turn (a later reactor turn)

    @property
    def relay(self) -> RelayEndpoint | None:
        """The relay it goes through (None: direct)."""
        return self.dial.relay if self.dial is not None else None


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
        #: the race's connections (not the selected one once selected, nor any once it ended)
        self._candidates: dict[DilatedConnectionProtocol, Candidate] = {}
        self._held: list[Candidate] = []
        self._grace_timer: IDelayedCall | None = None
        self.selected: DilatedConnectionProtocol | None = None
        self._finished = False  # selected or stopped: no more listeners or attempts
        self._held_since: float | None = None  # when the first relay candidate was held
        self._attempt_log = AttemptLog(telemetry, reactor) if telemetry is not None else None
        self._advertiser = Advertiser(
            settings,
            reactor,
            attempt_log=self._attempt_log,
            accept=self._accepted,
            publish=lambda hints: self.events.listener_ready(hints),
            punched=lambda: self._dialer.punched_hints_published(),
            late=lambda: self._close_others(keep=self.selected),
        )
        self._dialer = Dialer(
            settings,
            reactor,
            attempt_log=self._attempt_log,
            build=self._dialed,
            bind_port=self._advertiser.punch_port,
            hint_status=lambda status: self._owner.hint_status(status),
            punch_dial_started=self._extend_grace,
            selected=lambda: self.selected is not None,
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
        retrying = self._advertiser.listen_retry is not None
        return bool(self._dialer.busy or self._candidates or self._held or retrying)

    # --- starting, hints ---

    def start(self) -> None:
        """Listen (when allowed), publish relay hints and connect to our own relay."""
        s = self._settings
        if not s.no_listen and s.tor is None:
            self._advertiser.start()
        if s.relay_hints:
            self._owner.send_hints([encode_hint(h) for h in s.relay_hints])
            self._dialer.use_hints(list(s.relay_hints))

    def network_changed(self) -> None:
        """The host's addresses or routes changed while this generation connects: direct
        hints for addresses found now and not published yet go to the peer. Nothing before
        the listener is up, nor after selection."""
        self._advertiser.network_changed()

    def got_hints(self, hints: list[Hint]) -> None:
        """Hints arrived from the peer (the manager filters stale generations)."""
        self.events.hints_received(hints)

    def _extend_grace(self) -> None:
        """A punched dial started while a relay candidate is held: hold it longer if the
        grace now ends later."""
        timer = self._grace_timer
        if timer is None or not timer.active():
            return
        grace = self._dialer.relay_grace(self._held_since)
        if self._reactor.seconds() + grace > timer.getTime():
            timer.reset(grace)

    # --- connections (ICandidateOwner) ---

    def _dialed(self, dial: Dial) -> DilatedConnectionProtocol:
        """The L2 protocol for the TCP connection ``dial`` made."""
        return self._build(
            dial.description, not dial.via_relay, dial.relay_line, dial.attempt, dial
        )

    def _accepted(self, description: str, attempt: Attempt | None) -> DilatedConnectionProtocol:
        """The L2 protocol for a TCP connection our listener accepted."""
        return self._build(description, True, None, attempt, None)

    def _build(
        self,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None,
        dial: Dial | None,
    ) -> DilatedConnectionProtocol:
        """The L2 protocol for a new TCP connection, and its candidate record."""
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
        log = self._attempt_log
        if attempt is not None and log is not None:
            log.connected(attempt)
        self._candidates[p] = Candidate(p, dial, attempt if log is not None else None)
        return p

    def candidate_ready(self, connection: Any) -> None:
        candidate = self._candidates.get(connection)
        if candidate is None:  # a connection this connector did not build (tests, hooks)
            candidate = self._candidates[connection] = Candidate(connection)
        self._advertiser.unauthenticated.discard(connection)
        if candidate.attempt is not None and self._attempt_log is not None:
            self._attempt_log.ready(candidate.attempt)
        if not self._finished:
            self.candidates += 1
        # Taken on the next turn, as stock's connector takes it (through its eventual queue):
        # the Leader's KCM, and so its first records, then go out in the order and the TCP
        # segments stock's would (applications such as fowl's tests depend on that timing).
        candidate.in_line = True
        self._eventually(self._consider, candidate)

    def _consider(self, candidate: Candidate) -> None:
        if not candidate.in_line:  # lost meanwhile, or the race ended
            return
        candidate.in_line = False
        direct = candidate.connection.is_direct
        if self.role is LEADER and not direct and self._direct_still_possible():
            self.events.tentative_candidate(candidate)
        else:
            self.events.decisive_candidate(candidate)

    def _direct_still_possible(self) -> bool:
        """A direct connection may yet complete: we listen, a direct attempt is pending, or a
        direct candidate is in its handshake. (If not, a relay candidate is taken at once:
        holding it would only widen the window in which a flaky link can cut it.)"""
        return bool(
            self._advertiser.listeners
            or self._dialer.direct_outstanding > 0
            or any(c.connection.is_direct for c in self._candidates.values())
        )

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        self._advertiser.unauthenticated.discard(connection)
        candidate = self._candidates.pop(connection, None)  # None once the race ended
        if candidate is not None:
            candidate.in_line = False
            if candidate.attempt is not None and self._attempt_log is not None:
                self._attempt_log.closed(candidate.attempt, reason)
        _log.debug(
            "candidate {desc} closed: {reason}",
            desc=connection.description,
            reason=reason.message,
            cause=reason.cause.value,
        )
        if candidate is None:
            return
        if candidate.dial is not None:
            self._dialer.dial_over(candidate.dial)
        if candidate in self._held:
            self._held.remove(candidate)
            if not self._held:
                self.events.tentative_gone()

    # --- teardown helpers ---

    def _close_others(self, keep: DilatedConnectionProtocol | None) -> None:
        self._finished = True
        others = [c for c in self._candidates.values() if c.connection is not keep]
        if self._attempt_log is not None:
            self._attempt_log.race_over(c.attempt for c in others if c.attempt is not None)
        self._advertiser.stop_listening()
        self._dialer.cancel_attempts()
        if self._grace_timer is not None and self._grace_timer.active():
            self._grace_timer.cancel()
        self._grace_timer = None
        self._advertiser.cancel_retry()
        self._dialer.cancel_timers()
        for c in others:  # the held ones among them
            c.in_line = False
            c.connection.abort()
        self._candidates.clear()
        self._held.clear()

    def _select(self, candidate: Candidate) -> None:
        connection = candidate.connection
        self.selected = connection
        self._candidates.pop(connection, None)
        if candidate.attempt is not None and self._attempt_log is not None:
            self._attempt_log.selected(candidate.attempt)
        self._close_others(keep=connection)
        link = self._owner.link_for(connection)
        connection.events.select(link)
        endpoint = candidate.relay
        relay = None
        if endpoint is not None:
            relay = RelayUsed(
                hint_url(endpoint),
                relay_transport(endpoint),
                relay_index(self._settings.relay_hints, endpoint),
            )
        self._owner.connector_connection_made(link, self.candidates, relay)
        connection.deliver_held()


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
        c._dialer.use_hints(hints)

    @connecting.upon(E.decisive_candidate).to(connected)
    @holding.upon(E.decisive_candidate).to(connected)
    def select(events: ConnectorEvents, c: Connector, candidate: Candidate) -> None:
        c._select(candidate)

    @connecting.upon(E.tentative_candidate).to(holding)
    def hold(events: ConnectorEvents, c: Connector, candidate: Candidate) -> None:
        c._held.append(candidate)
        c._held_since = c._reactor.seconds()
        c._grace_timer = c._reactor.callLater(
            c._dialer.relay_grace(c._held_since), events.grace_expired
        )

    @holding.upon(E.tentative_candidate).loop()
    def hold_another(events: ConnectorEvents, c: Connector, candidate: Candidate) -> None:
        c._held.append(candidate)

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
    def drop_late(events: ConnectorEvents, c: Connector, candidate: Candidate) -> None:
        candidate.connection.abort()

    # Everything else is a documented no-op: hints and listener news after selection or
    # stop, stray timer inputs, a repeated stop.
    every = (connecting, holding, connected, stopped)
    complete(b, every, [getattr(E, n) for n in vars(E) if not n.startswith("_")])
    return b.build()


connector_machine = _build_connector_machine()
