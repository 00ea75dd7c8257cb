"""L3: one generation's race of connection hints, ending in the selection of one connection.

A :class:`Connector` listens and publishes hints, dials the peer's
(:class:`~txdilation.selection.dialing.Dialer`) and collects candidates; it is the facade and
the selection policy (``connector_machine`` over a
:class:`~txdilation.selection.race.ConnectorCore`; state-diagrams/connector.svg): the first
connection that works is taken, relayed or not, and a better one moved to later
(docs/connectivity.md; the policy in full: docs/module-notes.md).

Invariants: once a connection is selected for good or the connector stops, every other
connection, listener and pending attempt is closed or cancelled and later ones aborted (while
upgrading, only relay ones); the selected connection is the owner's, never closed here; a Tor
connector never listens nor upgrades; the held records are delivered right after the owner's
``connector_connection_made``; each dial and accepted connection is one telemetry attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from automat import TypeMachineBuilder
from twisted.logger import Logger
from wormhole import ipaddrs
from wormhole._interfaces import IDilationConnector
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.portmap.mapper import PortMapper
from txdilation.selection.advertise import Advertiser
from txdilation.selection.attempts import AttemptLog
from txdilation.selection.connector_settings import (
    DIRECT_GRACE,
    RELAY_DELAY,
    ConnectorSettings,
    IConnectorOwner,
    Purpose,
)
from txdilation.selection.dialing import Dialer
from txdilation.selection.hints import Hint, RelayV1Hint, encode_hint
from txdilation.selection.race import (
    PROVEN_GRACE,
    Candidate,
    ConnectorCore,
    ConnectorEvents,
    Holding,
)
from txdilation.selection.rekindle import Rekindler
from txdilation.selection.upgrade import RetrySchedule
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import ICandidateOwner, IDilationReactor
from txdilation.wire.machines import complete
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.roles import Role

__all__ = [
    "DIRECT_GRACE",
    "PROVEN_GRACE",
    "RELAY_DELAY",
    "Candidate",
    "Connector",
    "ConnectorEvents",
    "ConnectorSettings",
    "IConnectorOwner",
    "ipaddrs",
]

_log = Logger()


@implementer(ICandidateOwner, IDilationConnector)
class Connector:
    """One generation of connection attempts; see the module docstring."""

    def __init__(
        self,
        settings: ConnectorSettings,
        *,
        owner: IConnectorOwner,
        reactor: IDilationReactor,
        telemetry: Telemetry | None = None,
        eventually: Callable[..., object] | None = None,
        mapper: PortMapper | None = None,
    ) -> None:
        """
        :param settings: what to do (the same for every generation).
        :param owner: where hints and the selected connection go (the Manager's reports).
        :param reactor: IReactorTCP + IReactorTime (+ a thread pool for address discovery).
        :param telemetry: the session's telemetry; None records no attempts.
        :param eventually: ``eventually(f, *args)`` calls ``f(*args)`` on a later reactor
            turn, in order (stock's ``EventualQueue.eventually``; default: ``callLater(0)``):
            a candidate is taken on the turn after its KCM exchange, as stock takes it.
        :param mapper: the wormhole's port mapper, asked to map this generation's listener.
        """
        if eventually is None:
            eventually = lambda f, *a: reactor.callLater(0, f, *a)  # noqa: E731
        attempt_log = AttemptLog(telemetry, reactor) if telemetry is not None else None
        core = self._core = ConnectorCore(settings, owner, reactor, eventually, attempt_log)
        self._settings = settings
        self._advertiser = core.advertiser = Advertiser(
            settings,
            reactor,
            attempt_log=attempt_log,
            accept=lambda description, attempt: core.build(
                description, True, None, attempt, None, self
            ),
            publish=lambda hints: self.events.listener_ready(hints),
            punched=lambda: None,
            late=lambda: core.close_others(keep=core.selected),
            mapper=mapper,
            mapped=lambda: core.mapped() if settings.purpose is Purpose.RACE else None,
        )
        self._dialer = core.dialer = Dialer(
            settings,
            reactor,
            attempt_log=attempt_log,
            build=lambda d: core.build(
                d.description, not d.via_relay, d.relay_line, d.attempt, d, self
            ),
            bind_port=self._advertiser.punch_port,
            hint_status=lambda status: owner.hint_status(status),
            selected=lambda: core.selected is not None,
        )
        if settings.rekindle:
            core.rekindler = Rekindler(reactor, core.in_handshake, core.rekindle)
        self.events: ConnectorEvents = connector_machine(core)

    @classmethod
    def get_connection_abilities(cls) -> list[dict[str, str]]:
        """The ``dilation-abilities`` we advertise in the ``version`` message (as stock)."""
        return [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]

    @property
    def role(self) -> Role:
        return self._settings.role

    @property
    def selected(self) -> DilatedConnectionProtocol | None:
        """The selected connection, once there is one."""
        return self._core.selected

    @property
    def candidates(self) -> int:
        """How many connections reached the selectable point before the race ended."""
        return self._core.count

    @property
    def upgrading(self) -> bool:
        """After selecting a relayed link, this connector goes on looking for a direct path
        (``path-upgrade-v1``, or reachability probes of a stock peer): the owner keeps it
        until the link goes, and stops it then."""
        return self._core.looking

    @property
    def peer_hints(self) -> list[Hint]:
        """The peer's hints of this generation, in the order they came."""
        return self._core.peer_hints

    @property
    def busy(self) -> bool:
        """Something may still produce a connection: an attempt in progress, a candidate in
        its handshake, relay attempts waiting for their delay, a listener being retried.
        (Our listener alone does not count: the peer may have given up on it.)"""
        retrying = self._advertiser.listen_retry is not None
        return bool(self._dialer.busy or self._core.candidates or retrying)

    # --- starting, hints ---

    def start(self) -> None:
        """Listen (when allowed), publish relay hints and connect to our own relay. A
        standby connector only dials the relays (ours now, the peer's as they are given); an
        upgrade connector listens and goes on at once as after a relayed selection."""
        s = self._settings
        if s.purpose is Purpose.STANDBY:
            self._dialer.use_hints(list(s.relay_hints))
            return
        if not s.no_listen and s.tor is None:
            self._advertiser.start()
        if s.purpose is Purpose.UPGRADE:
            self._core.looking = True
            self._dialer.go_on_in_background(RetrySchedule(self._core.reactor.seconds()))
            self.events.keep_looking()
            return
        if s.relay_hints:
            self._core.owner.send_hints([encode_hint(h) for h in s.relay_hints])
            self._dialer.use_hints(list(s.relay_hints))
        if self._core.rekindler is not None:
            self._core.rekindler.start()

    def network_changed(self) -> None:
        """The host's addresses or routes changed while this generation connects (or looks
        for a direct path): direct hints for addresses found now and not published yet go to
        the peer, and background dials start over at once. Nothing before the listener is up,
        nor once the race is over."""
        self._advertiser.network_changed()
        self._dialer.dial_again_now()

    def got_hints(self, hints: list[Hint]) -> None:
        """Hints arrived from the peer (the manager filters stale generations; a standby
        connector uses the relay hints only)."""
        core = self._core
        if self._settings.purpose is Purpose.STANDBY:
            hints = [h for h in hints if isinstance(h, RelayV1Hint)]
        core.peer_hints.extend(hints)
        if core.prober is not None:
            core.prober.add(hints)
        self.events.hints_received(hints)

    # --- connections (ICandidateOwner) ---

    def candidate_ready(self, connection: Any) -> None:
        candidates = self._core.candidates
        candidate = candidates.get(connection)
        if candidate is None:  # a connection this connector did not build (tests, hooks)
            candidate = candidates[connection] = Candidate(connection)
        self.events.candidate_ready(candidate)

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        core = self._core
        core.advertiser.unauthenticated.discard(connection)
        candidate = core.candidates.pop(connection, None)  # None once the race ended
        if candidate is not None:
            candidate.in_line = False
            if candidate.attempt is not None and core.attempt_log is not None:
                core.attempt_log.closed(candidate.attempt, reason)
        _log.debug(
            "candidate {desc} closed: {reason}",
            desc=connection.description,
            reason=reason.message,
            cause=reason.cause.value,
        )
        if candidate is None:
            return
        if candidate.dial is not None:
            core.dialer.dial_over(candidate.dial)
        self.events.candidate_gone(candidate)


def _start_holding(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> Holding:
    """Enter ``holding`` with ``candidate``: the grace starts now."""
    since = c.reactor.seconds()
    timer = c.reactor.callLater(c.relay_grace(), events.grace_expired)
    return Holding([candidate], since, timer)


def _take(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
    """Select ``candidate``. A relayed start with a peer that moves links goes on to
    ``upgrading``: the behaviour makes that ``keep_looking`` follow-up first, and Automat runs
    it once this transition is done (docs/architecture.md, "state first, then events")."""
    if c.upgrades(candidate):
        events.keep_looking()
    c.select(candidate)


def _build_connector_machine() -> Callable[[ConnectorCore], ConnectorEvents]:
    b = TypeMachineBuilder(ConnectorEvents, ConnectorCore)
    connecting = b.state("connecting")
    holding = b.state("holding", _start_holding)
    connected = b.state("connected")
    upgrading = b.state("upgrading")
    stopped = b.state("stopped")
    E = ConnectorEvents

    @connecting.upon(E.listener_ready).loop()
    @holding.upon(E.listener_ready, nodata=True).loop()
    @upgrading.upon(E.listener_ready).loop()
    def publish_hints(events: ConnectorEvents, c: ConnectorCore, hints: list[Hint]) -> None:
        c.owner.send_hints([encode_hint(h) for h in hints])

    @connecting.upon(E.hints_received).loop()
    @holding.upon(E.hints_received, nodata=True).loop()
    @upgrading.upon(E.hints_received).loop()
    def use_hints(events: ConnectorEvents, c: ConnectorCore, hints: list[Hint]) -> None:
        c.dialer.use_hints(hints)

    @connecting.upon(E.candidate_ready).loop()
    @holding.upon(E.candidate_ready, nodata=True).loop()
    def count_and_line_up(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.count += 1
        c.line_up(events, candidate)

    @upgrading.upon(E.candidate_ready).loop()
    def line_up_for_the_move(
        events: ConnectorEvents, c: ConnectorCore, candidate: Candidate
    ) -> None:
        c.line_up(events, candidate)

    @connected.upon(E.candidate_ready).loop()
    @stopped.upon(E.candidate_ready).loop()
    def line_up_late(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.line_up(events, candidate)  # to be dropped on its turn

    @connecting.upon(E.decisive_candidate).to(connected)
    @connecting.upon(E.relay_candidate).to(connected)
    def select(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        _take(events, c, candidate)

    @holding.upon(E.decisive_candidate).to(connected)
    @holding.upon(E.relay_candidate).to(connected)
    def select_instead(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        holding.stop_timer()
        _take(events, c, candidate)

    @connecting.upon(E.tentative_candidate).to(holding)
    def hold(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        """(The state's data holds it: see ``_start_holding``.)"""

    @holding.upon(E.tentative_candidate).loop()
    def hold_another(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        holding.held.append(candidate)

    @holding.upon(E.candidate_gone).loop()
    def forget_held(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        if candidate in holding.held:
            holding.held.remove(candidate)
            if not holding.held:
                events.tentative_gone()  # (a follow-up: runs once this transition is done)

    @holding.upon(E.grace_expired).to(connected)
    def select_held(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        _take(events, c, holding.held[0])

    @connected.upon(E.keep_looking).to(upgrading)
    @connecting.upon(E.keep_looking).to(upgrading)
    def look_for_direct(events: ConnectorEvents, c: ConnectorCore) -> None:
        """The relayed link is the owner's (selected here, or by an earlier connector of the
        generation: ``Purpose.UPGRADE``); this connector goes on with direct paths."""

    @upgrading.upon(E.decisive_candidate).to(connected)
    def upgrade(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.upgrade(candidate)

    @upgrading.upon(E.tentative_candidate).loop()
    @upgrading.upon(E.relay_candidate).loop()
    def refuse_relay(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.candidates.pop(candidate.connection, None)
        candidate.connection.abort()  # (never a relay again once one carries the link)

    @holding.upon(E.tentative_gone).to(connecting)
    def release(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        holding.stop_timer()

    @connecting.upon(E.stop).to(stopped)
    @connected.upon(E.stop).to(stopped)
    @upgrading.upon(E.stop).to(stopped)
    def stop_everything(events: ConnectorEvents, c: ConnectorCore) -> None:
        c.stop_looking()
        c.close_others(keep=c.selected)

    @holding.upon(E.stop).to(stopped)
    def stop_holding(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        holding.stop_timer()
        c.close_others(keep=c.selected)

    # Late arrivals after selection are closed at once (stock defect 9); a direct one that
    # completed while a stock peer's link is relayed proves a direct path first.
    @connected.upon(E.decisive_candidate).loop()
    @connected.upon(E.tentative_candidate).loop()
    @connected.upon(E.relay_candidate).loop()
    def drop_late(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        connection, selected = candidate.connection, c.selected
        if c.looking and connection.is_direct and selected is not None and not selected.is_direct:
            c.proven(f"{connection.description} completed its handshake")
        connection.abort()

    @stopped.upon(E.decisive_candidate).loop()
    @stopped.upon(E.tentative_candidate).loop()
    @stopped.upon(E.relay_candidate).loop()
    def drop_after_stop(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        candidate.connection.abort()

    # Everything else is a documented no-op: hints and listener news after selection or
    # stop, stray timer inputs, candidates gone while none is held, a repeated stop.
    every = (connecting, holding, connected, upgrading, stopped)
    complete(b, every)
    return b.build()


connector_machine = _build_connector_machine()
