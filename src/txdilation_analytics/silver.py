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

import datetime

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


def requested_in(
    events: DataFrame, first: datetime.date | None, last: datetime.date | None
) -> DataFrame:
    """Good bronze events (with ``day``) of the sessions whose first event (``seq`` 0) is on
    a day from ``first`` to ``last`` (None: unbounded)."""
    start = F.col("seq") == 0
    if first is not None:
        start &= F.col("day") >= F.lit(first)
    if last is not None:
        start &= F.col("day") <= F.lit(last)
    return events.join(events.filter(start).select("session"), "session", "left_semi")


def pings(events: DataFrame) -> DataFrame:
    """Sessionized events -> every RTT sample (``ping_rtt`` with an ``rtt_s``):
    ``schemas.PINGS``. A few percent of the events: what every RTT figure is computed from."""
    rows = events.filter(_is("ping_rtt") & F.col("rtt_s").isNotNull())
    return _conform(rows, schemas.PINGS)


def _vocabulary(col: str) -> list[str]:
    return [v for v in schemas.event_rules().enums[col] if v is not None]


def _code(col: str) -> Column:
    """An enum string column as its 1-based index in the schema's vocabulary (NULL stays NULL;
    bronze admits no other value). Aggregated as numbers, these keep the aggregation buffers
    fixed-width, so Spark aggregates by hashing instead of sorting every event."""
    return F.array_position(F.array(*[F.lit(v) for v in _vocabulary(col)]), F.col(col))


def _decode(code: Column, col: str) -> Column:
    """The inverse of :func:`_code`."""
    values = F.array(*[F.lit(v) for v in _vocabulary(col)])
    return F.when(code > 0, F.element_at(values, code.cast("int")))


def attempts(events: DataFrame) -> DataFrame:
    """Sessionized events -> one row per (session, attempt): ``schemas.ATTEMPTS``.

    ``outcome`` is ``unfinished`` for an attempt that started but never ended in the log.
    (``pair`` and ``role`` are the same on every event of a session once sessionized: they
    are grouped by, not aggregated.)
    """
    rows = events.filter(F.col("event").isin("attempt_started", "attempt_ended"))
    out = rows.groupBy("session", "attempt", "pair", "role").agg(
        F.min("generation").alias("generation"),
        _decode(F.first(_code("hint_type"), ignorenulls=True), "hint_type").alias("hint_type"),
        _decode(F.first(_code("direction"), ignorenulls=True), "direction").alias("direction"),
        F.min(_when("attempt_started", "ts")).alias("started_ts"),
        F.max(_when("attempt_ended", "ts")).alias("ended_ts"),
        F.coalesce(
            _decode(F.first(_code("outcome"), ignorenulls=True), "outcome"), F.lit("unfinished")
        ).alias("outcome"),
        F.max("connect_s").alias("connect_s"),
        F.max("handshake_s").alias("handshake_s"),
    )
    return _conform(out, schemas.ATTEMPTS)


def _hint_total(event: str) -> Column:
    total = F.aggregate(F.map_values("hints"), F.lit(0).cast("long"), lambda a, x: a + x)
    return F.sum(F.when(_is(event), total))


