"""Gold: daily aggregates (UTC days) of silver sessions/attempts/events and of server records.

Pure ``DataFrame -> DataFrame`` functions; percentiles are exact (``percentile``).
Rates are NULL when their denominator is 0. ``reconnects_per_session`` divides by dilated
sessions (a session that never connected cannot reconnect); ``relay_share`` is the share of
selected connections (all generations) that went through a relay.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

ORDER = {
    "daily_sessions": ("day",),
    "daily_attempts": ("day", "hint_type", "direction", "outcome"),
    "daily_losses": ("day", "reason"),
    "daily_mailboxes": ("day", "result"),
    "daily_nameplates": ("day", "result"),
    "daily_transit": ("day", "mood"),
}
"""Each gold table's key columns: its rows are written sorted by them (the transforms return
them unordered: ordering is the writer's job, done inside the table's one file)."""


def ratio(numerator: Column, denominator: Column) -> Column:
    """numerator / denominator as DOUBLE, NULL when the denominator is 0 or NULL."""
    return F.when(denominator > 0, numerator.cast("double") / denominator)


def quantiles(col: str, probs: tuple[float, ...]) -> Column:
    """Exact percentiles of ``col`` as an array (NULL entries when there are no values)."""
    return F.percentile(F.col(col), F.array(*[F.lit(p) for p in probs]))


def _day(ts: str) -> Column:
    return F.to_date(F.timestamp_seconds(F.col(ts))).alias("day")


def session_metrics(percentiles: bool = True) -> list[Column]:
    """Aggregations over silver sessions shared by the daily table and the summary (without
    the percentiles when the caller computes them apart: see :mod:`.quantiles`)."""
    dilated = F.col("dilated")
    none = F.lit(None).cast("array<double>")
    return [
        F.count(F.lit(1)).alias("sessions"),
        F.count(F.when(dilated, F.lit(1))).alias("sessions_dilated"),
        (quantiles("time_to_dilate_s", (0.5, 0.9, 0.99)) if percentiles else none).alias("_ttd"),
        F.sum("connections").alias("connections"),
        F.sum("relayed_connections").alias("relayed_connections"),
        F.sum("reconnects").alias("reconnects"),
        F.sum("generations").alias("generations"),
        F.sum("relay_s").alias("relay_s"),
        F.sum("direct_s").alias("direct_s"),
        F.sum("upgrades").alias("upgrades"),
        F.count(F.when(F.col("direct_via_mapping"), F.lit(1))).alias("sessions_via_mapping"),
        F.sum("bytes_sent").alias("bytes_sent"),
        F.sum("bytes_received").alias("bytes_received"),
        F.sum("bytes_retransmitted").alias("bytes_retransmitted"),
        (quantiles("throughput_Bps", (0.5, 0.9)) if percentiles else none).alias("_tput"),
    ]


def with_session_rates(df: DataFrame) -> DataFrame:
    """Turn :func:`session_metrics` columns into rates and named percentiles."""
    return (
        df.withColumn("dilation_success_rate", ratio(F.col("sessions_dilated"), F.col("sessions")))
        .withColumn("time_to_dilate_p50_s", F.col("_ttd")[0])
        .withColumn("time_to_dilate_p90_s", F.col("_ttd")[1])
        .withColumn("time_to_dilate_p99_s", F.col("_ttd")[2])
        .withColumn("relay_share", ratio(F.col("relayed_connections"), F.col("connections")))
        .withColumn(
            "relay_time_share",
            ratio(F.col("relay_s"), F.col("relay_s") + F.col("direct_s")),
        )
        .withColumn("reconnects_per_session", ratio(F.col("reconnects"), F.col("sessions_dilated")))
        .withColumn(
            "retransmitted_bytes_ratio",
            ratio(F.col("bytes_retransmitted"), F.col("bytes_sent")),
        )
        .withColumn("throughput_p50_Bps", F.col("_tput")[0])
        .withColumn("throughput_p90_Bps", F.col("_tput")[1])
        .drop("_ttd", "_tput")
    )


def daily_sessions(sessions: DataFrame, pings: DataFrame) -> DataFrame:
    """Per day: session counts, success rate, time to dilate, relay share (of connections) and
    time on the relay vs direct (``relay_s``, ``direct_s``, ``relay_time_share``; path
    ``upgrades``), bytes, RTT (from silver pings, by the day of the sample)."""
    per_day = with_session_rates(sessions.groupBy("day").agg(*session_metrics()))
    rtt = (
        pings.groupBy("day")
        .agg(F.count(F.lit(1)).alias("rtt_samples"), quantiles("rtt_s", (0.5, 0.9)).alias("_rtt"))
        .select(
            "day",
            "rtt_samples",
            F.col("_rtt")[0].alias("rtt_p50_s"),
            F.col("_rtt")[1].alias("rtt_p90_s"),
        )
    )
    return per_day.join(rtt, "day", "left").fillna(0, subset=["rtt_samples"])


def daily_attempts(attempts: DataFrame) -> DataFrame:
    """Per day, hint type, direction and outcome: attempts and connect/handshake medians."""
    return (
        attempts.withColumn("day", _day("started_ts"))
        .groupBy("day", "hint_type", "direction", "outcome")
        .agg(
            F.count(F.lit(1)).alias("attempts"),
            F.median("connect_s").alias("connect_p50_s"),
            F.median("handshake_s").alias("handshake_p50_s"),
        )
    )


def daily_losses(generations: DataFrame) -> DataFrame:
    """Per day (of the loss) and loss reason: connections lost, and how many of those were
    followed by a reconnect (a later generation of the same session selected a connection).

    A loss not followed by a reconnect ended the session's last connection (``closed`` for a
    graceful close).
    """
    later = F.max(F.when(F.col("selected"), F.col("generation"))).over(
        Window.partitionBy("session")
    )
    return (
        generations.withColumn("_last_selected", later)
        .filter(F.col("lost_ts").isNotNull())
        .withColumn("day", _day("lost_ts"))
        .groupBy("day", F.col("lost_reason").alias("reason"))
        .agg(
            F.count(F.lit(1)).alias("losses"),
            F.count(F.when(F.col("_last_selected") > F.col("generation"), F.lit(1))).alias(
                "reconnected"
            ),
        )
    )


def daily_results(records: DataFrame, result_col: str = "result") -> DataFrame:
    """Per day and result of server rows (mailboxes, nameplates): count and time medians."""
    return (
        records.withColumn("day", _day("started"))
        .groupBy("day", F.col(result_col).alias("result"))
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.median("waiting_time").alias("waiting_p50_s"),
            F.median("total_time").alias("total_p50_s"),
        )
    )


def daily_transit(usage: DataFrame) -> DataFrame:
    """Per day and mood of relay connections: count, bytes, time medians."""
    return (
        usage.withColumn("day", _day("started"))
        .groupBy("day", "mood")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("total_bytes").alias("total_bytes"),
            F.median("waiting_time").alias("waiting_p50_s"),
            F.median("total_time").alias("total_p50_s"),
        )
    )


__all__ = [
    "ORDER",
    "daily_attempts",
    "daily_losses",
    "daily_results",
    "daily_sessions",
    "daily_transit",
    "quantiles",
    "ratio",
    "session_metrics",
    "with_session_rates",
]
