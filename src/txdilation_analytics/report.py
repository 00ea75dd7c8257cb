"""The operator report: ``report/index.html``, one self-contained page rendered with Jinja2.

Layer: pure rendering (no Spark): :func:`render_html` takes ``summary.json``'s dict, the
:class:`~.report_data.ReportData` collected by :mod:`.report_data` and a :class:`Meta`
(inputs, generation time, versions), draws the charts (:mod:`.charts`, inline SVG) and fills
``templates/report.html.j2``. Numbers reach the page only through the :mod:`.humanize`
filters (``percent``, ``duration``, ``rate``, ``size``, ``count``, ``number``), so no raw
float or dict is ever shown. The page has no script and loads nothing: it can be mailed,
archived or opened from HDFS as is.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import charts, humanize
from .failures import REASONS
from .report_data import ReportData

TITLE = "txdilation analytics report"

SOURCES = {
    "events": "txdilation events",
    "mailbox_usage_db": "mailbox server usage DB",
    "transit_log": "transit relay log",
    "transit_usage_db": "transit relay usage DB",
    "client_timing": "stock client timing",
}
"""Input source -> how the page names it (beside its option, ``--`` + the source's name)."""
_RANGE_OF = {"transit_log": "transit", "transit_usage_db": "transit"}

OUTCOMES = (
    "selected",
    "superseded",
    "cancelled",
    "connect_failed",
    "timeout",
    "handshake_failed",
    "other",
    "unfinished",
)
"""Attempt outcomes in the order of the attempts table (others are appended)."""

MAILBOX_RESULTS = {
    "happy": "both sides came and closed normally",
    "lonely": "only one side came, or a side closed 'lonely'",
    "quiet": "no side came",
    "errory": "a side closed with an error",
    "scary": "a side saw a wrong code (key confirmation failed)",
    "pruney": "pruned by the server after inactivity",
    "crowded": "more than two sides came",
}
NAMEPLATE_RESULTS = {
    "happy": "claimed by both sides",
    "lonely": "claimed by one side only",
    "pruney": "pruned by the server after inactivity",
    "crowded": "claimed by more than two sides",
}
RELAY_MOODS = {
    "happy": "two sides met and were relayed (one row per pair)",
    "lonely": "waited for a partner that never came",
    "redundant": "a spare connection dropped when another one of its side was paired",
    "impatient": "sent data before its partner arrived",
    "errory": "bad handshake, or data before the handshake",
    "jilted": "its partner closed first (recorded only when the partner was not happy)",
    "empty": "closed before sending a handshake",
}
LOSS_REASONS = {
    "closed": "closed cleanly (the wormhole was closed)",
    "peer_closed": "the peer closed the connection",
    "timeout": "the connection went silent (no PONG) and was given up",
    "protocol_error": "a protocol error on the connection",
    "network_error": "the connection broke (reset, unreachable, ...)",
    "stopped": "dilation was stopped",
    "other": "any other reason",
}


FORMATS = {
    "percent": humanize.percent,
    "duration": humanize.duration,
    "rate": humanize.rate,
    "size": humanize.size,
    "count": humanize.count,
    "number": humanize.number,
}
"""The template's number filters (also ``human(kind)``, e.g. ``x | human("duration")``)."""


@dataclass(frozen=True)
class InputInfo:
    """One ingested source, from ``bronze/_stats/<source>.json``."""

    source: str
    location: str
    rows: int
    bad_lines: int


@dataclass(frozen=True)
class Meta:
    """What the header says besides the data: inputs, when, by which versions, where."""

    inputs: Sequence[InputInfo] = ()
    generated_at: datetime.datetime = field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc)
    )
    txdilation_version: str = ""
    spark: str = ""
    output: str = ""
    selected: str | None = None  # the days asked for (--from/--to), None for all


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("txdilation_analytics", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FORMATS, human=lambda value, kind: FORMATS[kind](value))
    env.globals["missing"] = humanize.MISSING
    return env


def _known_first(counts: Mapping[str, int], known: Mapping[str, str]) -> dict[str, int]:
    """``counts`` with the known results first, in their documented order, then the others."""
    names = [k for k in known if k in counts] + sorted(k for k in counts if k not in known)
    return {name: counts[name] for name in names}


