"""What a command prints on stdout when it succeeds: a few lines a person reads.

Layer: pure formatting (no Spark, no I/O) of what a stage returned; numbers go through
:mod:`.humanize`. The figures themselves are in files (``report/summary.json``, the layers'
``_stage.json``), which the last line of each command names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import humanize
from .inputs import is_remote

STAGE_LAYER = {"ingest": "bronze", "sessionize": "silver", "aggregate": "gold"}


def _where(output: str, *parts: str) -> str:
    base = output if is_remote(output) else os.path.abspath(output)
    return "/".join([base.rstrip("/"), *parts])


def _days(days: list[str] | Mapping[str, Any] | None) -> str:
    if isinstance(days, Mapping):
        first, last = days.get("from"), days.get("to")
        if first is None and last is None:
            return "all days"
        return f"sessions requested {first or '...'} to {last or '...'}"
    dated = [d for d in days or [] if d[:1].isdigit()]
    if not dated:
        return "no dated rows"
    return dated[0] if dated[0] == dated[-1] else f"{dated[0]} to {dated[-1]}"


def _n(value: int, one: str, many: str | None = None) -> str:
    return f"{humanize.count(value)} {one if value == 1 else (many or one + 's')}"


def ingest_lines(stats: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per source: files read (new, changed) and skipped, rows, bad lines, days."""
    out = []
    for source, s in stats.items():
        files = [_n(s["files_new"], "new file")]
        if s["files_changed"]:
            files.append(f"{humanize.count(s['files_changed'])} changed")
        if s["files_skipped"]:
            files.append(f"{humanize.count(s['files_skipped'])} already ingested")
        bad = f", {_n(s['bad_lines'], 'bad line')}" if s["bad_lines"] else ""
        out.append(
            f"{source}: {', '.join(files)}; {_n(s['rows'], 'row')}{bad} ({_days(s['days'])})"
        )
    return out


def summary_line(summary: Mapping[str, Any]) -> str:
    """The headline of a report: sessions, days, dilated share, time to dilate, relay share
    (of connections, and of connected time)."""
    days = summary.get("days") or {}
    span = _days([d for d in (days.get("first"), days.get("last")) if d])
    return (
        f"{_n(summary['sessions'], 'session')} ({span}): "
        f"{humanize.percent(summary['dilation_success_rate'])} dilated, time to dilate p50 "
        f"{humanize.duration(summary['time_to_dilate_s']['p50'])}, relay share "
        f"{humanize.percent(summary['relay_share'])}, time on relay "
        f"{humanize.percent(summary.get('relay_time_share'))}"
    )


def result_lines(command: str, result: Any, output: str) -> list[str]:
    """The stdout lines of ``command`` after it returned ``result``."""
    if command == "synth":
        return [
            f"synth: {_n(result['sessions'], 'session')} of events in {result['events']}",
            f"mailbox usage DB: {result['mailbox_usage_db']}",
            f"transit relay log: {result['transit_log']}",
        ]
    if command in ("report", "analyze"):
        return [
            summary_line(result),
            f"report:  {_where(output, 'report', 'index.html')}",
            f"summary: {_where(output, 'report', 'summary.json')}",
        ]
    if command == "ingest":
        return [*ingest_lines(result), f"bronze: {_where(output, 'bronze')}"]
    if command == "sessionize":
        counts = ", ".join(
            _n(result[t], t[:-1]) for t in ("events", "attempts", "generations") if t in result
        )
        return [
            f"{_n(result['sessions'], 'session')} ({counts}; {_days(result.get('days'))})",
            f"silver: {_where(output, 'silver')}",
        ]
    rows = ", ".join(f"{table} {humanize.count(n)}" for table, n in result.items())
    return [f"gold tables (rows): {rows}", f"gold: {_where(output, 'gold')}"]


__all__ = ["ingest_lines", "result_lines", "summary_line"]
