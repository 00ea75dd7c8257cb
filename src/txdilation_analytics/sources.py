"""Readers for every input: our JSON lines, the servers' SQLite and JSON logs, stock timing dumps.

Layer: I/O at the edge of the pipeline. Inputs were checked before Spark started
(:mod:`.inputs`); each reader takes the files to read and returns a raw typed DataFrame;
line-level problems are not errors here, they become ``bad_reason`` values in :mod:`.bronze`.

SQLite is read by :mod:`.sqlite_source` (Python's ``sqlite3`` in Spark's Python workers),
selecting every time column ``CAST(... AS REAL)`` (the servers store ``time.time()`` floats in
INTEGER-declared columns, which Spark's JDBC reader truncates). Stock ``--dump-timing`` files
are scrubbed here, before Spark sees them: only the event name, times and a few allow-listed
scalar details are kept (no bodies, sides, welcome messages or addresses).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any

from . import schemas
from .errors import InputError
from .inputs import is_remote
from .storage import qualify


def read_events(spark: Any, paths: Sequence[str]) -> Any:
    """Read telemetry JSON lines from ``paths`` (schema :func:`schemas.raw_event_type`).

    Unparseable lines keep their text in ``_corrupt_record``; ``source_file`` is added.
    Compressed files (``.gz``, ``.bz2``...) are read as such.
    """
    return _read_json_lines(spark, paths, schemas.raw_event_type())


def read_transit_log(spark: Any, paths: Sequence[str]) -> Any:
    """Read the transit relay's ``--log-fd`` JSON lines (schema :data:`schemas.TRANSIT_RAW`)."""
    return _read_json_lines(spark, paths, schemas.TRANSIT_RAW)


def _read_json_lines(spark: Any, paths: Sequence[str], schema: Any) -> Any:
    from pyspark.sql import functions as F

    df = (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", schemas.CORRUPT)
        .json([qualify(p) for p in paths])
    )
    return df.withColumn("source_file", F.col("_metadata.file_path"))


MAILBOX_TABLES = {
    "nameplates": ("mailbox_nameplates", schemas.MAILBOX_NAMEPLATES),
    "mailboxes": ("mailbox_mailboxes", schemas.MAILBOX_MAILBOXES),
    "client_versions": ("mailbox_client_versions", schemas.MAILBOX_CLIENT_VERSIONS),
}
"""Usage DB table -> (bronze table, its schema)."""
TRANSIT_DB_TABLES = {"usage": ("transit_db", schemas.TRANSIT_RAW)}


def read_usage_table(
    spark: Any, path: str, table: str, schema: Any, *, after: int, upto: int
) -> Any:
    """Rows ``after < rowid <= upto`` of a usage DB table, ``source_file`` the DB's path
    (:mod:`.sqlite_source`; ``client_versions`` deduplicated on ``side``, then dropped)."""
    from . import sqlite_source

    return sqlite_source.read_table(
        spark, path, table, schema, after=after, upto=upto, source_file=path
    )


# --- stock --dump-timing files -----------------------------------------------------------

_TIMING_DETAILS = ("waiting",)
_MESSAGE_DETAILS = ("type", "phase")


def _safe_token(value: object) -> str | None:
    """A short detail string kept only if it cannot be an address or a secret blob."""
    if not isinstance(value, str) or not 0 < len(value) <= 40:
        return None
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if any(c in value for c in ":/@") or (len(value) > 16 and value.isalnum()):
        return None  # host:port, URLs, long hex/base64 blobs
    return value


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def timing_rows(source: str, data: object) -> tuple[list[tuple[Any, ...]], int]:
    """Scrub one parsed ``--dump-timing`` document into CLIENT_TIMING rows.

    :param source: the file name recorded in ``source_file``.
    :param data: the parsed JSON (a list of ``{"name", "start", "stop", "details"}``).
    :returns: (rows, number of malformed entries skipped); a non-list counts as one.
    """
    if not isinstance(data, list):
        return [], 1
    rows: list[tuple[Any, ...]] = []
    bad = 0
    for idx, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            bad += 1
            continue
        start = _number(entry.get("start"))
        if start is None:
            bad += 1
            continue
        details = entry.get("details") if isinstance(entry.get("details"), dict) else {}
        assert isinstance(details, dict)
        message = details.get("message") if isinstance(details.get("message"), dict) else {}
        assert isinstance(message, dict)
        kept = {k: _safe_token(details.get(k)) for k in _TIMING_DETAILS}
        msg = {k: _safe_token(message.get(k, details.get(k))) for k in _MESSAGE_DETAILS}
        rows.append(
            (
                source,
                idx,
                _safe_token(entry["name"].replace(" ", "_")),
                start,
                _number(entry.get("stop")),
                kept["waiting"],
                msg["type"],
                msg["phase"],
                _number(message.get("server_rx")),
                _number(message.get("server_tx")),
            )
        )
    return rows, bad


def read_client_timing(spark: Any, paths: Sequence[str]) -> tuple[Any, dict[str, int]]:
    """Read and scrub stock ``--dump-timing`` JSON files (local only).

    :returns: (DataFrame with schema CLIENT_TIMING, bad entries per file: an unreadable file
        counts as one).
    :raises InputError: a path is remote (timing files are scrubbed here, before Spark).
    """
    rows: list[tuple[Any, ...]] = []
    bad: dict[str, int] = {}
    for path in paths:
        if is_remote(path):
            raise InputError("--client-timing: timing files must be local (they are scrubbed here)")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            bad[path] = 1
            continue
        file_rows, bad[path] = timing_rows(path, data)
        rows.extend(file_rows)
    return spark.createDataFrame(rows, schemas.CLIENT_TIMING), bad


__all__ = [
    "MAILBOX_TABLES",
    "TRANSIT_DB_TABLES",
    "read_client_timing",
    "read_events",
    "read_transit_log",
    "read_usage_table",
    "timing_rows",
]