def _ordered(counts: Mapping[str, int], known: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows of a result table: count, share and meaning, in :func:`_known_first` order."""
    total = sum(counts.values())
    return [
        {
            "name": name,
            "count": counts[name],
            "share": counts[name] / total if total else None,
            "meaning": known.get(name, "not a documented value"),
        }
        for name in _known_first(counts, known)
    ]


def span(first: str, last: str) -> str:
    """A range of ISO days joined by an en dash, or one day alone."""
    return first if first == last else f"{first} \N{EN DASH} {last}"


def _covered(data: ReportData) -> dict[str, Any] | None:
    if not data.ranges:
        return None
    first = min(a for a, _ in data.ranges.values())
    last = max(b for _, b in data.ranges.values())
    days = (datetime.date.fromisoformat(last) - datetime.date.fromisoformat(first)).days + 1
    return {"span": span(first, last), "days": days}


def _inputs(meta: Meta, data: ReportData) -> list[dict[str, Any]]:
    out = []
    for info in meta.inputs:
        days = data.ranges.get(_RANGE_OF.get(info.source, info.source))
        out.append(
            {
                "name": SOURCES.get(info.source, info.source),
                "option": "--" + info.source.replace("_", "-"),
                "location": info.location,
                "rows": info.rows,
                "bad_lines": info.bad_lines,
                "days": span(*days) if days else humanize.MISSING,
            }
        )
    return out


def _failures(data: ReportData, undilated_total: int) -> list[dict[str, Any]]:
    by_reason: dict[str, dict[str, int]] = {}
    for reason, end, n in data.undilated:
        ends = by_reason.setdefault(reason, {})
        ends[end] = ends.get(end, 0) + n
    rows = []
    for reason in [r for r in REASONS if r in by_reason] + sorted(set(by_reason) - set(REASONS)):
        ends = by_reason[reason]
        n = sum(ends.values())
        rows.append(
            {
                "reason": reason,
                "sessions": n,
                "share": n / undilated_total if undilated_total else None,
                "ended": ", ".join(
                    f"{'no end recorded' if e == 'null' else e} {humanize.count(c)}"
                    for e, c in sorted(ends.items())
                ),
                "meaning": REASONS.get(reason, ""),
            }
        )
    return rows


def _attempt_table(counts: Sequence[tuple[str, str, str, int]]) -> dict[str, Any]:
    """Attempts as rows (hint type, direction) x columns (outcome), with row totals."""
    seen = {o for _, _, o, _ in counts}
    columns = [o for o in OUTCOMES if o in seen] + sorted(seen - set(OUTCOMES))
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for hint, direction, outcome, n in counts:
        cells.setdefault((hint, direction), {})[outcome] = n
    rows = [
        {
            "hint": hint,
            "direction": direction,
            "cells": [by.get(o, 0) for o in columns],
            "total": sum(by.values()),
        }
        for (hint, direction), by in sorted(cells.items())
    ]
    return {"columns": columns, "rows": rows}


def _charts(summary: Mapping[str, Any], data: ReportData) -> dict[str, str | None]:
    p = data.paths
    return {
        "volume": charts.daily_volume(data.daily, "volume"),
        "ttd_daily": charts.daily_lines(
            data.daily,
            (("ttd_p50", "p50"), ("ttd_p90", "p90")),
            humanize.duration,
            "time to dilate",
            "ttd_daily",
        ),
        "losses_daily": charts.daily_stacked(
            data.daily, "losses", ("reconnects", "reconnects"), "connections", "losses_daily"
        ),
        "ttd": charts.cdf(
            {"direct": p["direct"].time_to_dilate, "relay": p["relay"].time_to_dilate},
            humanize.duration,
            "time to dilate (first connection's path)",
            "ttd",
        ),
        "rtt": charts.cdf(
            {"direct": p["direct"].rtt, "relay": p["relay"].rtt},
            humanize.duration,
            "ping round-trip time (the connection's path)",
            "rtt",
        ),
        "throughput": charts.cdf(
            {path: p[path].throughput for path in ("direct", "relay", "mixed")},
            humanize.rate,
            "throughput per session (paths it used)",
            "throughput",
        ),
        "servers": charts.categories(
            {
                "mailbox": _known_first(summary["mailbox_results"], MAILBOX_RESULTS),
                "nameplate": _known_first(summary["nameplate_results"], NAMEPLATE_RESULTS),
                "relay": _known_first(summary["transit_results"], RELAY_MOODS),
            },
            "servers",
        ),
    }


def render_html(summary: Mapping[str, Any], data: ReportData, meta: Meta | None = None) -> str:
    """The report page (one self-contained HTML document).

    :param summary: the ``summary.json`` document (:func:`~.summary.build_summary`).
    :param data: what :func:`~.report_data.collect` gathered.
    :param meta: inputs, generation time and versions for the header.
    """
    from markupsafe import Markup

    meta = meta or Meta()
    env = _environment()
    undilated_total = summary["sessions"] - summary["sessions_dilated"]
    paths = {
        name: {
            "stats": stats,
            "ttd": charts.marks(stats.time_to_dilate),
            "rtt": charts.marks(stats.rtt),
            "throughput": charts.marks(stats.throughput),
        }
        for name, stats in data.paths.items()
    }
    sections = [
        {
            "anchor": section.anchor,
            "title": section.title,
            "body": Markup(env.get_template(section.template).render(data=context)),
        }
        for section, context in data.sections
    ]
    figures = _charts(summary, data)
    return str(
        env.get_template("report.html.j2").render(
            title=TITLE,
            s=summary,
            meta=meta,
            generated=meta.generated_at.strftime("%Y-%m-%d %H:%M UTC"),
            covered=_covered(data),
            inputs=_inputs(meta, data),
            charts={k: Markup(v) if v is not None else None for k, v in figures.items()},
            undilated_total=undilated_total,
            failures=_failures(data, undilated_total),
            undilated_attempts=_attempt_table(data.undilated_attempts),
            attempts=_attempt_table(data.attempts),
            daily=data.daily,
            loss_reasons=LOSS_REASONS,
            paths=paths,
            mailbox=_ordered(summary["mailbox_results"], MAILBOX_RESULTS),
            nameplate=_ordered(summary["nameplate_results"], NAMEPLATE_RESULTS),
            relay=_ordered(summary["transit_results"], RELAY_MOODS),
            sections=sections,
        )
    )


__all__ = ["SOURCES", "TITLE", "InputInfo", "Meta", "render_html"]
