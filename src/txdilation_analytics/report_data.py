"""What the report page shows, collected from the tables as small plain-Python values.

Layer: Spark actions over silver, gold and bronze tables (:func:`collect`), returning a
:class:`ReportData` that :mod:`.report` renders without Spark. Everything collected is small:
at most 99 points per curve, one row per day (and reason), one row per category.

Paths: a *connection's* path is direct or relay (``via_relay`` of its selection); RTT samples
take the path of the connection they were measured on (their generation's); time to dilate
the path of the session's first connection; throughput (a per-session figure) is split into
sessions whose connections were all direct, all relayed, or both (``mixed``).

Extension point: :data:`EXTRA_SECTIONS` holds optional :class:`Section` s (a title, a
``collect`` over :class:`ReportTables` and a template); a section whose ``collect`` returns
``None`` is left out of the page. See docs/analytics.md ("Adding a section").
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import failures, recovery
from .charts import CURVE, marks
from .gold import quantiles

PATHS = ("direct", "relay", "mixed")


@dataclass(frozen=True)
class ReportTables:
    """Every table a report section may read (a missing source is an empty table)."""

    sessions: DataFrame
    events: DataFrame
    pings: DataFrame
    attempts: DataFrame
    generations: DataFrame
    daily_sessions: DataFrame
    daily_attempts: DataFrame
    daily_losses: DataFrame
    mailboxes: DataFrame
    nameplates: DataFrame
    transit: DataFrame
    timing: DataFrame


@dataclass(frozen=True)
class Section:
    """An optional section of the page.

    :param anchor: its HTML id (also the chart-id salt), e.g. ``"recovery-gaps"``.
    :param title: its heading.
    :param collect: Spark actions over the tables -> the template's ``data`` (plain Python),
        or ``None`` when there is nothing to show (then the section is absent).
    :param template: a template under ``templates/``; the default renders
        ``{"intro": str, "columns": [str], "rows": [[str]], "notes": [str]}`` as a table.
    """

    anchor: str
    title: str
    collect: Callable[[ReportTables], Mapping[str, Any] | None]
    template: str = "sections/table.html.j2"


EXTRA_SECTIONS: list[Section] = [Section(recovery.ANCHOR, recovery.TITLE, recovery.collect)]
"""Optional sections, rendered in this order after the built-in ones: the recovery gaps
(``recovered`` events: what died, how it was noticed, the gap; :mod:`.recovery`)."""


@dataclass
class PathStats:
    """One path's distributions (values at :data:`~.charts.CURVE`, empty when no data)."""

    connections: int = 0
    sessions_first: int = 0
    time_to_dilate: list[float] = field(default_factory=list)
    rtt_samples: int = 0
    rtt: list[float] = field(default_factory=list)
    throughput_sessions: int = 0
    throughput: list[float] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything the page needs besides ``summary.json`` (see :func:`collect`)."""

    paths: dict[str, PathStats]
    undilated: list[tuple[str, str, int]]  # (reason, end reason or "null", sessions)
    undilated_attempts: list[tuple[str, str, str, int]]  # (hint, direction, outcome, n)
    attempts: list[tuple[str, str, str, int]]  # every attempt: (hint, direction, outcome, n)
    daily: list[dict[str, Any]]
    ranges: dict[str, tuple[str, str]]  # source -> (first day, last day), UTC
    sections: list[tuple[Section, Mapping[str, Any]]] = field(default_factory=list)


def _str(value: Any) -> str:
    return str(value) if value is not None else "null"


CURVE_ACCURACY = 100_000
"""``percentile_approx`` accuracy of the curves of large runs: rank error under 0.001 %."""


def _curves(
    df: DataFrame, key: str, col: str, approx: bool = False
) -> dict[str, tuple[int, list[float]]]:
    """Per value of ``key``: (rows with ``col``, ``col`` at every :data:`CURVE` percentile):
    exact, or with ``approx`` (large runs: an exact percentile holds every value of a group
    in one buffer) ``percentile_approx`` at :data:`CURVE_ACCURACY`."""
    curve = (
        F.percentile_approx(col, F.array(*[F.lit(p) for p in CURVE]), CURVE_ACCURACY)
        if approx
        else quantiles(col, CURVE)
    )
    rows = (
        df.filter(F.col(key).isNotNull() & F.col(col).isNotNull())
        .groupBy(key)
        .agg(F.count(F.lit(1)).alias("n"), curve.alias("q"))
        .collect()
    )
    return {r[key]: (int(r["n"]), [float(v) for v in r["q"]]) for r in rows}


def _path(via_relay: str) -> Column:
    return F.when(F.col(via_relay), "relay").when(~F.col(via_relay), "direct")


def path_stats(t: ReportTables, approx: bool = False) -> dict[str, PathStats]:
    """Direct vs relay: connections, time to dilate, RTT and throughput per path (curves
    approximate with ``approx``, see :func:`_curves`)."""
    out = {p: PathStats() for p in PATHS}
    selected = t.generations.filter(F.col("selected")).withColumn("path", _path("via_relay"))
    for r in selected.groupBy("path").count().collect():
        if r["path"] is not None:
            out[r["path"]].connections = int(r["count"])
    dilated = t.sessions.filter(F.col("dilated")).withColumn("path", _path("first_via_relay"))
    for path, (n, curve) in _curves(dilated, "path", "time_to_dilate_s", approx).items():
        out[path].sessions_first, out[path].time_to_dilate = n, curve
    pings = t.pings.join(
        selected.select("session", "generation", "path"), ["session", "generation"]
    )
    for path, (n, curve) in _curves(pings, "path", "rtt_s", approx).items():
        out[path].rtt_samples, out[path].rtt = n, curve
    by_session = dilated.withColumn(
        "path",
        F.when(F.col("relayed_connections") == 0, "direct")
        .when(F.col("relayed_connections") == F.col("connections"), "relay")
        .otherwise("mixed"),
    )
    for path, (n, curve) in _curves(by_session, "path", "throughput_Bps", approx).items():
        out[path].throughput_sessions, out[path].throughput = n, curve
    return out


def _ranges(t: ReportTables) -> dict[str, tuple[str, str]]:
    """Per source, the first and last UTC day of its rows, in one job (events: their
    sessions' first and last events, which cover the same days, from the small table)."""

    def days(df: DataFrame, source: str, *cols: str) -> list[DataFrame]:
        return [
            df.select(F.lit(source).alias("source"), F.col(c).alias("t")).filter("t IS NOT NULL")
            for c in cols
        ]

    parts = [
        *days(t.sessions, "events", "first_ts", "last_ts"),
        *days(t.mailboxes, "mailbox_usage_db", "started"),
        *days(t.nameplates, "mailbox_usage_db", "started"),
        *days(t.transit, "transit", "started"),
        *days(t.timing, "client_timing", "start"),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    rows = union.groupBy("source").agg(F.min("t").alias("a"), F.max("t").alias("b")).collect()
    day = datetime.datetime.fromtimestamp
    return {
        r["source"]: (day(r["a"], datetime.timezone.utc).date().isoformat(),
                      day(r["b"], datetime.timezone.utc).date().isoformat())
        for r in rows
    }  # fmt: skip


def daily_rows(daily_sessions: DataFrame, daily_losses: DataFrame) -> list[dict[str, Any]]:
    """One dict per day (every day with sessions or losses), in order: the gold daily session
    figures, ``reconnects`` (losses followed by a reconnect, by day of the loss) and
    ``losses`` (reason -> connections lost that day, graceful ``closed`` ones excluded)."""
    days: dict[str, dict[str, Any]] = {}

    def day(d: Any) -> dict[str, Any]:
        return days.setdefault(
            d.isoformat(),
            {
                "day": d.isoformat(),
                "sessions": 0,
                "sessions_dilated": 0,
                "success": None,
                "relay_share": None,
                "relay_time_share": None,
                "ttd_p50": None,
                "ttd_p90": None,
                "reconnects_per_session": None,
                "reconnects": 0,
                "losses": {},
                "closed": 0,
            },
        )

    for r in daily_sessions.collect():
        day(r["day"]).update(
            sessions=int(r["sessions"]),
            sessions_dilated=int(r["sessions_dilated"]),
            success=r["dilation_success_rate"],
            relay_share=r["relay_share"],
            relay_time_share=r["relay_time_share"],
            ttd_p50=r["time_to_dilate_p50_s"],
            ttd_p90=r["time_to_dilate_p90_s"],
            reconnects_per_session=r["reconnects_per_session"],
        )
    for r in daily_losses.collect():
        row = day(r["day"])
        row["reconnects"] += int(r["reconnected"])
        if r["reason"] == "closed":
            row["closed"] += int(r["losses"])
        else:
            row["losses"][_str(r["reason"])] = int(r["losses"])
    return [days[d] for d in sorted(days)]


def _attempt_counts(df: DataFrame, n: str) -> list[tuple[str, str, str, int]]:
    rows = df.groupBy("hint_type", "direction", "outcome").agg(F.sum(n).alias("n")).collect()
    return sorted(
        (_str(r["hint_type"]), _str(r["direction"]), _str(r["outcome"]), int(r["n"])) for r in rows
    )


def extra_sections(
    t: ReportTables, sections: list[Section]
) -> list[tuple[Section, Mapping[str, Any]]]:
    """Each section with what its ``collect`` returned, leaving out those that returned None
    (nothing to show: the page has no such section)."""
    out = []
    for section in sections:
        data = section.collect(t)
        if data is not None:
            out.append((section, data))
    return out


def collect(
    t: ReportTables, sections: list[Section] | None = None, large: bool = False
) -> ReportData:
    """Run the report's Spark jobs; ``sections`` defaults to :data:`EXTRA_SECTIONS`; ``large``
    runs draw approximate curves (:func:`path_stats`)."""
    lost = failures.undilated(t.sessions, t.attempts).cache()
    try:
        undilated = sorted(
            (r["reason"], _str(r["end_reason"]), int(r["count"]))
            for r in lost.groupBy("reason", "end_reason").count().collect()
        )
        tries = t.attempts.join(lost.select("session"), "session", "left_semi")
        undilated_attempts = _attempt_counts(tries.withColumn("one", F.lit(1)), "one")
    finally:
        lost.unpersist()
    return ReportData(
        paths=path_stats(t, large),
        undilated=undilated,
        undilated_attempts=undilated_attempts,
        attempts=_attempt_counts(t.daily_attempts, "attempts"),
        daily=daily_rows(t.daily_sessions, t.daily_losses),
        ranges=_ranges(t),
        sections=extra_sections(t, EXTRA_SECTIONS if sections is None else sections),
    )


def summary_extras(data: ReportData) -> dict[str, Any]:
    """Keys added to ``summary.json`` beside the original ones: ``undilated_reasons``
    (reason -> sessions) and ``by_path`` (direct/relay/mixed distributions)."""
    reasons: dict[str, int] = {}
    for reason, _, n in data.undilated:
        reasons[reason] = reasons.get(reason, 0) + n
    return {
        "undilated_reasons": dict(sorted(reasons.items())),
        "by_path": {
            path: {
                "connections": s.connections,
                "sessions_first_connection": s.sessions_first,
                "time_to_dilate_s": marks(s.time_to_dilate),
                "rtt_samples": s.rtt_samples,
                "rtt_s": marks(s.rtt),
                "throughput_sessions": s.throughput_sessions,
                "throughput_Bps": marks(s.throughput),
            }
            for path, s in data.paths.items()
        },
    }


__all__ = [
    "EXTRA_SECTIONS",
    "PATHS",
    "PathStats",
    "ReportData",
    "ReportTables",
    "Section",
    "collect",
    "daily_rows",
    "extra_sections",
    "path_stats",
    "summary_extras",
]
