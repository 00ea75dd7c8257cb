"""Metrics computed with plain ``json`` from event files, by the definitions of docs/analytics.md.

Shared by the analytics tests that check the pipeline against numbers it did not compute
(this module's own code, not the pipeline's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any


def percentile(values: Iterable[float], p: float) -> float | None:
    """Exact percentile with linear interpolation between the closest ranks (None if empty)."""
    xs = sorted(values)
    if not xs:
        return None
    rank = p * (len(xs) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return xs[low] + (xs[high] - xs[low]) * (rank - low)


def rate(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, None when the denominator is 0 (as the pipeline's rates)."""
    return numerator / denominator if denominator else None


def read_event_files(paths: Iterable[str]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Each session's records in ``seq`` order (a repeated ``seq`` kept once), and how many
    lines were not JSON objects."""
    by_session: dict[str, dict[int, dict[str, Any]]] = {}
    corrupt = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    corrupt += 1
                    continue
                if not isinstance(record, dict):
                    corrupt += 1
                    continue
                by_session.setdefault(record["session"], {}).setdefault(record["seq"], record)
    return {s: [by_seq[k] for k in sorted(by_seq)] for s, by_seq in by_session.items()}, corrupt


def connected_seconds(records: list[dict[str, Any]]) -> float:
    """Summed uptime of the session's connections: the loss's ``uptime_s`` if reported, else
    from the selection to the loss (or to the generation's last record)."""
    by_generation: dict[int, list[dict[str, Any]]] = {}
    generation = None
    for r in records:
        if r.get("generation") is not None:
            generation = r["generation"]
        if generation is not None:
            by_generation.setdefault(generation, []).append(r)
    total = 0.0
    for rs in by_generation.values():
        selected = [r for r in rs if r["event"] == "connection_selected"]
        if not selected:
            continue
        lost = [r for r in rs if r["event"] == "connection_lost"]
        if lost and lost[0].get("uptime_s") is not None:
            total += lost[0]["uptime_s"]
        else:
            total += (lost[0]["ts"] if lost else rs[-1]["ts"]) - selected[0]["ts"]
    return total
