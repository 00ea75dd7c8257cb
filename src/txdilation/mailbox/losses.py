"""What the telemetry says of each lost link and of the recovery that follows it.

Invariants: every loss of the selected link is one ``connection_lost`` record, decided by the
cause of the link's typed :class:`~txdilation.wire.reasons.LinkLoss` alone (no free text
leaves): the cause travels to the telemetry as a value, which names it
(``telemetry.causes``); the next selection after a loss is one ``recovered`` record (what died,
how it was noticed, the gap), and a first selection is none; a loss of the link the Leader
asked us to leave (``reconnect``) is the peer's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IReactorTime

from txdilation.telemetry import Telemetry
from txdilation.wire.reasons import Cause, LinkLoss

__all__ = ["LossRecorder"]


@dataclass(frozen=True, slots=True)
class _Loss:
    """The last selected link's loss, until a new link is selected."""

    died: str  # "direct" or "relay"
    cause: Cause  # how it was noticed follows from it
    since: float  # the last record received on it, or its loss if none


class LossRecorder:
    """Records losses and recoveries for one Manager.

    :param telemetry: where the records go.
    :param clock: ``seconds()`` for the gaps.
    """

    def __init__(self, telemetry: Telemetry, clock: IReactorTime) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._last: _Loss | None = None
        self._leader_asked: object = None

    def leader_asked_to_leave(self, link: object) -> None:
        """The Leader said ``reconnect`` while ``link`` was selected: its loss is a report."""
        self._leader_asked = link

    def lost(self, link: Any, reason: LinkLoss) -> None:
        """The selected ``link`` (a ``SelectedLink``) was lost because of ``reason``."""
        cause = Cause.PEER_REPORT if link is self._leader_asked else reason.cause
        self._leader_asked = None
        self._telemetry.connection_lost(cause)
        since = link.last_received_at
        self._last = _Loss(
            died="direct" if link.is_direct else "relay",
            cause=cause,
            since=since if since is not None else self._clock.seconds(),
        )

    def selected(self) -> None:
        """A link was selected (after ``connection_selected``): a recovery if one was lost."""
        loss, self._last = self._last, None
        if loss is not None:
            gap = self._clock.seconds() - loss.since
            self._telemetry.recovered(loss.died, loss.cause, gap)
