"""What the telemetry says of each lost link and of the recovery that follows it.

Invariants: every loss of the selected link is one ``connection_lost`` record whose reason is
from ``telemetry.LOST_REASONS`` (no free text leaves); the next selection after a loss is one
``recovered`` record (what died, how it was noticed, the gap), and a first selection is none;
a loss of the link the Leader asked us to leave (``reconnect``) is the peer's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txdilation.telemetry import Telemetry, noticed_by

__all__ = ["LossRecorder", "lost_reason"]


def lost_reason(reason: str) -> str:
    """Map a connection-loss message onto the telemetry vocabulary."""
    if reason.startswith("probe unanswered"):
        return "probe_unanswered"
    if reason.startswith("network change"):
        return "network_change"
    if reason.startswith("peer report"):
        return "peer_report"
    if "silent" in reason or "not selected within" in reason:
        return "timeout"
    if "Error" in reason and "Connection" not in reason:
        return "protocol_error"
    if "cleanly" in reason:
        return "closed"
    return "network_error"


@dataclass(frozen=True, slots=True)
class _Loss:
    """The last selected link's loss, until a new link is selected."""

    died: str  # "direct" or "relay"
    noticed_by: str  # telemetry.NOTICED_BY
    since: float  # the last record received on it, or its loss if none


class LossRecorder:
    """Records losses and recoveries for one Manager.

    :param telemetry: where the records go.
    :param clock: ``seconds()`` for the gaps.
    """

    def __init__(self, telemetry: Telemetry, clock: Any) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._last: _Loss | None = None
        self._leader_asked: object = None

    def leader_asked_to_leave(self, link: object) -> None:
        """The Leader said ``reconnect`` while ``link`` was selected: its loss is a report."""
        self._leader_asked = link

    def lost(self, link: Any, reason: str) -> None:
        """The selected ``link`` (a ``SelectedLink``) was lost because of ``reason``."""
        why = "peer_report" if link is self._leader_asked else lost_reason(reason)
        self._leader_asked = None
        self._telemetry.connection_lost(why)
        since = link.last_received_at
        self._last = _Loss(
            died="direct" if link.is_direct else "relay",
            noticed_by=noticed_by(why),
            since=since if since is not None else self._clock.seconds(),
        )

    def selected(self) -> None:
        """A link was selected (after ``connection_selected``): a recovery if one was lost."""
        loss, self._last = self._last, None
        if loss is not None:
            gap = self._clock.seconds() - loss.since
            self._telemetry.recovered(loss.died, loss.noticed_by, gap)
