"""Session telemetry: schema ``txdilation-telemetry/1`` events about one dilated wormhole.

Layer: observability, beside the protocol (no protocol logic here); what the rest of
txdilation imports (``vocabulary``: the schema's values; ``causes``: a lost link's cause in
words; ``sinks``: where records go; ``recorder``: the recorder). The Manager, the Connector and
the Multiplexer call one method per event; each builds one flat record for ``twisted.logger``
(namespace ``txdilation.telemetry``), the ``events_path`` JSON-lines file when named, and an
optional ``sink``. Time comes from the ``IReactorTime`` passed in.

Invariants: every record validates against ``telemetry-schema.json``; every string in a record
is from a fixed vocabulary, a hex identifier made here, or the schema name (never a code, key,
side, address, payload or free text); the ``pair`` id is the first 16 hex digits of SHA-256
over both sides, sorted; bad numbers are clamped or dropped, never raised. In full:
docs/module-notes.md.
"""

from __future__ import annotations

from txdilation.telemetry.recorder import Telemetry, TrafficStats
from txdilation.telemetry.sinks import JsonLinesWriter, record_from_log_event, writer_for
from txdilation.telemetry.vocabulary import (
    ATTEMPT_OUTCOMES,
    DIRECTIONS,
    END_REASONS,
    ENV_VAR,
    EVENTS,
    HINT_TYPES,
    LOST_REASONS,
    MAPPING_CHANGES,
    MAPPING_PROTOCOLS,
    NAMESPACE,
    NOTICED_BY,
    OTHER,
    PATH_CHANGE_REASONS,
    PATHS,
    RELAY_TRANSPORTS,
    SCHEMA,
    SCHEMA_RESOURCE,
    Record,
    Sink,
    noticed_by,
    pair_id,
    schema_text,
    vocabulary,
)

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
    "JsonLinesWriter",
    "Record",
    "Sink",
    "Telemetry",
    "TrafficStats",
    "noticed_by",
    "pair_id",
    "record_from_log_event",
    "schema_text",
    "vocabulary",
    "writer_for",
]
