"""Spark types of every table the pipeline reads or writes.

The telemetry event type is derived from ``txdilation/telemetry-schema.json`` (the JSON Schema
the emitter is tested against), so the two cannot drift: JSON ``integer`` -> LONG, ``number`` ->
DOUBLE, ``boolean`` -> BOOLEAN, strings and enums -> STRING, the hint-count object -> MAP.
Every timestamp is DOUBLE Unix seconds, as the servers write them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from pyspark.sql import types as T

from txdilation.telemetry import SCHEMA, schema_text

CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class EventRules:
    """What the JSON Schema says, in the shape the Spark validation needs."""

    fields: tuple[tuple[str, str], ...]  # (name, JSON type) in first-seen order
    envelope_required: tuple[str, ...]
    required: dict[str, tuple[str, ...]]  # event -> required fields beyond the envelope
    enums: dict[str, tuple[str | None, ...]]  # field -> allowed values (same for every event)
    session_pattern: str
    pair_pattern: str


def _json_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return _json_type(defs[prop["$ref"].rsplit("/", 1)[1]], defs)
    if "enum" in prop or ("const" in prop and "type" not in prop):
        return "string"
    return str(prop["type"])


@cache
def event_rules() -> EventRules:
    """Parse the shipped telemetry JSON Schema once."""
    schema = json.loads(schema_text())
    defs = schema["$defs"]
    fields: dict[str, str] = {}
    enums: dict[str, tuple[str | None, ...]] = {}

    def add(name: str, prop: dict[str, Any]) -> None:
        fields.setdefault(name, _json_type(prop, defs))
        target = defs[prop["$ref"].rsplit("/", 1)[1]] if "$ref" in prop else prop
        if "enum" in target and name != "event":
            enums[name] = tuple(sorted(set(enums.get(name, ())) | set(target["enum"]), key=str))

    for name, prop in schema["properties"].items():
        add(name, prop)
    required: dict[str, tuple[str, ...]] = {}
    for clause in schema["allOf"]:
        event = clause["if"]["properties"]["event"]["const"]
        for name, prop in clause["then"]["properties"].items():
            add(name, prop)
        required[event] = tuple(clause["then"]["required"])
    return EventRules(
        fields=tuple(fields.items()),
        envelope_required=tuple(schema["required"]),
        required=required,
        enums=enums,
        session_pattern=schema["properties"]["session"]["pattern"],
        pair_pattern=schema["properties"]["pair"]["pattern"],
    )


_SPARK_TYPES: dict[str, T.DataType] = {
    "integer": T.LongType(),
    "number": T.DoubleType(),
    "boolean": T.BooleanType(),
    "string": T.StringType(),
    "object": T.MapType(T.StringType(), T.LongType()),
}


def event_type() -> T.StructType:
    """The typed columns of one telemetry line (without ingest metadata)."""
    return T.StructType(
        [T.StructField(name, _SPARK_TYPES[kind]) for name, kind in event_rules().fields]
    )


def raw_event_type() -> T.StructType:
    """:func:`event_type` plus the corrupt-record column used when reading JSON lines."""
    return T.StructType([*event_type().fields, T.StructField(CORRUPT, T.StringType())])


def _struct(*cols: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in cols])


D, L, S, B = T.DoubleType(), T.LongType(), T.StringType(), T.BooleanType()

# --- bronze ------------------------------------------------------------------------------

BRONZE_EVENTS = T.StructType(
    [*event_type().fields, T.StructField("source_file", S), T.StructField("bad_reason", S)]
)
"""bronze/events: every line read (bad ones with their reason and string fields nulled)."""

MAILBOX_NAMEPLATES = _struct(
    ("app_id", S),
    ("started", D),
    ("waiting_time", D),
    ("total_time", D),
    ("result", S),
    ("source_file", S),
)
MAILBOX_MAILBOXES = _struct(
    ("app_id", S),
    ("for_nameplate", B),
    ("started", D),
    ("total_time", D),
    ("waiting_time", D),
    ("result", S),
    ("source_file", S),
)
MAILBOX_CLIENT_VERSIONS = _struct(
    ("app_id", S), ("connect_time", D), ("implementation", S), ("version", S), ("source_file", S)
)
"""client_versions without ``side`` (an identifier we do not keep)."""

TRANSIT_RAW = _struct(
    ("started", D),
    ("total_time", D),
    ("waiting_time", D),
    ("total_bytes", L),
    ("mood", S),
    (CORRUPT, S),
)
TRANSIT_USAGE = _struct(
    ("started", D),
    ("total_time", D),
    ("waiting_time", D),
    ("total_bytes", L),
    ("mood", S),
    ("source", S),
    ("source_file", S),
    ("bad_reason", S),
)
"""bronze/transit_usage: relay rows from the JSON log (source ``log``) and the DB (``db``)."""

CLIENT_TIMING = _struct(
    ("source_file", S),
    ("idx", L),
    ("name", S),
    ("start", D),
    ("stop", D),
    ("waiting", S),
    ("msg_type", S),
    ("phase", S),
    ("server_rx", D),
    ("server_tx", D),
)
"""bronze/client_timing: stock ``--dump-timing`` events, scrubbed (no bodies, sides, IPs)."""

DAY = T.StructField("day", T.DateType())
"""The partition column of every bronze table: the UTC day of the row's time (NULL without)."""


