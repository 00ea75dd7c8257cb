"""Telemetry's schema and vocabulary: the fixed values a record may hold, the identifiers made
here (the pair id), and how numbers are recorded (durations clamped, counters checked).

Invariants: every string a record holds is the schema name, a hex identifier made here, the
implementation's name and version (``dilation_requested``), or one of the vocabularies below
(unknown values become :data:`OTHER`); a recorded duration is None,
or finite and non-negative; a recorded counter is a non-negative int.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final

from txdilation.settings import EVENTS_VARIABLE

SCHEMA: Final = "txdilation-telemetry/1"
"""The ``schema`` value of every record."""

NAMESPACE: Final = "txdilation.telemetry"
"""The ``twisted.logger`` namespace the records are emitted in."""

ENV_VAR: Final = EVENTS_VARIABLE
"""Environment variable naming the JSON-lines file the edges pass as ``events_path``."""

SCHEMA_RESOURCE: Final = "telemetry-schema.json"
"""File name of the JSON Schema, package data of ``txdilation``."""

OTHER: Final = "other"
"""What any value outside a vocabulary is recorded as."""

HINT_TYPES: Final = frozenset({"direct-tcp-v1", "tor-tcp-v1", "relay-v1", OTHER})
DIRECTIONS: Final = frozenset({"outbound", "inbound"})
RELAY_TRANSPORTS: Final = frozenset({"tcp", "ws", "wss", OTHER})
ATTEMPT_OUTCOMES: Final = frozenset(
    {
        "selected",  # this attempt became the generation's connection
        "superseded",  # finished the handshake but another candidate was selected
        "cancelled",  # stopped before finishing because another candidate won or we stopped
        "connect_failed",  # TCP connect (or relay line) failed
        "handshake_failed",  # prologue/Noise/KCM failed
        "timeout",
        OTHER,
    }
)
LOST_REASONS: Final = frozenset(
    {
        "closed",
        "peer_closed",
        "timeout",  # liveness: nothing heard for 1.5 ping intervals
        "protocol_error",
        "network_error",
        "stopped",
        "probe_unanswered",  # a probe of a path with unacknowledged records went unanswered
        "network_change",  # our addresses or routes changed
        "peer_report",  # the peer told us (txdilation's ``link-lost``, or ``reconnect``)
        "path_upgrade",  # we left it for a direct path (a stock peer: a new generation)
        OTHER,
    }
)
PATHS: Final = frozenset({"direct", "relay"})
"""What a ``recovered`` record's ``died`` says the lost link was."""
NOTICED_BY: Final = frozenset(
    {"probe", "liveness", "network_change", "peer_report", "connection_closed", "upgrade", OTHER}
)
"""How a loss was noticed (``recovered``'s ``noticed_by``): see :func:`noticed_by`."""
_NOTICED_BY_REASON: Final = {
    "probe_unanswered": "probe",
    "timeout": "liveness",
    "network_change": "network_change",
    "peer_report": "peer_report",
    "closed": "connection_closed",
    "peer_closed": "connection_closed",
    "network_error": "connection_closed",
    "path_upgrade": "upgrade",
}
END_REASONS: Final = frozenset(
    {"happy", "closed", "lonely", "errory", "scary", "failed", "stopped", OTHER}
)
EVENTS: Final = (
    "dilation_requested",
    "please_received",
    "hints_sent",
    "hints_received",
    "attempt_started",
    "attempt_ended",
    "connection_selected",
    "connection_lost",
    "reconnect",
    "reconnecting",
    "recovered",
    "path_changed",
    "traffic",
    "ping_rtt",
    "subchannel_opened",
    "subchannel_closed",
    "session_ended",
    "port_mapping",
)
"""Every ``event`` name of schema ``txdilation-telemetry/1``."""
MAPPING_CHANGES: Final = frozenset(
    {"mapped", "renewed", "lost", "forgotten", "deleted", "unavailable", OTHER}
)
"""What happened to the port mapping (``port_mapping``'s ``change``)."""
MAPPING_PROTOCOLS: Final = frozenset({"pcp", "nat-pmp", "upnp-igd", OTHER})
"""Which protocol holds it (``port_mapping``'s ``protocol``)."""
PATH_CHANGE_REASONS: Final = frozenset({"upgrade", "standby", OTHER})
"""Why a link moved to another path of the same generation (``path_changed``'s ``reason``)."""

SESSION_ID = re.compile(r"[0-9a-f]{16,64}")

Record = dict[str, Any]
"""One record: flat, JSON-ready."""
Sink = Callable[[Mapping[str, Any]], None]
"""Where records go (a file writer, a test's list)."""


def pair_id(side_a: str, side_b: str) -> str:
    """Return the id both peers compute for their wormhole from the two mailbox sides.

    :param side_a: one mailbox side (ours or theirs, order does not matter).
    :param side_b: the other mailbox side.
    :returns: 16 lowercase hex digits: SHA-256 over ``"txdilation-pair-v1:" + low + ":" + high``.
    """
    low, high = sorted((side_a, side_b))
    digest = hashlib.sha256(f"txdilation-pair-v1:{low}:{high}".encode()).hexdigest()
    return digest[:16]


def schema_text() -> str:
    """Return the JSON Schema (draft 2020-12) that every record validates against."""
    return resources.files("txdilation").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")


def vocabulary(value: object, allowed: frozenset[str]) -> str:
    """Return ``value`` if it is one of ``allowed``, else ``"other"`` (never the value itself)."""
    return value if isinstance(value, str) and value in allowed else OTHER


def noticed_by(lost_reason: str) -> str:
    """How a loss with ``lost_reason`` (one of :data:`LOST_REASONS`) was noticed: one of
    :data:`NOTICED_BY` (``probe_unanswered`` -> ``probe``, ``timeout`` -> ``liveness``,
    ``network_change`` and ``peer_report`` as they are, ``closed``/``peer_closed``/
    ``network_error`` -> ``connection_closed``, anything else -> ``other``)."""
    return _NOTICED_BY_REASON.get(lost_reason, OTHER)


def as_duration(value: float | None) -> float | None:
    """A duration as recorded: None stays None, non-finite becomes None, negative becomes 0."""
    if value is None:
        return None
    seconds = float(value)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def as_count(value: int) -> int:
    """A counter as recorded: a non-negative int (bools and negatives are programming errors)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"telemetry counters are non-negative ints, not {value!r}")
    return value


def as_hint_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Per-hint-type counts keyed by vocabulary only (unknown types are summed under other)."""
    out: dict[str, int] = {}
    for hint_type, n in counts.items():
        key = vocabulary(hint_type, HINT_TYPES)
        out[key] = out.get(key, 0) + as_count(n)
    return out


__all__ = [
    "ATTEMPT_OUTCOMES",
    "DIRECTIONS",
    "END_REASONS",
    "ENV_VAR",
    "EVENTS",
    "HINT_TYPES",
    "LOST_REASONS",
    "MAPPING_CHANGES",
    "MAPPING_PROTOCOLS",
    "NAMESPACE",
    "NOTICED_BY",
    "OTHER",
    "PATHS",
    "PATH_CHANGE_REASONS",
    "RELAY_TRANSPORTS",
    "SCHEMA",
    "SCHEMA_RESOURCE",
    "SESSION_ID",
    "Record",
    "Sink",
    "as_count",
    "as_duration",
    "as_hint_counts",
    "noticed_by",
    "pair_id",
    "schema_text",
    "vocabulary",
]
