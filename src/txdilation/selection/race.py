"""L3: one generation's race as its connector machine sees it: the inputs, one record per
connection, and the core the machine's behaviours work on.

:class:`~txdilation.selection.connector.Connector` is the facade and builds
``connector_machine`` over a :class:`ConnectorCore`. Each connection is one :class:`Candidate`
from its TCP connection on, in one table keyed by the connection; the ``holding`` state's
:class:`Holding` owns the relay candidates held and their grace timer. After a relayed
selection the core may go on ``looking`` for a direct path: ``path-upgrade-v1``
(:meth:`ConnectorCore.upgrade`) or a stock peer's probes (:attr:`ConnectorCore.prober`).

Invariants: a connection is in the table from its TCP connection until it closes, is selected,
or the race ends (then the table is empty, and every connection but the selected one is
aborted); a candidate is considered at most once per time it became ready, and never once it
closed or the race ended; the Leader's held candidates are taken in the order they were held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.selection.advertise import Advertiser
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.connector_settings import ConnectorSettings, IConnectorOwner, Purpose
from txdilation.selection.dial_endpoint import Dial
from txdilation.selection.dialing import Dialer
from txdilation.selection.hints import Hint, RelayEndpoint, encode_hint, hint_url
from txdilation.selection.probe import ReachabilityProber
from txdilation.selection.rekindle import Rekindler
from txdilation.selection.relays import RelayUsed, relay_index, relay_transport
from txdilation.selection.upgrade import RetrySchedule
from txdilation.wire.contracts import ICandidateOwner, IDilationReactor
from txdilation.wire.roles import LEADER

_log = Logger()

__all__ = [
    "MAPPED_GRACE",
    "PROVEN_GRACE",
    "Candidate",
    "ConnectorCore",
    "ConnectorEvents",
    "Holding",
]

PROVEN_GRACE = 3.0
"""Seconds a Leader holds a relay candidate, while a direct one may still come, in a generation
started because a direct path proved to work (``prefer_direct``)."""
MAPPED_GRACE = 1.0
"""Seconds after our mapped hint went out (``portmap``) during which, with a stock peer (which
cannot move a link later), the Leader holds a relay candidate and the Follower holds back its
relay dials: the peer's dial to our port forward comes within a round trip or two."""


class ConnectorEvents(TypingProtocol):
    """Inputs of one generation's connector."""

    def listener_ready(self, hints: list[Hint]) -> None:
        """Our listener is up; these direct hints describe it."""

    def hints_received(self, hints: list[Hint]) -> None:
        """The peer published hints."""

    def candidate_ready(self, candidate: Candidate) -> None:
        """A connection's KCM exchange reached the point where it may be selected."""

    def decisive_candidate(self, candidate: Candidate) -> None:
        """A direct candidate to select at once."""

    def relay_candidate(self, candidate: Candidate) -> None:
        """A relayed candidate to select at once, unless a link is selected already."""

    def tentative_candidate(self, candidate: Candidate) -> None:
        """A relay candidate the Leader holds briefly in case a direct one appears."""

    def candidate_gone(self, candidate: Candidate) -> None:
        """A candidate closed before it was selected."""

    def tentative_gone(self) -> None:
        """Every held relay candidate closed before the grace period ended."""

    def grace_expired(self) -> None:
        """The grace period for a held relay candidate ended."""

    def stop(self) -> None:
        """Stop this generation: close everything that is not selected."""

    def keep_looking(self) -> None:
        """The relayed link just selected is only a start: look for a direct path."""


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


@dataclass(eq=False)
class Holding:
    """The ``holding`` state's data: the relay candidates held (the first is taken when the
    grace ends), since when, and the grace timer."""

    held: list[Candidate]
    since: float
    timer: IDelayedCall

    def stop_timer(self) -> None:
        if self.timer.active():
            self.timer.cancel()


