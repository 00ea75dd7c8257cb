"""The run's headline numbers: ``report/summary.json``.

Layer: actions over silver/bronze tables (each function runs a few small Spark jobs and returns
plain Python values). Metric definitions are those of :mod:`.silver` and :mod:`.gold`; overall
percentiles are exact and computed over all rows (not merged from daily ones).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .gold import quantiles, session_metrics, with_session_rates
from .quantiles import Quantiles

SUMMARY_SCHEMA = "txdilation-analytics-summary/1"

PATH_TIME_KEYS = ("time_on_path_s", "relay_time_share", "path_upgrades")
"""Keys added with the path upgrades (same schema version: nothing removed or changed), which
``summary.json`` lists after every earlier key."""
MAPPING_KEYS = ("sessions_direct_via_mapping",)
"""Keys added with port mapping (issue 31), listed after every earlier key."""


def counts_by(df: DataFrame, key: str) -> dict[str, int]:
    """``{value of key: rows}``, sorted by key (NULL keys reported as ``"null"``)."""
    rows = df.groupBy(key).count().collect()
    return dict(sorted((str(r[key]) if r[key] is not None else "null", r["count"]) for r in rows))


def _pq(values: list[float | None] | None, names: tuple[str, ...]) -> dict[str, float | None]:
    values = values or [None] * len(names)
    return {n: (float(v) if v is not None else None) for n, v in zip(names, values, strict=True)}


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def session_summary(
    sessions: DataFrame, pings: DataFrame, exact: Quantiles | None = None
) -> dict[str, Any]:
    """The session metrics of the summary (from silver sessions and silver pings).

    :param exact: how whole-column percentiles are computed (:mod:`.quantiles`); None: inside
        the aggregations, with Spark's ``percentile`` (the fewest jobs, for small runs).
    """
    row = with_session_rates(sessions.agg(*session_metrics(exact is None))).first()
    assert row is not None
    if exact is None:
        rtt = pings.agg(
            F.count(F.lit(1)).alias("n"), quantiles("rtt_s", (0.5, 0.9)).alias("q")
        ).first()
        assert rtt is not None
        rtt_n, rtt_q = int(rtt["n"]), rtt["q"]
        ttd = [row[f"time_to_dilate_p{p}_s"] for p in (50, 90, 99)]
        tput = [row[f"throughput_p{p}_Bps"] for p in (50, 90)]
    else:
        rtt_n, rtt_q = int(pings.count()), exact(pings, "rtt_s", (0.5, 0.9))
        ttd = exact(sessions, "time_to_dilate_s", (0.5, 0.9, 0.99))
        tput = exact(sessions, "throughput_Bps", (0.5, 0.9))
    pairs = sessions.agg(
        F.count_distinct("pair").alias("pairs"),
        F.min("day").alias("first_day"),
        F.max("day").alias("last_day"),
    ).first()
    assert pairs is not None
    return {
        "sessions": int(row["sessions"]),
        "sessions_dilated": int(row["sessions_dilated"]),
        "dilation_success_rate": _float(row["dilation_success_rate"]),
        "time_to_dilate_s": _pq(ttd, ("p50", "p90", "p99")),
        "relay_share": _float(row["relay_share"]),
        "time_on_path_s": {
            "relay": _float(row["relay_s"]) or 0.0,
            "direct": _float(row["direct_s"]) or 0.0,
        },
        "relay_time_share": _float(row["relay_time_share"]),
        "path_upgrades": int(row["upgrades"] or 0),
        "reconnects_per_session": _float(row["reconnects_per_session"]),
        "generations_total": int(row["generations"] or 0),
        "retransmitted_bytes_ratio": _float(row["retransmitted_bytes_ratio"]),
        "throughput_Bps": _pq(tput, ("p50", "p90")),
        "rtt_s": _pq(rtt_q, ("p50", "p90")),
        "rtt_samples": rtt_n,
        "bytes_sent_total": int(row["bytes_sent"] or 0),
        "bytes_retransmitted_total": int(row["bytes_retransmitted"] or 0),
        "pairs": int(pairs["pairs"]),
        "days": {
            "first": pairs["first_day"].isoformat() if pairs["first_day"] else None,
            "last": pairs["last_day"].isoformat() if pairs["last_day"] else None,
        },
        "sessions_direct_via_mapping": int(row["sessions_via_mapping"] or 0),
    }


def server_summary(
    mailboxes: DataFrame, nameplates: DataFrame, transit: DataFrame
) -> dict[str, Any]:
    """The server metrics of the summary (mailbox usage DB, relay log/DB), in one job."""
    parts = [
        mailboxes.select(F.lit("mailbox_results").alias("kind"), F.col("result").alias("key"),
                         F.lit(0).cast("long").alias("bytes")),
        nameplates.select(F.lit("nameplate_results").alias("kind"), F.col("result").alias("key"),
                          F.lit(0).cast("long").alias("bytes")),
        transit.select(F.lit("transit_results").alias("kind"), F.col("mood").alias("key"),
                       F.col("total_bytes").alias("bytes")),
    ]  # fmt: skip
    rows = (
        parts[0]
        .unionByName(parts[1])
        .unionByName(parts[2])
        .groupBy("kind", "key")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("bytes").alias("bytes"))
        .collect()
    )
    out: dict[str, Any] = {k: {} for k in ("mailbox_results", "nameplate_results")}
    out["transit_results"] = {}
    for r in rows:
        out[r["kind"]][str(r["key"]) if r["key"] is not None else "null"] = int(r["n"])
    for kind in list(out):
        out[kind] = dict(sorted(out[kind].items()))
    out["transit_bytes_total"] = sum(
        int(r["bytes"] or 0) for r in rows if r["kind"] == "transit_results"
    )
    return out


def timing_summary(timing: DataFrame) -> dict[str, Any]:
    """How many stock timing files and events were read, and median phase durations."""
    with_duration = timing.withColumn("duration_s", F.col("stop") - F.col("start"))
    medians = (
        with_duration.filter(F.col("duration_s").isNotNull())
        .groupBy("name")
        .agg(F.median("duration_s").alias("p50"))
        .collect()
    )
    head = timing.agg(
        F.count_distinct("source_file").alias("files"), F.count(F.lit(1)).alias("events")
    ).first()
    assert head is not None
    return {
        "files": int(head["files"]),
        "events": int(head["events"]),
        "duration_p50_s": dict(sorted((r["name"], float(r["p50"])) for r in medians)),
    }


def build_summary(
    sessions: DataFrame,
    pings: DataFrame,
    mailboxes: DataFrame,
    nameplates: DataFrame,
    transit: DataFrame,
    timing: DataFrame,
    corrupt_by_source: dict[str, int],
    exact: Quantiles | None = None,
) -> dict[str, Any]:
    """The whole ``summary.json`` document (see docs/analytics.md for every key); ``exact``
    as for :func:`session_summary`."""
    out: dict[str, Any] = {"schema": SUMMARY_SCHEMA}
    out.update(session_summary(sessions, pings, exact))
    out.update(server_summary(mailboxes, nameplates, transit))
    out["client_timing"] = timing_summary(timing)
    out["corrupt_lines"] = sum(corrupt_by_source.values())
    out["corrupt_lines_by_source"] = dict(sorted(corrupt_by_source.items()))
    return out


__all__ = [
    "SUMMARY_SCHEMA",
    "build_summary",
    "counts_by",
    "server_summary",
    "session_summary",
    "timing_summary",
]
