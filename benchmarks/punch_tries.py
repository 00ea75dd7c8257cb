"""
How fast, and how much at the same time, two peers tried their direct hints: read from the
telemetry of ``benchmarks.reach`` runs (``TXDILATION_EVENTS=F python -m benchmarks.reach ...``,
then ``python -m benchmarks.punch_tries F``); issue 31's diagnosis of resetting NATs.

Layer: benchmark infrastructure; prints figures, asserts nothing. The sessions of one run are
those that start within a few seconds of each other (runs are many seconds apart). For each run
that did not end at once, until its first direct link (or 15.5 s): each side's direct tries
per second while it was trying (a try within 20 ms of the last one continues a burst), how
much of that time both sides were trying, and the longest pause in the Leader's tries in the
0.6 s after the relay was selected; and, for each run that never went direct, when each side's
last burst ended.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

Event = dict[str, Any]
Span = tuple[float, float]

GAP = 0.02  # seconds: a try within this of the last one continues its burst
ROLES = ("leader", "follower")


def runs(path: str) -> list[list[Event]]:
    """The events of ``path``, one list per run (sessions that started within 3 s)."""
    sessions: dict[str, list[Event]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            sessions[event["session"]].append(event)
    groups: list[tuple[float, list[Event]]] = []
    for start, events in sorted((min(e["ts"] for e in v), v) for v in sessions.values()):
        if groups and start - groups[-1][0] < 3:
            groups[-1][1].extend(events)
        else:
            groups.append((start, list(events)))
    return [events for _, events in groups]


def bursts(times: Sequence[float]) -> list[Span]:
    """The spans of the tries at ``times``, each widened by a try's few milliseconds."""
    spans: list[list[float]] = []
    for t in sorted(times):
        if spans and t - spans[-1][1] <= GAP:
            spans[-1][1] = t
        else:
            spans.append([t, t])
    return [(a, b + 0.003) for a, b in spans]


def overlap(a: Sequence[Span], b: Sequence[Span]) -> float:
    """Seconds during which a span of ``a`` and one of ``b`` both run."""
    return sum(max(0.0, min(x[1], y[1]) - max(x[0], y[0])) for x in a for y in b)


def figures(path: str) -> str:
    """One line of figures for the runs in ``path``, and one per run that stayed relayed."""
    rates: list[float] = []
    shared: list[float] = []
    pauses: list[float] = []
    never: list[str] = []
    for events in runs(path):
        received = [e["ts"] for e in events if e["event"] == "hints_received"]
        if not received:
            continue
        t0 = min(received)
        direct = [
            e["ts"] - t0
            for e in events
            if e["event"] == "path_changed"
            or (e["event"] == "connection_selected" and e["hint_type"] == "direct-tcp-v1")
        ]
        end = min(direct) if direct else 15.5
        tries = {
            r: [
                e["ts"] - t0
                for e in events
                if e["event"] == "attempt_started"
                and e["role"] == r
                and e.get("hint_type") == "direct-tcp-v1"
                and e["ts"] - t0 <= end
            ]
            for r in ROLES
        }
        spans = {r: bursts(tries[r]) for r in ROLES}
        busy = {r: sum(b - a for a, b in spans[r]) for r in ROLES}
        if not direct:
            last = {
                r: round(max((b for a, b in spans[r] if b - a > 0.1), default=0.0), 2)
                for r in ROLES
            }
            never.append(f"  never direct: last burst of tries ended at (s) {last}")
        if end < 0.3:
            continue
        rates.extend(len(tries[r]) / busy[r] for r in ROLES if busy[r] > 0.05)
        shared.append(overlap(spans["leader"], spans["follower"]) / max(busy.values()))
        relay = [
            e["ts"] - t0
            for e in events
            if e["event"] == "connection_selected" and e["hint_type"] == "relay-v1"
        ]
        if relay:
            s, until = max(relay), min(max(relay) + 0.6, end)
            marks = [s, *sorted(t for t in tries["leader"] if s < t <= until), until]
            pauses.append(max(b - a for a, b in pairwise(marks)))
    line = (
        f"{path}: {len(shared)} runs; tries/s per side while trying: median "
        f"{statistics.median(rates):.0f} (min {min(rates):.0f}, max {max(rates):.0f}); both "
        f"trying: median {statistics.median(shared):.2f} of the time (min {min(shared):.2f})"
    )
    if pauses:
        pause = statistics.median(pauses)
        line += f"; Leader's longest pause after the relay selection: median {pause:.3f} s"
    return "\n".join([line, *never])


def main(argv: Sequence[str]) -> None:
    """Print the figures of each telemetry file named."""
    for path in argv:
        print(figures(path))


if __name__ == "__main__":
    main(sys.argv[1:])