def dated(schema: T.StructType) -> T.StructType:
    """``schema`` with the :data:`DAY` partition column last."""
    return T.StructType([*schema.fields, DAY])


BRONZE_TABLES: dict[str, tuple[T.StructType, str]] = {
    "events": (BRONZE_EVENTS, "ts"),
    "mailbox_nameplates": (MAILBOX_NAMEPLATES, "started"),
    "mailbox_mailboxes": (MAILBOX_MAILBOXES, "started"),
    "mailbox_client_versions": (MAILBOX_CLIENT_VERSIONS, "connect_time"),
    "transit_log": (TRANSIT_USAGE, "started"),
    "transit_db": (TRANSIT_USAGE, "started"),
    "client_timing": (CLIENT_TIMING, "start"),
}
"""Bronze table -> (its columns without ``day``, the time column ``day`` is the UTC day of)."""

# --- silver ------------------------------------------------------------------------------

ATTEMPTS = _struct(
    ("session", S),
    ("attempt", L),
    ("pair", S),
    ("role", S),
    ("generation", L),
    ("hint_type", S),
    ("direction", S),
    ("started_ts", D),
    ("ended_ts", D),
    ("outcome", S),
    ("connect_s", D),
    ("handshake_s", D),
)

GENERATIONS = _struct(
    ("session", S),
    ("generation", L),
    ("pair", S),
    ("role", S),
    ("start_ts", D),
    ("end_ts", D),
    ("attempts", L),
    ("hints_sent", L),
    ("hints_received", L),
    ("selected", B),
    ("selected_ts", D),
    ("hint_type", S),
    ("via_relay", B),
    ("since_request_s", D),
    ("candidates", L),
    ("lost_ts", D),
    ("lost_reason", S),
    ("uptime_s", D),
    ("pings", L),
    ("upgraded", B),
    ("upgraded_after_s", D),
    ("relay_s", D),
    ("direct_s", D),
)

SESSIONS = _struct(
    ("session", S),
    ("pair", S),
    ("role", S),
    ("day", T.DateType()),
    ("first_ts", D),
    ("last_ts", D),
    ("requested_ts", D),
    ("ended", B),
    ("end_reason", S),
    ("dilated", B),
    ("time_to_dilate_s", D),
    ("first_via_relay", B),
    ("first_hint_type", S),
    ("generations", L),
    ("connections", L),
    ("relayed_connections", L),
    ("connections_lost", L),
    ("reconnects", L),
    ("records_sent", L),
    ("bytes_sent", L),
    ("records_acked", L),
    ("bytes_retransmitted", L),
    ("records_received", L),
    ("bytes_received", L),
    ("pings", L),
    ("rtt_median_s", D),
    ("subchannels", L),
    ("connected_s", D),
    ("relay_s", D),
    ("direct_s", D),
    ("upgrades", L),
    ("direct_via_mapping", B),
    ("throughput_Bps", D),
    ("please_received", B),
    ("hints_received", L),
)

PINGS = _struct(("session", S), ("generation", L), ("day", T.DateType()), ("rtt_s", D))
"""silver/pings: every RTT sample (a ``ping_rtt`` record with ``rtt_s``)."""

__all__ = [
    "ATTEMPTS",
    "BRONZE_EVENTS",
    "BRONZE_TABLES",
    "CLIENT_TIMING",
    "CORRUPT",
    "DAY",
    "GENERATIONS",
    "MAILBOX_CLIENT_VERSIONS",
    "MAILBOX_MAILBOXES",
    "MAILBOX_NAMEPLATES",
    "PINGS",
    "SCHEMA",
    "SESSIONS",
    "TRANSIT_RAW",
    "TRANSIT_USAGE",
    "EventRules",
    "dated",
    "event_rules",
    "event_type",
    "raw_event_type",
]
