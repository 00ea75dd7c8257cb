"""Bronze: raw rows -> typed rows with a ``bad_reason`` (NULL when the row is good).

Pure ``DataFrame -> DataFrame`` functions. A bad row is kept (so it can be counted per file and
reason) but its string fields are nulled, so nothing unvalidated flows on; the raw text of
unparseable lines is dropped here. Event rules come from the telemetry JSON Schema
(:func:`schemas.event_rules`).

``bad_reason`` values: ``unparseable``, ``wrong_schema``, ``unknown_event``, ``missing_field``,
``bad_value``.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import schemas

TRANSIT_MOODS = ("happy", "lonely", "errory", "redundant", "impatient", "jilted", "empty")


def _any(conditions: list[Column]) -> Column:
    return reduce(lambda a, b: a | b, conditions, F.lit(False))


def _in(col: str, values: tuple[Any, ...]) -> Column:
    """``col`` is one of ``values`` (a None among them admits NULL)."""
    allowed = [v for v in values if v is not None]
    test = F.col(col).isin(allowed)
    return test | F.col(col).isNull() if None in values else test


def event_bad_reason(rules: schemas.EventRules | None = None) -> Column:
    """The ``bad_reason`` expression for one raw telemetry row (NULL when good)."""
    rules = rules or schemas.event_rules()
    events = tuple(rules.required)
    missing_envelope = _any(
        [F.col(c).isNull() for c in rules.envelope_required if c not in ("role",)]
    )
    missing_event_field = _any(
        [
            (F.col("event") == event) & _any([F.col(c).isNull() for c in required])
            for event, required in rules.required.items()
            if required
        ]
    )
    numeric = [name for name, kind in rules.fields if kind in ("integer", "number")]
    bad_value = _any(
        [~_in(name, values) for name, values in rules.enums.items() if name != "schema"]
        + [F.col(name) < 0 for name in numeric]
        + [~F.col("session").rlike(rules.session_pattern)]
        + [F.col("pair").isNotNull() & ~F.col("pair").rlike(rules.pair_pattern)]
        + [
            F.col("hints").isNotNull()
            & ~F.forall(F.map_keys("hints"), lambda k: k.isin(list(rules.enums["hint_type"])))
        ]
    )
    return (
        F.when(F.col(schemas.CORRUPT).isNotNull(), F.lit("unparseable"))
        .when(F.col("schema").isNull() | (F.col("schema") != schemas.SCHEMA), "wrong_schema")
        .when(~F.col("event").isin(list(events)), "unknown_event")
        .when(missing_envelope | missing_event_field, "missing_field")
        .when(bad_value, "bad_value")
    )


def _null_strings_when_bad(df: DataFrame, keep: tuple[str, ...]) -> DataFrame:
    cols = []
    for field in df.schema.fields:
        col = F.col(field.name)
        if field.dataType.typeName() in ("string", "map") and field.name not in keep:
            col = F.when(F.col("bad_reason").isNull(), col)
        cols.append(col.alias(field.name))
    return df.select(*cols)


def validate_events(raw: DataFrame) -> DataFrame:
    """Raw telemetry rows (``sources.read_events``) -> ``schemas.BRONZE_EVENTS`` rows."""
    names = [f.name for f in schemas.BRONZE_EVENTS.fields]
    flagged = raw.withColumn("bad_reason", event_bad_reason())
    return _null_strings_when_bad(flagged.select(*names), ("source_file", "bad_reason"))


def validate_transit(raw: DataFrame, source: str) -> DataFrame:
    """Raw relay rows (log or DB) -> ``schemas.TRANSIT_USAGE`` rows tagged with ``source``."""
    bad = (
        F.when(F.col(schemas.CORRUPT).isNotNull(), F.lit("unparseable"))
        .when(
            F.col("started").isNull() | F.col("total_time").isNull() | F.col("mood").isNull(),
            "missing_field",
        )
        .when(
            ~F.col("mood").isin(list(TRANSIT_MOODS))
            | (F.coalesce(F.col("total_bytes"), F.lit(0)) < 0),
            "bad_value",
        )
    )
    names = [f.name for f in schemas.TRANSIT_USAGE.fields]
    flagged = raw.withColumn("source", F.lit(source)).withColumn("bad_reason", bad)
    return _null_strings_when_bad(flagged.select(*names), ("source", "source_file", "bad_reason"))


def good(df: DataFrame) -> DataFrame:
    """Only the rows without a ``bad_reason``, without that column."""
    return df.filter(F.col("bad_reason").isNull()).drop("bad_reason")


def transit_usage(df: DataFrame) -> DataFrame:
    """Good relay rows, each counted once when the relay wrote both a log and a DB.

    The relay writes the same values to every backend, so a row seen in both sources is the
    same connection; rows are deduplicated on all their values.
    """
    values = ["started", "total_time", "waiting_time", "total_bytes", "mood"]
    return good(df).dropDuplicates(values).select(*values)


def bad_counts(df: DataFrame) -> DataFrame:
    """(source_file, bad_reason, lines) for the bad rows of a bronze table."""
    return (
        df.filter(F.col("bad_reason").isNotNull())
        .groupBy("source_file", "bad_reason")
        .agg(F.count(F.lit(1)).alias("lines"))
    )


__all__ = [
    "TRANSIT_MOODS",
    "bad_counts",
    "event_bad_reason",
    "good",
    "transit_usage",
    "validate_events",
    "validate_transit",
]