@dataclass(eq=False)
class ConnectorCore:
    """What every state of one generation's connector shares (the machine's core)."""

    settings: ConnectorSettings
    owner: IConnectorOwner
    reactor: IDilationReactor
    eventually: Callable[..., object]
    attempt_log: AttemptLog | None
    advertiser: Advertiser = field(init=False)
    dialer: Dialer = field(init=False)
    #: the race's connections (not the selected one once selected, nor any once it ended)
    candidates: dict[DilatedConnectionProtocol, Candidate] = field(default_factory=dict)
    selected: DilatedConnectionProtocol | None = None
    count: int = 0  # connections that reached the selectable point before the race ended
    #: after a relayed selection: still looking for a direct path (upgrading, or probing a
    #: stock peer); the owner keeps the connector and stops it when the link goes
    looking: bool = False
    #: the peer's hints of this generation, in the order they came
    peer_hints: list[Hint] = field(default_factory=list)
    prober: ReachabilityProber | None = None
    #: (Follower, a stock Leader) publishes our hints and dials again while the race is stuck
    rekindler: Rekindler | None = None
    #: when our mapped hint (a port forward at our router) went out, if it did
    mapped_since: float | None = None

    def build(
        self,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None,
        dial: Dial | None,
        owner: ICandidateOwner,
    ) -> DilatedConnectionProtocol:
        """The L2 protocol for a new TCP connection, and its candidate record."""
        s = self.settings
        p = DilatedConnectionProtocol(
            role=s.role,
            dilation_key=s.dilation_key,
            owner=owner,
            description=description,
            is_direct=is_direct,
            relay_line=relay_line,
            clock=self.reactor,
            max_record_size=s.max_record_size,
            handshake_timeout=s.handshake_timeout,
        )
        log = self.attempt_log
        if attempt is not None and log is not None:
            log.connected(attempt)
        self.candidates[p] = Candidate(p, dial, attempt if log is not None else None)
        return p

    def line_up(self, events: ConnectorEvents, candidate: Candidate) -> None:
        """``candidate`` may be selected: it is considered on the next turn, as stock's
        connector takes it (through its eventual queue): the Leader's KCM, and so its first
        records, then go out in the order and the TCP segments stock's would (applications
        such as fowl's tests depend on that timing)."""
        self.advertiser.unauthenticated.discard(candidate.connection)
        if candidate.attempt is not None and self.attempt_log is not None:
            self.attempt_log.ready(candidate.attempt)
        candidate.in_line = True
        self.eventually(self.consider, events, candidate)

    def consider(self, events: ConnectorEvents, candidate: Candidate) -> None:
        """``candidate``'s turn: a direct one is taken; the Leader holds a relay one for
        :meth:`relay_grace` (when it is not 0); any other is taken."""
        if not candidate.in_line:  # lost meanwhile, or the race ended
            return
        candidate.in_line = False
        if candidate.connection.is_direct:
            events.decisive_candidate(candidate)
        elif self.settings.role is LEADER and self.relay_grace() > 0:
            events.tentative_candidate(candidate)
        else:
            events.relay_candidate(candidate)

    def relay_grace(self) -> float:
        """How long the Leader holds a relay candidate now (0: take it at once): for a direct
        connection already in its handshake (``direct_grace``), or, in a generation that
        prefers a direct path that proved to work, while a direct one may still come, or, with
        a stock peer, for what is left of :data:`MAPPED_GRACE` after our mapped hint."""
        s = self.settings
        if s.prefer_direct and self.direct_still_possible():
            return PROVEN_GRACE
        if self.mapped_since is not None and not s.path_upgrade:
            left = self.mapped_since + MAPPED_GRACE - self.reactor.seconds()
            if left > 0 and self.direct_still_possible():
                return max(left, s.direct_grace)
        if any(c.connection.is_direct for c in self.candidates.values()):
            return s.direct_grace
        return 0.0

    def mapped(self) -> None:
        """Our mapped hint went out: with a stock peer, give its dial to it a chance (see
        :data:`MAPPED_GRACE`): the Follower holds back its relay dials."""
        if self.mapped_since is not None:
            return
        self.mapped_since = self.reactor.seconds()
        s = self.settings
        if not s.path_upgrade and s.role is not LEADER:
            self.dialer.hold_relays(MAPPED_GRACE)

    def direct_still_possible(self) -> bool:
        """A direct connection may yet complete: we listen, a direct attempt is pending, or a
        direct candidate is in its handshake. (If not, a relay candidate is taken at once:
        holding it would only widen the window in which a flaky link can cut it.)"""
        return bool(
            self.advertiser.listeners
            or self.dialer.direct_outstanding > 0
            or any(c.connection.is_direct for c in self.candidates.values())
        )

    def in_handshake(self) -> bool:
        """A connection of the race got the peer's prologue (it is in its handshake)."""
        return any(c.connection.prologue_received for c in self.candidates.values())

    def rekindle(self) -> None:
        """(Follower, a stock Leader) nothing is in its handshake: the Leader may have given up
        on every attempt it made (stock never retries within a generation). Publish our hints
        again, which it dials at once, and dial again what is over on our side."""
        hints = [*self.settings.relay_hints, *self.advertiser.published]
        _log.info(
            "waiting on the stock Leader (it never retries by itself): our {n} hints again",
            n=len(hints),
        )
        if hints:
            self.owner.send_hints([encode_hint(h) for h in hints])
        self.owner.attempting_again()
        if self.attempt_log is not None:
            self.attempt_log.settle_held()
        self.dialer.dial_again({c.dial for c in self.candidates.values() if c.dial is not None})

    def close_others(self, keep: DilatedConnectionProtocol | None) -> None:
        """The race is over: close every connection but ``keep``, stop listening and
        dialling."""
        others = [c for c in self.candidates.values() if c.connection is not keep]
        if self.rekindler is not None:
            self.rekindler.stop()
        if self.attempt_log is not None:
            self.attempt_log.race_over(c.attempt for c in others if c.attempt is not None)
        self.advertiser.stop_listening()
        self.dialer.cancel_attempts()
        self.advertiser.cancel_retry()
        self.dialer.cancel_timers()
        for c in others:
            c.in_line = False
            c.connection.abort()
        self.candidates.clear()

    def close_relays(self) -> None:
        """A relayed link was selected and a direct one is still wanted: close every other
        relay connection and dial; the listener and the direct dials go on in the
        background."""
        for c in list(self.candidates.values()):
            if not c.connection.is_direct:
                del self.candidates[c.connection]
                c.in_line = False
                c.connection.abort()
        self.dialer.go_on_in_background(RetrySchedule(self.reactor.seconds()))

    def upgrades(self, candidate: Candidate) -> bool:
        """Whether selecting ``candidate`` is only a start: a relayed link with a peer that
        speaks path upgrades (not over Tor); the machine then goes on to ``upgrading``."""
        s = self.settings
        return (
            not candidate.connection.is_direct
            and s.tor is None
            and s.path_upgrade
            and s.purpose is Purpose.RACE
        )

    def select(self, candidate: Candidate) -> None:
        """``candidate`` is the link: it goes to the owner (``connector_connection_made``);
        everything else closes, but for the listener and direct dials when it
        :meth:`upgrades`, or stays for the probes of a stock peer's direct hints."""
        connection = candidate.connection
        self.selected = connection
        self.candidates.pop(connection, None)  # the owner's link now: never closed from here
        s = self.settings
        if candidate.attempt is not None and self.attempt_log is not None:
            if s.purpose is Purpose.STANDBY:
                self.attempt_log.standby(candidate.attempt)
            else:
                self.attempt_log.selected(candidate.attempt)
        relayed = not connection.is_direct and s.tor is None
        if s.purpose is Purpose.STANDBY:
            self.close_others(keep=connection)
        elif self.upgrades(candidate):
            self.looking = True
            self.close_relays()
        else:
            self.close_others(keep=connection)
            if relayed and s.role is LEADER:  # a stock peer's: probe its direct hints
                self.looking = True
                schedule = RetrySchedule(self.reactor.seconds())
                self.prober = ReachabilityProber(
                    self.reactor, self.peer_hints, schedule, self.proven
                )
                self.prober.start()
        if s.purpose is Purpose.STANDBY:
            standby = self.owner.standby_link_for(connection)
            connection.events.select(standby)
            self.owner.connector_standby_ready(standby)
            connection.deliver_held()
            return
        link = self.owner.link_for(connection)
        connection.events.select(link)
        endpoint = candidate.relay
        relay = None
        if endpoint is not None:
            relay = RelayUsed(
                hint_url(endpoint),
                relay_transport(endpoint),
                relay_index(self.settings.relay_hints, endpoint),
            )
        self.owner.connector_connection_made(link, self.count, relay)
        connection.deliver_held()

    def upgrade(self, candidate: Candidate) -> None:
        """A direct connection works while the link is relayed: it becomes the link (the
        Leader's KCM goes out on it in ``select``; the Follower got the Leader's already)."""
        connection = candidate.connection
        self.candidates.pop(connection, None)
        if candidate.attempt is not None and self.attempt_log is not None:
            self.attempt_log.selected(candidate.attempt)
        self.looking = False
        self.close_others(keep=connection)
        self.selected = connection
        link = self.owner.link_for(connection)
        connection.events.select(link)
        self.owner.connector_path_upgraded(link)
        connection.deliver_held()

    def proven(self, how: str) -> None:
        """A direct path to a stock peer works while the link is relayed: tell the owner."""
        _log.info("a direct path to the peer works ({how})", how=how)
        self.owner.direct_path_proven()

    def stop_looking(self) -> None:
        """No direct path is wanted any more: no more probes."""
        self.looking = False
        if self.prober is not None:
            self.prober.stop()
            self.prober = None
