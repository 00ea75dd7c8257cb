"""L3 observability: the connection attempts of one generation's race, for telemetry.

The :class:`~txdilation.selection.connector.Connector` tells an :class:`AttemptLog` what it
sees of each candidate (started, connected, ready, selected, failed, closed) and when its race
is over; the log writes ``attempt_started`` / ``attempt_ended`` records with an outcome and
the connect and handshake durations. A candidate the peer closes while our race is on is
resolved when it ends (within :data:`LOST_RACE_WINDOW`: it lost the race). The outcomes:
docs/module-notes.md.

Invariants: no protocol decision depends on it; no I/O, time from the clock given; every
started attempt ends at most once; attempt ids come from the session's
:class:`~txdilation.telemetry.Telemetry` (unique over all generations); both records of an
attempt carry the generation it started in; never an address (only hint types).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from twisted.internet.defer import CancelledError
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.error import TimeoutError as ConnectTimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from txdilation.telemetry import Telemetry
from txdilation.wire.reasons import Cause, LinkLoss

LOST_RACE_WINDOW: Final = 2.0
"""Seconds between a peer's close of a candidate and the end of our race within which the
candidate counts as having lost the race rather than failed."""

TRANSPORT_CLOSED: Final = frozenset({Cause.CLOSED, Cause.DROPPED})
"""The causes of a candidate whose connection was closed (by the peer, the network, or us):
while the race is on, such a candidate is held back (see the module docstring)."""


@dataclass(eq=False, slots=True)
class Attempt:
    """One candidate connection as the log follows it (times are ``clock.seconds()``)."""

    attempt_id: int
    hint_type: str
    direction: str
    generation: int | None
    started_at: float
    connected_at: float | None = None
    ready_at: float | None = None
    closed_at: float | None = None  # closed by the peer or network while the race was on
    ended: bool = False


class AttemptLog:
    """The attempts of one generation's race (see the module docstring).

    :param telemetry: the session's telemetry (ids, records).
    :param clock: where the times come from.
    """

    def __init__(self, telemetry: Telemetry, clock: IReactorTime) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._race_over = False
        self._held: list[Attempt] = []

    def started(self, hint_type: str, direction: str) -> Attempt:
        """A new attempt: an outbound dial, or (``inbound``) a connection our listener accepted
        (connected at once). Emits ``attempt_started``."""
        now = self._clock.seconds()
        t = self._telemetry
        attempt = Attempt(t.new_attempt_id(), hint_type, direction, t.generation, now)
        if direction == "inbound":
            attempt.connected_at = now
        t.attempt_started(attempt.attempt_id, hint_type, direction, generation=attempt.generation)
        return attempt

    def connected(self, attempt: Attempt) -> None:
        """The outbound TCP connection was made (its L2 protocol built)."""
        if attempt.connected_at is None:
            attempt.connected_at = self._clock.seconds()

    def connect_failed(self, attempt: Attempt, failure: Failure) -> None:
        """The outbound dial failed before a connection was made."""
        if attempt.connected_at is not None:
            return  # the connection's own end reports it
        if failure.check(CancelledError, ConnectingCancelledError):  # type: ignore[no-untyped-call]
            outcome = "cancelled"
        elif failure.check(ConnectTimeoutError):  # type: ignore[no-untyped-call]
            outcome = "timeout"
        else:
            outcome = "connect_failed"
        self._end(attempt, outcome)

    def ready(self, attempt: Attempt) -> None:
        """The connection reached the point where it may be selected (KCM exchange)."""
        if attempt.ready_at is None:
            attempt.ready_at = self._clock.seconds()

    def selected(self, attempt: Attempt) -> None:
        """The connection was selected."""
        self._end(attempt, "selected")

    def standby(self, attempt: Attempt) -> None:
        """The connection was selected as the generation's warm standby path (never counted
        as the generation's connection)."""
        self._end(attempt, "standby")

    def closed(self, attempt: Attempt, reason: LinkLoss) -> None:
        """The connection closed before it was selected; ``reason`` is the L2 connection's."""
        if attempt.ended or attempt.closed_at is not None:
            return
        if self._race_over:
            self._end(attempt, self._lost_race_outcome(attempt))
        elif reason.cause is Cause.HANDSHAKE_TIMEOUT:
            self._end(attempt, "timeout")
        elif reason.cause in TRANSPORT_CLOSED:
            attempt.closed_at = self._clock.seconds()
            self._held.append(attempt)
        else:
            self._end(attempt, "handshake_failed")

    def race_over(self, abandoned: Iterable[Attempt] = ()) -> None:
        """The race ended (a connection was selected, or the connector stopped).

        :param abandoned: the attempts whose connections are still open and are being closed
            because of that (not the selected one): they lost the race, and end now.

        Also resolves the attempts the peer closed meanwhile; every later close lost the race.
        """
        for attempt in abandoned:
            self._end(attempt, self._lost_race_outcome(attempt))
        if self._race_over:
            return
        self._race_over = True
        now = self._clock.seconds()
        held, self._held = self._held, []
        for attempt in held:
            assert attempt.closed_at is not None
            if now - attempt.closed_at <= LOST_RACE_WINDOW:
                self._end(attempt, self._lost_race_outcome(attempt))
            else:
                self._end(attempt, "other" if attempt.ready_at is not None else "handshake_failed")

    def settle_held(self) -> None:
        """The race goes on with new attempts (a Follower rekindling a stock Leader's
        generation): the attempts closed more than :data:`LOST_RACE_WINDOW` seconds ago did
        not lose a race that ended; they failed, and end now (else they would wait for a race
        end that may never come, and telemetry would show them still open)."""
        now = self._clock.seconds()
        still: list[Attempt] = []
        for attempt in self._held:
            assert attempt.closed_at is not None
            if now - attempt.closed_at > LOST_RACE_WINDOW:
                self._end(attempt, "other" if attempt.ready_at is not None else "handshake_failed")
            else:
                still.append(attempt)
        self._held = still

    def _lost_race_outcome(self, attempt: Attempt) -> str:
        return "superseded" if attempt.ready_at is not None else "cancelled"

    def _end(self, attempt: Attempt, outcome: str) -> None:
        if attempt.ended:
            return
        attempt.ended = True
        connect_s = handshake_s = None
        if attempt.connected_at is not None:
            connect_s = attempt.connected_at - attempt.started_at
            if attempt.ready_at is not None:
                handshake_s = attempt.ready_at - attempt.connected_at
        self._telemetry.attempt_ended(
            attempt.attempt_id,
            attempt.hint_type,
            attempt.direction,
            outcome,
            connect_s,
            handshake_s,
            generation=attempt.generation,
        )


__all__ = ["LOST_RACE_WINDOW", "TRANSPORT_CLOSED", "Attempt", "AttemptLog"]