def generations(events: DataFrame) -> DataFrame:
    """Sessionized events -> one row per (session, generation): ``schemas.GENERATIONS``.

    ``attempts`` counts the generation's ``attempt_started`` records (one per attempt: a line
    ingested twice was dropped by :func:`sessionize`).
    """
    sel = _is("connection_selected")
    lost = _is("connection_lost")
    first_sel = F.when(sel, F.col("seq"))
    first_lost = F.when(lost, F.col("seq"))
    upgrade = _is("path_changed") & (F.col("reason") == "upgrade")
    first_move = F.when(upgrade, F.col("seq"))
    out = (
        events.filter(F.col("generation").isNotNull())
        .groupBy("session", "generation", "pair", "role")
        .agg(
            F.min("ts").alias("start_ts"),
            F.max("ts").alias("end_ts"),
            F.count(_when("attempt_started", "attempt")).alias("attempts"),
            F.coalesce(_hint_total("hints_sent"), F.lit(0)).alias("hints_sent"),
            F.coalesce(_hint_total("hints_received"), F.lit(0)).alias("hints_received"),
            F.bool_or(sel).alias("selected"),
            F.min_by("ts", first_sel).alias("selected_ts"),
            _decode(F.min_by(_code("hint_type"), first_sel), "hint_type").alias("hint_type"),
            F.min_by("via_relay", first_sel).alias("via_relay"),
            F.min_by("since_request_s", first_sel).alias("since_request_s"),
            F.min_by("candidates", first_sel).alias("candidates"),
            F.min_by("ts", first_lost).alias("lost_ts"),
            _decode(F.min_by(_code("reason"), first_lost), "reason").alias("lost_reason"),
            F.min_by("uptime_s", first_lost).alias("_lost_uptime_s"),
            F.count(_when("ping_rtt", "seq")).alias("pings"),
            F.bool_or(upgrade).alias("upgraded"),
            F.min_by("after_s", first_move).alias("upgraded_after_s"),
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
        # a generation selected on the relay stays there until its path moves to a direct
        # connection (path_changed: once, never back); one selected direct is direct throughout
        .withColumn(
            "relay_s",
            F.when(
                F.col("selected"),
                F.when(
                    F.col("via_relay"),
                    F.least(
                        F.col("uptime_s"), F.coalesce(F.col("upgraded_after_s"), F.col("uptime_s"))
                    ),
                ).otherwise(F.lit(0.0)),
            ),
        )
        .withColumn("direct_s", F.col("uptime_s") - F.col("relay_s"))
    )
    return _conform(out, schemas.GENERATIONS)


def sessions(events: DataFrame, gens: DataFrame) -> DataFrame:
    """Sessionized events and their generations -> one row per session: ``schemas.SESSIONS``.

    ``generations`` and ``connected_s`` come from ``gens``; the RTT median from the session's
    ``ping_rtt`` records alone (an exact median, aggregated apart from the other columns);
    ``please_received`` and ``hints_received`` say how far an undilated session got
    (:mod:`.failures`).
    """
    sel = _is("connection_selected")
    first_sel = F.when(sel, F.col("seq"))
    last_traffic = F.when(_is("traffic"), F.col("seq"))
    per_session = events.groupBy("session", "pair", "role").agg(
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.min(_when("dilation_requested", "ts")).alias("requested_ts"),
        F.bool_or(_is("session_ended")).alias("ended"),
        _decode(
            F.max_by(_code("reason"), F.when(_is("session_ended"), F.col("seq"))), "reason"
        ).alias("end_reason"),
        F.min_by("since_request_s", first_sel).alias("_since_request_s"),
        F.min_by("ts", first_sel).alias("_first_selected_ts"),
        F.min_by("via_relay", first_sel).alias("first_via_relay"),
        _decode(F.min_by(_code("hint_type"), first_sel), "hint_type").alias("first_hint_type"),
        F.count(F.when(sel, F.lit(1))).alias("connections"),
        F.count(F.when(sel & F.col("via_relay"), F.lit(1))).alias("relayed_connections"),
        F.count(F.when(_is("connection_lost"), F.lit(1))).alias("connections_lost"),
        *[F.max_by(c, last_traffic).alias(c) for c in TRAFFIC],
        F.count(_when("ping_rtt", "rtt_s")).alias("pings"),
        F.count(F.when(_is("subchannel_opened"), F.lit(1))).alias("subchannels"),
        F.bool_or(_is("please_received")).alias("please_received"),
        F.count(F.when(_is("hints_received"), F.lit(1))).alias("hints_received"),
        F.bool_or(F.coalesce(F.col("via_mapping"), F.lit(False))).alias("direct_via_mapping"),
    )
    rtt = (
        events.filter(_is("ping_rtt") & F.col("rtt_s").isNotNull())
        .groupBy("session")
        .agg(F.median("rtt_s").alias("rtt_median_s"))
    )
    per_gen = gens.groupBy("session").agg(
        F.sum("uptime_s").alias("connected_s"),
        F.count(F.lit(1)).alias("generations"),
        F.sum("relay_s").alias("relay_s"),
        F.sum("direct_s").alias("direct_s"),
        F.count(F.when(F.col("upgraded"), F.lit(1))).alias("upgrades"),
    )
    out = (
        per_session.join(per_gen, "session", "left")
        .join(rtt, "session", "left")
        .withColumn("generations", F.coalesce(F.col("generations"), F.lit(0)))
        .withColumn("upgrades", F.coalesce(F.col("upgrades"), F.lit(0)))
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


__all__ = ["attempts", "generations", "pings", "requested_in", "sessionize", "sessions"]
