"""What the telemetry says of each lost link and of the recovery that follows it.

Invariants: every loss of the selected link is one ``connection_lost`` record whose reason is
from ``telemetry.LOST_REASONS`` (no free text leaves), chosen by the cause of the link's typed
:class:`~txdilation.wire.reasons.LinkLoss` alone (:data:`LOST_REASON`: every cause is mapped);
the next selection after a loss is one ``recovered`` record (what died, how it was noticed, the
gap), and a first selection is none; a loss of the link the Leader asked us to leave
(``reconnect``) is the peer's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from twisted.internet.interfaces import IReactorTime

from txdilation.telemetry import Telemetry, noticed_by
from txdilation.wire.reasons import Cause, LinkLoss

__all__ = ["LOST_REASON", "LossRecorder", "lost_reason"]

LOST_REASON: Final[Mapping[Cause, str]] = MappingProxyType(
    {
        Cause.CLOSED: "closed",
        Cause.DROPPED: "network_error",
        Cause.TRANSPORT_FAILED: "network_error",
        Cause.PROTOCOL_ERROR: "protocol_error",
        Cause.HANDSHAKE_TIMEOUT: "timeout",
        Cause.SILENT: "timeout",
        Cause.PROBE_UNANSWERED: "probe_unanswered",
        Cause.NETWORK_CHANGE: "network_change",
        Cause.PEER_REPORT: "peer_report",
        Cause.PATH_UPGRADE: "path_upgrade",
    }
)
"""Each cause of a lost link as the telemetry names it (``telemetry.LOST_REASONS``)."""


def lost_reason(loss: LinkLoss) -> str:
    """The telemetry's name for a lost link's reason (from its cause)."""
    return LOST_REASON[loss.cause]


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
