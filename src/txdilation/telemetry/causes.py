"""How a lost link's :class:`~txdilation.wire.reasons.Cause` reads in the telemetry.

Layer: observability, the serialisation edge. A cause travels as a value up to the recorder
(``Telemetry.connection_lost`` and ``Telemetry.recovered`` take it as it is); only here does it
become the schema's words. Invariants: every cause has a ``connection_lost`` reason from
``LOST_REASONS`` (never ``other``) and a ``recovered`` ``noticed_by`` from ``NOTICED_BY``, and
the latter is what :func:`~txdilation.telemetry.vocabulary.noticed_by` says of the former.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from txdilation.wire.reasons import Cause

__all__ = ["LOST_REASON", "NOTICED_BY_CAUSE"]

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
"""Each cause of a lost link as ``connection_lost``'s ``reason`` names it."""

NOTICED_BY_CAUSE: Final[Mapping[Cause, str]] = MappingProxyType(
    {
        Cause.CLOSED: "connection_closed",
        Cause.DROPPED: "connection_closed",
        Cause.TRANSPORT_FAILED: "connection_closed",
        Cause.PROTOCOL_ERROR: "other",
        Cause.HANDSHAKE_TIMEOUT: "liveness",
        Cause.SILENT: "liveness",
        Cause.PROBE_UNANSWERED: "probe",
        Cause.NETWORK_CHANGE: "network_change",
        Cause.PEER_REPORT: "peer_report",
        Cause.PATH_UPGRADE: "upgrade",
    }
)
"""How a loss with each cause was noticed, as ``recovered``'s ``noticed_by`` names it."""
