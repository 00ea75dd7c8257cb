"""Readers for every input: our JSON lines, the servers' SQLite and JSON logs, stock timing dumps.

Layer: I/O at the edge of the pipeline. Each reader checks that its input exists and has the
expected shape (raising :class:`~txdilation_analytics.errors.InputError` with the option name
and path otherwise) and returns a raw typed DataFrame; line-level problems are not errors here,
they become ``bad_reason`` values in :mod:`.bronze`.

SQLite is read with Python's ``sqlite3``, selecting every time column ``CAST(... AS REAL)``
(the servers store ``time.time()`` floats in INTEGER-declared columns, which Spark's JDBC reader
truncates). Stock ``--dump-timing`` files are scrubbed here, before Spark sees them: only the
event name, times and a few allow-listed scalar details are kept (no bodies, sides, welcome
messages or addresses).
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from . import schemas
from .errors import InputError
from .storage import is_remote, qualify

SQLITE_CHUNK_ROWS = 200_000


def expand(option: str, pattern: str) -> list[str]:
    """Return the input paths for a glob (remote patterns are left for Spark to expand).

    :raises InputError: a local pattern matches nothing.
    """
    if is_remote(pattern):
        return [pattern]
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    if not matches:
        raise InputError(f"{option}: no file matches {pattern!r}")
    return [qualify(m) for m in matches]


def _local_file(option: str, path: str) -> str:
    if is_remote(path):
        raise InputError(f"{option}: SQLite files must be local, got {path!r}")
    if not os.path.isfile(path):
        raise InputError(f"{option}: no such file {path!r}")
    return path


def read_events(spark: Any, pattern: str) -> Any:
    """Read telemetry JSON lines matching ``pattern`` (schema :func:`schemas.raw_event_type`).

    Unparseable lines keep their text in ``_corrupt_record``; ``source_file`` is added.
    :raises InputError: a local pattern matches nothing.
    """
    return _read_json_lines(spark, expand("--events", pattern), schemas.raw_event_type())


def read_transit_log(spark: Any, path: str) -> Any:
    """Read the transit relay's ``--log-fd`` JSON lines (schema :data:`schemas.TRANSIT_RAW`).

    :raises InputError: the file does not exist.
    """
    if not is_remote(path) and not os.path.isfile(path):
        raise InputError(f"--transit-log: no such file {path!r}")
    return _read_json_lines(spark, [qualify(path)], schemas.TRANSIT_RAW)


def _read_json_lines(spark: Any, paths: Sequence[str], schema: Any) -> Any:
    from pyspark.sql import functions as F

    df = (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", schemas.CORRUPT)
        .json(list(paths))
    )
    return df.withColumn("source_file", F.col("_metadata.file_path"))


def _sqlite_rows(
    option: str, path: str, tables: dict[str, str]
) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """Yield (table, chunk of rows) for each query in ``tables`` (table name -> SELECT)."""
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"{option}: cannot open {path!r}: {e}") from e
    try:
        try:
            present = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as e:
            raise InputError(f"{option}: {path!r} is not an SQLite database: {e}") from e
        missing = sorted(set(tables) - present)
        if missing:
            raise InputError(
                f"{option}: {path!r} is not a usage database (missing table {missing[0]!r})"
            )
        for table, query in tables.items():
            cursor = db.execute(query)
            while chunk := cursor.fetchmany(SQLITE_CHUNK_ROWS):
                yield table, chunk
    finally:
        db.close()


def _frames(spark: Any, chunks: Iterable[list[tuple[Any, ...]]], schema: Any) -> Any:
    frames = [spark.createDataFrame(chunk, schema) for chunk in chunks]
    if not frames:
        return spark.createDataFrame([], schema)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


MAILBOX_QUERIES = {
    "nameplates": "SELECT app_id, CAST(started AS REAL), CAST(waiting_time AS REAL),"
    " CAST(total_time AS REAL), result FROM nameplates",
    "mailboxes": "SELECT app_id, CAST(for_nameplate AS INTEGER) != 0, CAST(started AS REAL),"
    " CAST(total_time AS REAL), CAST(waiting_time AS REAL), result FROM mailboxes",
    "client_versions": "SELECT app_id, CAST(MIN(connect_time) AS REAL), implementation, version"
    " FROM client_versions GROUP BY side",
}
MAILBOX_TYPES = {
    "nameplates": schemas.MAILBOX_NAMEPLATES,
    "mailboxes": schemas.MAILBOX_MAILBOXES,
    "client_versions": schemas.MAILBOX_CLIENT_VERSIONS,
}


def read_mailbox_usage_db(spark: Any, path: str) -> dict[str, Any]:
    """Read the mailbox server's ``--usage-db`` into DataFrames per table.

    :returns: ``{"nameplates": df, "mailboxes": df, "client_versions": df}`` (client versions
        deduplicated on ``side``, which is then dropped).
    :raises InputError: missing file, not SQLite, or not a mailbox usage database.
    """
    _local_file("--mailbox-usage-db", path)
    chunks: dict[str, list[list[tuple[Any, ...]]]] = {t: [] for t in MAILBOX_QUERIES}
    for table, chunk in _sqlite_rows("--mailbox-usage-db", path, MAILBOX_QUERIES):
        if table == "mailboxes":
            chunk = [(r[0], bool(r[1]) if r[1] is not None else None, *r[2:]) for r in chunk]
        chunks[table].append(chunk)
    return {t: _frames(spark, chunks[t], MAILBOX_TYPES[t]) for t in MAILBOX_QUERIES}


TRANSIT_DB_QUERY = {
    "usage": "SELECT CAST(started AS REAL), CAST(total_time AS REAL), CAST(waiting_time AS REAL),"
    " CAST(total_bytes AS INTEGER), result, NULL FROM usage"
}


def read_transit_usage_db(spark: Any, path: str) -> Any:
    """Read the transit relay's ``--usage-db`` ``usage`` table (schema ``TRANSIT_RAW``).

    :raises InputError: missing file, not SQLite, or not a transit usage database.
    """
    _local_file("--transit-usage-db", path)
    chunks = [c for _, c in _sqlite_rows("--transit-usage-db", path, TRANSIT_DB_QUERY)]
    from pyspark.sql import functions as F

    return _frames(spark, chunks, schemas.TRANSIT_RAW).withColumn(
        "source_file", F.lit(os.path.basename(path))
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


def read_client_timing(spark: Any, pattern: str) -> tuple[Any, int]:
    """Read and scrub stock ``--dump-timing`` JSON files matching ``pattern`` (local only).

    :returns: (DataFrame with schema CLIENT_TIMING, number of bad entries or files).
    :raises InputError: nothing matches, or the pattern is remote.
    """
    if is_remote(pattern):
        raise InputError("--client-timing: timing files must be local (they are scrubbed here)")
    rows: list[tuple[Any, ...]] = []
    bad = 0
    for path in expand("--client-timing", pattern):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            bad += 1
            continue
        file_rows, file_bad = timing_rows(os.path.basename(path), data)
        rows.extend(file_rows)
        bad += file_bad
    return spark.createDataFrame(rows, schemas.CLIENT_TIMING), bad


__all__ = [
    "expand",
    "read_client_timing",
    "read_events",
    "read_mailbox_usage_db",
    "read_transit_log",
    "read_transit_usage_db",
    "timing_rows",
]
