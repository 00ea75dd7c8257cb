"""The operator report: ``report/index.html`` with matplotlib plots embedded as base64 PNG.

:func:`plot_data` runs small Spark jobs (quantile curves, daily rows) and returns plain Python
data; :func:`render_html` turns that and the summary into one self-contained HTML page (no
Spark, no network, no external files). Empty inputs give a note instead of a plot.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .gold import quantiles

CURVE = tuple(round(p / 100, 2) for p in range(1, 100))


def _curve(df: DataFrame, col: str) -> list[float]:
    row = df.filter(F.col(col).isNotNull()).agg(quantiles(col, CURVE).alias("q")).first()
    return [float(v) for v in (row["q"] or [])] if row is not None else []


def plot_data(
    sessions: DataFrame, events: DataFrame, daily: DataFrame, daily_attempts: DataFrame
) -> dict[str, Any]:
    """Collect what the plots need (all small: at most 99 points per curve, one row per day)."""
    dilated = sessions.filter(F.col("dilated"))
    outcomes = (
        daily_attempts.groupBy("hint_type", "outcome").agg(F.sum("attempts").alias("n")).collect()
    )
    return {
        "ttd_direct": _curve(dilated.filter(~F.col("first_via_relay")), "time_to_dilate_s"),
        "ttd_relay": _curve(dilated.filter(F.col("first_via_relay")), "time_to_dilate_s"),
        "rtt": _curve(events.filter(F.col("event") == "ping_rtt"), "rtt_s"),
        "throughput": _curve(sessions, "throughput_Bps"),
        "daily": [
            {
                "day": r["day"].isoformat(),
                "sessions": r["sessions"],
                "success": r["dilation_success_rate"],
                "relay_share": r["relay_share"],
                "reconnects": r["reconnects_per_session"],
            }
            for r in daily.orderBy("day").collect()
        ],
        "attempt_outcomes": sorted(
            (r["hint_type"] or "null", r["outcome"] or "null", int(r["n"])) for r in outcomes
        ),
    }


def _png(draw: Callable[[Any], None]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=90)
    try:
        draw(ax)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _cdf(series: dict[str, list[float]], xlabel: str) -> Callable[[Any], None] | None:
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None

    def draw(ax: Any) -> None:
        for label, values in series.items():
            ax.plot(values, [p * 100 for p in CURVE[: len(values)]], label=label)
        if min(min(v) for v in series.values()) > 0:
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel("percentile")
        ax.grid(alpha=0.3)
        ax.legend()

    return draw


def _bars(counts: dict[str, int], title: str) -> Callable[[Any], None] | None:
    if not counts:
        return None

    def draw(ax: Any) -> None:
        ax.bar(list(counts), list(counts.values()), color="#4477aa")
        ax.set_ylabel("count")
        ax.set_title(title)

    return draw


def _daily(rows: list[dict[str, Any]]) -> Callable[[Any], None] | None:
    if not rows:
        return None

    def draw(ax: Any) -> None:
        days = [r["day"] for r in rows]
        ax.bar(days, [r["sessions"] for r in rows], color="#bbccee", label="sessions")
        ax.set_ylabel("sessions")
        ax.tick_params(axis="x", rotation=45, labelsize=7)
        right = ax.twinx()
        for key, label in (("success", "dilation success"), ("relay_share", "relay share")):
            right.plot(days, [r[key] for r in rows], marker="o", label=label)
        right.set_ylim(0, 1.05)
        right.set_ylabel("rate")
        right.legend(loc="best", fontsize=8)

    return draw


def _outcomes(rows: list[tuple[str, str, int]]) -> Callable[[Any], None] | None:
    if not rows:
        return None

    def draw(ax: Any) -> None:
        hints = sorted({h for h, _, _ in rows})
        outcomes = sorted({o for _, o, _ in rows})
        bottom = [0] * len(hints)
        for outcome in outcomes:
            heights = [sum(n for h, o, n in rows if h == hint and o == outcome) for hint in hints]
            ax.bar(hints, heights, bottom=bottom, label=outcome)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_ylabel("attempts")
        ax.legend(fontsize=7)

    return draw


def render_html(summary: dict[str, Any], data: dict[str, Any]) -> str:
    """One self-contained HTML page: the summary table, then one figure per plot."""
    plots: list[tuple[str, Callable[[Any], None] | None]] = [
        (
            "Time to dilate (first connection)",
            _cdf({"direct": data["ttd_direct"], "relay": data["ttd_relay"]}, "seconds"),
        ),
        ("Sessions per day, success and relay share", _daily(data["daily"])),
        ("Ping round-trip time", _cdf({"rtt": data["rtt"]}, "seconds")),
        ("Throughput per session", _cdf({"throughput": data["throughput"]}, "bytes/s")),
        ("Connection attempts by hint type and outcome", _outcomes(data["attempt_outcomes"])),
        ("Mailbox results", _bars(summary["mailbox_results"], "mailboxes")),
        ("Nameplate results", _bars(summary["nameplate_results"], "nameplates")),
        ("Transit relay moods", _bars(summary["transit_results"], "relay connections")),
    ]
    rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td><code>{html.escape(json.dumps(v))}</code></td></tr>"
        for k, v in summary.items()
    )
    figures = []
    for title, draw in plots:
        body = (
            f'<img alt="{html.escape(title)}" src="data:image/png;base64,{_png(draw)}">'
            if draw is not None
            else "<p><em>no data</em></p>"
        )
        figures.append(f"<section><h2>{html.escape(title)}</h2>{body}</section>")
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        "<title>txdilation analytics report</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "th{text-align:left;padding-right:1em}td code{white-space:pre-wrap}</style>"
        "</head><body><h1>txdilation analytics report</h1>"
        f"<h2>Summary</h2><table>{rows}</table>{''.join(figures)}</body></html>\n"
    )


__all__ = ["CURVE", "plot_data", "render_html"]
