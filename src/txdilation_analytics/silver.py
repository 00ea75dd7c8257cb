"""Silver: good telemetry events -> ordered session events, attempts, generations, sessions.

Pure ``DataFrame -> DataFrame`` functions using Spark built-ins (windows, ``min_by``/``max_by``,
exact ``percentile``), no Python UDFs.

Definitions (also in docs/analytics.md):

- a *session* is one peer's dilation (one ``session`` id); both peers of a wormhole share a
  ``pair`` id;
- :func:`sessionize` orders each session's events by ``seq`` (then ``ts``), drops repeated
  ``seq`` values (a file ingested twice), fills ``role`` and ``pair`` from the session's own
  later events and carries the last known ``generation`` forward;
- a *generation* is one (session, generation) with at least one event; its ``uptime_s`` is the
  reported one when the connection was lost, else the time from selection to its last event;
- a session is *dilated* when any connection was selected; ``time_to_dilate_s`` is the first
  selection's ``since_request_s`` (or its ``ts`` minus the request's); ``reconnects`` is the
  number of selections after the first; traffic counters are the session's last ``traffic``
  record (they are cumulative); ``throughput_Bps`` is (bytes sent + received) / connected time.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from . import schemas

TRAFFIC = (
    "records_sent",
    "bytes_sent",
    "records_acked",
    "bytes_retransmitted",
    "records_received",
    "bytes_received",
)


def _is(event: str) -> Column:
    return F.col("event") == event


def _when(event: str, col: str) -> Column:
    return F.when(_is(event), F.col(col))


def _conform(df: DataFrame, schema: object) -> DataFrame:
    """Select and cast to exactly the columns of a ``schemas`` StructType."""
    fields = schema.fields  # type: ignore[attr-defined]
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in fields])


def sessionize(events: DataFrame) -> DataFrame:
    """Good bronze events -> events ordered within sessions, with context filled in.

    Adds ``day`` (UTC date of the event). Drops ``source_file``.
    """
    order = Window.partitionBy("session").orderBy("seq", "ts")
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    deduped = (
        events.drop("source_file")
        .withColumn("_prev_seq", F.lag("seq").over(order))
        .filter(F.col("_prev_seq").isNull() | (F.col("_prev_seq") != F.col("seq")))
        .drop("_prev_seq")
    )
    return (
        deduped.withColumn("generation", F.last("generation", ignorenulls=True).over(upto))
        .withColumn("role", F.first("role", ignorenulls=True).over(whole))
        .withColumn("pair", F.first("pair", ignorenulls=True).over(whole))
        .withColumn("day", F.to_date(F.timestamp_seconds(F.col("ts"))))
    )


def attempts(events: DataFrame) -> DataFrame:
    """Sessionized events -> one row per (session, attempt): ``schemas.ATTEMPTS``.

    ``outcome`` is ``unfinished`` for an attempt that started but never ended in the log.
    """
    rows = events.filter(F.col("event").isin("attempt_started", "attempt_ended"))
    out = rows.groupBy("session", "attempt").agg(
        F.first("pair", ignorenulls=True).alias("pair"),
        F.first("role", ignorenulls=True).alias("role"),
        F.min("generation").alias("generation"),
        F.first("hint_type", ignorenulls=True).alias("hint_type"),
        F.first("direction", ignorenulls=True).alias("direction"),
        F.min(_when("attempt_started", "ts")).alias("started_ts"),
        F.max(_when("attempt_ended", "ts")).alias("ended_ts"),
        F.coalesce(F.first("outcome", ignorenulls=True), F.lit("unfinished")).alias("outcome"),
        F.max("connect_s").alias("connect_s"),
        F.max("handshake_s").alias("handshake_s"),
    )
    return _conform(out, schemas.ATTEMPTS)


def _hint_total(event: str) -> Column:
    total = F.aggregate(F.map_values("hints"), F.lit(0).cast("long"), lambda a, x: a + x)
    return F.sum(F.when(_is(event), total))


def generations(events: DataFrame) -> DataFrame:
    """Sessionized events -> one row per (session, generation): ``schemas.GENERATIONS``."""
    sel = _is("connection_selected")
    lost = _is("connection_lost")
    out = (
        events.filter(F.col("generation").isNotNull())
        .groupBy("session", "generation")
        .agg(
            F.first("pair", ignorenulls=True).alias("pair"),
            F.first("role", ignorenulls=True).alias("role"),
            F.min("ts").alias("start_ts"),
            F.max("ts").alias("end_ts"),
            F.count_distinct(_when("attempt_started", "attempt")).alias("attempts"),
            F.coalesce(_hint_total("hints_sent"), F.lit(0)).alias("hints_sent"),
            F.coalesce(_hint_total("hints_received"), F.lit(0)).alias("hints_received"),
            F.bool_or(sel).alias("selected"),
            F.min_by("ts", F.when(sel, F.col("seq"))).alias("selected_ts"),
            F.min_by("hint_type", F.when(sel, F.col("seq"))).alias("hint_type"),
            F.min_by("via_relay", F.when(sel, F.col("seq"))).alias("via_relay"),
            F.min_by("since_request_s", F.when(sel, F.col("seq"))).alias("since_request_s"),
            F.min_by("candidates", F.when(sel, F.col("seq"))).alias("candidates"),
            F.min_by("ts", F.when(lost, F.col("seq"))).alias("lost_ts"),
            F.min_by("reason", F.when(lost, F.col("seq"))).alias("lost_reason"),
            F.min_by("uptime_s", F.when(lost, F.col("seq"))).alias("_lost_uptime_s"),
            F.count(_when("ping_rtt", "seq")).alias("pings"),
        )
        .withColumn(
            "uptime_s",
            F.when(
                F.col("selected"),
                F.coalesce(
                    F.col("_lost_uptime_s"),
                    F.coalesce(F.col("lost_ts"), F.col("end_ts")) - F.col("selected_ts"),
                ),
            ),
        )
    )
    return _conform(out, schemas.GENERATIONS)


def sessions(events: DataFrame, gens: DataFrame) -> DataFrame:
    """Sessionized events and their generations -> one row per session: ``schemas.SESSIONS``."""
    sel = _is("connection_selected")
    first_sel = F.when(sel, F.col("seq"))
    last_traffic = F.when(_is("traffic"), F.col("seq"))
    per_session = events.groupBy("session").agg(
        F.first("pair", ignorenulls=True).alias("pair"),
        F.first("role", ignorenulls=True).alias("role"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.min(_when("dilation_requested", "ts")).alias("requested_ts"),
        F.bool_or(_is("session_ended")).alias("ended"),
        F.max_by("reason", F.when(_is("session_ended"), F.col("seq"))).alias("end_reason"),
        F.min_by("since_request_s", first_sel).alias("_since_request_s"),
        F.min_by("ts", first_sel).alias("_first_selected_ts"),
        F.min_by("via_relay", first_sel).alias("first_via_relay"),
        F.min_by("hint_type", first_sel).alias("first_hint_type"),
        F.count_distinct("generation").alias("generations"),
        F.count(F.when(sel, F.lit(1))).alias("connections"),
        F.count(F.when(sel & F.col("via_relay"), F.lit(1))).alias("relayed_connections"),
        F.count(F.when(_is("connection_lost"), F.lit(1))).alias("connections_lost"),
        *[F.max_by(c, last_traffic).alias(c) for c in TRAFFIC],
        F.count(_when("ping_rtt", "rtt_s")).alias("pings"),
        F.median(_when("ping_rtt", "rtt_s")).alias("rtt_median_s"),
        F.count(F.when(_is("subchannel_opened"), F.lit(1))).alias("subchannels"),
    )
    connected = gens.groupBy("session").agg(F.sum("uptime_s").alias("connected_s"))
    out = (
        per_session.join(connected, "session", "left")
        .withColumn("day", F.to_date(F.timestamp_seconds(F.col("first_ts"))))
        .withColumn("dilated", F.col("connections") > 0)
        .withColumn(
            "time_to_dilate_s",
            F.coalesce(
                F.col("_since_request_s"), F.col("_first_selected_ts") - F.col("requested_ts")
            ),
        )
        .withColumn("reconnects", F.greatest(F.col("connections") - 1, F.lit(0)))
        .withColumn(
            "throughput_Bps",
            F.when(
                (F.col("connected_s") > 0) & ((F.col("bytes_sent") + F.col("bytes_received")) > 0),
                (F.col("bytes_sent") + F.col("bytes_received")) / F.col("connected_s"),
            ),
        )
    )
    return _conform(out, schemas.SESSIONS)


__all__ = ["attempts", "generations", "sessionize", "sessions"]
