"""The servers' SQLite usage databases as a Spark data source (Spark 4's Python Data Source API).

Layer: I/O at the edge. The mailbox server and the transit relay store ``time.time()`` floats in
INTEGER-declared columns, which Spark's JDBC reader would truncate: every query here selects
them ``CAST(... AS REAL)``. Rows are read by Spark's Python workers, in parallel, as Arrow
batches (nothing passes through the driver): a table is split into ``rowid`` ranges, and
``client_versions`` (deduplicated on ``side``, which is then dropped) into groups of sides.

Increments: only rows with ``after < rowid <= upto`` are read (the server only ever appends
rows), so a database ingested before is read from where the last ingest stopped; a
``client_versions`` side seen below ``after`` is not counted again.

The file must be readable where the Python workers run: local runs, or the host that owns it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "txdilation_usage_db"
ROWS_PER_PARTITION = 1_000_000
BATCH_ROWS = 65_536

QUERIES = {
    "nameplates": "SELECT app_id, CAST(started AS REAL), CAST(waiting_time AS REAL),"
    " CAST(total_time AS REAL), result FROM nameplates",
    "mailboxes": "SELECT app_id, CAST(for_nameplate AS INTEGER) != 0, CAST(started AS REAL),"
    " CAST(total_time AS REAL), CAST(waiting_time AS REAL), result FROM mailboxes",
    "usage": "SELECT CAST(started AS REAL), CAST(total_time AS REAL), CAST(waiting_time AS REAL),"
    " CAST(total_bytes AS INTEGER), result, NULL FROM usage",
}
"""Table -> the SELECT of its columns (in the bronze schema's order, before ``source_file``)."""
VERSIONS_QUERY = (
    "SELECT app_id, CAST(MIN(connect_time) AS REAL), implementation, version"
    " FROM client_versions WHERE rowid > :after AND rowid <= :upto AND {part} AND side NOT IN"
    " (SELECT side FROM client_versions WHERE rowid <= :after AND side IS NOT NULL)"
    " GROUP BY side"
)
SIDE_GROUPS = 4
"""client_versions is read in this many groups of sides (by the first character's code)."""


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def max_rowid(path: str, table: str) -> int:
    """The largest ``rowid`` of ``table`` (0 when empty)."""
    db = _connect(path)
    try:
        return int(db.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()[0])
    finally:
        db.close()


@dataclass(frozen=True)
class _Range(InputPartition):  # type: ignore[misc]
    """One partition: rows ``lo < rowid <= hi``, or one group of sides (``group`` >= 0)."""

    lo: int
    hi: int
    group: int = -1


class _Reader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self.path = options["path"]
        self.table = options["table"]
        self.after = int(options.get("after", "0"))
        self.upto = int(options["upto"])
        self.source_file = options.get("source_file", self.path)
        self.schema = schema

    def partitions(self) -> list[_Range]:
        if self.upto <= self.after:
            return [_Range(0, 0)]
        if self.table == "client_versions":
            return [_Range(self.after, self.upto, g) for g in range(SIDE_GROUPS)]
        step = ROWS_PER_PARTITION
        return [_Range(lo, min(lo + step, self.upto)) for lo in range(self.after, self.upto, step)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, _Range)
        if partition.hi <= partition.lo:
            return
        schema = to_arrow_schema(self.schema)
        db = _connect(self.path)
        try:
            if partition.group >= 0:
                part = f"COALESCE(unicode(side), 0) % {SIDE_GROUPS} = {partition.group}"
                cursor = db.execute(
                    VERSIONS_QUERY.format(part=part), {"after": partition.lo, "upto": partition.hi}
                )
            else:
                cursor = db.execute(
                    f"{QUERIES[self.table]} WHERE rowid > ? AND rowid <= ?",
                    (partition.lo, partition.hi),
                )
            while rows := cursor.fetchmany(BATCH_ROWS):
                columns = [list(c) for c in zip(*rows, strict=True)]
                columns.append([self.source_file] * len(rows))
                arrays = []
                for values, field in zip(columns, schema, strict=True):
                    if pa.types.is_boolean(field.type):  # SQLite has no booleans: 0/1
                        values = [None if v is None else bool(v) for v in values]
                    arrays.append(pa.array(values, type=field.type))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        finally:
            db.close()


class UsageDbSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("txdilation_usage_db")`` with options ``path``, ``table``,
    ``upto`` (and ``after``, ``source_file``) and the table's bronze schema (minus ``day``)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema: Any) -> _Reader:
        return _Reader(dict(self.options), schema)


def read_table(
    spark: Any, path: str, table: str, schema: Any, *, after: int, upto: int, source_file: str
) -> Any:
    """The rows ``after < rowid <= upto`` of ``table`` (``client_versions`` deduplicated) as a
    DataFrame of ``schema`` (whose last column is ``source_file``)."""
    spark.dataSource.register(UsageDbSource)
    return (
        spark.read.format(NAME)
        .schema(schema)
        .option("path", path)
        .option("table", table)
        .option("after", str(after))
        .option("upto", str(upto))
        .option("source_file", source_file)
        .load()
    )


__all__ = ["NAME", "QUERIES", "UsageDbSource", "max_rowid", "read_table"]
