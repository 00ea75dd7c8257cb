"""L3: one generation's race of connection hints, ending in the selection of one connection.

A :class:`Connector` listens and publishes hints, dials the peer's
(:class:`~txdilation.selection.dialing.Dialer`) and collects candidates; it is the facade and
the selection policy (``connector_machine`` in :mod:`.connector_lifecycle`;
state-diagrams/connector_lifecycle.svg): the first connection that works is taken, relayed or
not, and a better one moved to later (docs/connectivity.md; the policy in full:
docs/module-notes.md).

Invariants: once a connection is selected for good or the connector stops, every other
connection, listener and pending attempt is closed or cancelled and later ones aborted (while
upgrading, only relay ones); the selected connection is the owner's, never closed here; a Tor
connector never listens nor upgrades; the held records are delivered right after the owner's
``connector_connection_made``; each dial and accepted connection is one telemetry attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger
from wormhole import ipaddrs
from wormhole._interfaces import IDilationConnector
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.portmap.mapper import PortMapper
from txdilation.selection.advertise import Advertiser
from txdilation.selection.attempts import AttemptLog
from txdilation.selection.connector_lifecycle import connector_machine
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
)
from txdilation.selection.rekindle import Rekindler
from txdilation.selection.upgrade import RetrySchedule
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import ICandidateOwner, IDilationReactor
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
