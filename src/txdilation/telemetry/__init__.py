"""Session telemetry: schema ``txdilation-telemetry/1`` events about one dilated wormhole.

Layer: observability, beside the protocol (no protocol logic here). The Manager, the Connector
(through ``attempts.AttemptLog``) and the Multiplexer call one method per event; the traffic
records sample the Multiplexer's counters (:meth:`Telemetry.set_traffic_source`). Each call
builds one flat JSON-ready record and hands it to

- ``twisted.logger`` (namespace ``txdilation.telemetry``, level debug; the record is the event
  key ``telemetry`` and the text names the event and its fields), always;
- a JSON-lines file when the caller names one (``events_path``: ``TelemetrySettings.events_path``,
  which the edges read from ``TXDILATION_EVENTS``; appended, one object per line, flushed after
  each line; one shared handle per path and process);
- an optional extra ``sink`` callable given by the caller.

Invariants:

- every record validates against ``telemetry-schema.json`` (shipped beside this module);
- every string value in a record comes from a fixed vocabulary, a hex identifier made here, or
  the schema name: codes, keys, sides, hostnames, IP addresses, payload and free-text error
  messages can never reach a record (unknown values become ``"other"``);
- the ``pair`` id is the first 16 hex digits of SHA-256 over both mailbox sides, sorted, so both
  peers compute the same id; the sides themselves are never recorded;
- telemetry never raises into the protocol for bad numbers: negative durations (clock steps) are
  clamped to 0 and non-finite ones are dropped.

Time comes from the ``IReactorTime`` passed in (``ts`` is ``clock.seconds()``).

The package is split by concern: the schema's vocabulary and how values are recorded
(``vocabulary``; a lost link's cause in its words: ``causes``), where records go (``sinks``),
and the recorder itself (``recorder``); this module is what the rest of txdilation imports.
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
