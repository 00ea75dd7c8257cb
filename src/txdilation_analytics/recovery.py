"""The report's "Recovery gaps" section: how long applications heard nothing when a link died.

Layer: one Spark job over silver ``events`` (:func:`gap_rows`) and plain-Python formatting
(:func:`section_data`). It reads the ``recovered`` records (docs/telemetry.md, "Recoveries"):
one per link selected after a loss, with ``died`` (the lost path), ``noticed_by`` and
``gap_s`` (from the last record received on the lost link, or its loss, to the new selection).

Invariants:

- logs written before the ``recovered`` event existed have none: then :func:`collect` returns
  None and the page has no such section;
- every row is one group of recoveries: all of them, then one per ``noticed_by`` value, then
  one per lost path, each in a fixed order (values outside the vocabularies last, by name);
- a recovery without ``gap_s`` (a clock that went back) counts, but is in no percentile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from . import humanize
from .gold import quantiles

if TYPE_CHECKING:
    from .report_data import ReportTables

ANCHOR = "recovery-gaps"
TITLE = "Recovery gaps"
NOTICED_BY_ORDER = ("probe", "liveness", "network_change", "peer_report", "connection_closed")
PATH_ORDER = ("direct", "relay")
COLUMNS = ["recoveries", "", "count", "gap p50", "gap p90", "gap max"]


@dataclass(frozen=True)
class GapRow:
    """One group's distribution of gaps (seconds; None when no gap was recorded)."""

    by: str  # "all", "noticed_by" or "died"
    value: str  # the group's value ("" for all)
    count: int
    p50: float | None
    p90: float | None
    max: float | None


def _order(by: str, value: str) -> tuple[int, int, str]:
    groups = {"all": (), "noticed_by": NOTICED_BY_ORDER, "died": PATH_ORDER}
    known = groups[by]
    rank = known.index(value) if value in known else len(known)
    return (list(groups).index(by), rank, value)


def gap_rows(t: ReportTables) -> list[GapRow]:
    """Spark: the distribution of ``gap_s`` over all recoveries, per ``noticed_by`` and per
    lost path (one aggregation over the ``recovered`` events, grouped by ``GROUPING SETS``)."""
    recovered = t.events.filter(F.col("event") == "recovered").select(
        F.coalesce(F.col("noticed_by"), F.lit("other")).alias("noticed_by"),
        F.coalesce(F.col("died"), F.lit("other")).alias("died"),
        "gap_s",
    )
    rows = (
        recovered.cube("noticed_by", "died")
        .agg(
            F.count(F.lit(1)).alias("n"),
            quantiles("gap_s", (0.5, 0.9)).alias("q"),
            F.max("gap_s").alias("max"),
            F.grouping("noticed_by").alias("g_noticed"),
            F.grouping("died").alias("g_died"),
        )
        .filter(F.col("g_noticed") + F.col("g_died") >= 1)  # all, per noticed_by, per path
        .collect()
    )
    out = []
    for r in rows:
        if r["g_noticed"] and r["g_died"]:
            by, value = "all", ""
        elif r["g_died"]:
            by, value = "noticed_by", r["noticed_by"]
        else:
            by, value = "died", r["died"]
        q = r["q"] or [None, None]
        out.append(GapRow(by, value, int(r["n"]), q[0], q[1], r["max"]))
    return sorted(out, key=lambda g: _order(g.by, g.value))


_LABELS = {"all": "all", "noticed_by": "noticed by", "died": "path that died"}


def section_data(rows: list[GapRow]) -> Mapping[str, Any] | None:
    """The table template's data for ``rows`` (None when there is no recovery)."""
    if not rows:
        return None
    return {
        "id": ANCHOR + "-table",
        "intro": (
            "Each time a new link was selected after the previous one was lost: the gap is "
            "from the last record received on the lost link (or its loss) to the new "
            "selection, i.e. how long the application heard nothing."
        ),
        "columns": COLUMNS,
        "rows": [
            [
                _LABELS[g.by],
                g.value,
                humanize.count(g.count),
                humanize.duration(g.p50),
                humanize.duration(g.p90),
                humanize.duration(g.max),
            ]
            for g in rows
        ],
        "notes": [
            "Noticed by: probe (an unanswered probe of unacknowledged records), liveness "
            "(nothing heard for 1.5 ping intervals), network_change (our addresses or routes "
            "changed), peer_report (the peer said the link was dead), connection_closed (TCP "
            "reported the connection closed or failed)."
        ],
    }


def collect(t: ReportTables) -> Mapping[str, Any] | None:
    """The section's ``collect`` (see ``report_data.Section``)."""
    return section_data(gap_rows(t))


__all__ = ["ANCHOR", "TITLE", "GapRow", "collect", "gap_rows", "section_data"]
