"""The report's charts: matplotlib figures as inline SVG, with axes an operator can read.

Layer: pure drawing (plain Python data in, SVG text out; no Spark, no I/O). Invariants:

- every chart's text stays text (``svg.fonttype = none``), so tick labels and legends can be
  searched and tested, and SVG ids are salted with the chart's name (several charts share one
  page without clashing ids);
- log axes get several labelled ticks in human units (``10 ms``, ``1 MB/s``): 1-2-5 steps, or
  every integer step when the data spans less than a decade, or a linear axis when even that
  gives fewer than three ticks; the view spans the data and every tick (so every chart has
  labels on both axes);
- distribution charts (CDFs) mark each series' p50 and p90 and name them in the legend;
- a function returns ``None`` when it has nothing to draw, and the page says "no data".
"""

from __future__ import annotations

import datetime
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import humanize

CURVE = tuple(round(p / 100, 2) for p in range(1, 100))
"""The percentiles every distribution curve is sampled at (p1 ... p99)."""
MARKS = ((0.5, "p50"), (0.9, "p90"))
PALETTE = ("#3366aa", "#dd7733", "#33997a", "#aa4466", "#8866bb", "#998833", "#666666")
"""Colour-blind-safe-ish colours, in series order."""

Formatter = Callable[[float], str]


def marks(curve: Sequence[float]) -> dict[str, float | None]:
    """``{"p50": ..., "p90": ...}`` of a curve sampled at :data:`CURVE` (None when empty)."""
    return {tag: (curve[CURVE.index(p)] if len(curve) == len(CURVE) else None) for p, tag in MARKS}


def _figure(width: float = 8.5, height: float = 3.4) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.grid(alpha=0.3, linewidth=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _svg(fig: Any, name: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), closed afterwards."""
    import matplotlib
    from matplotlib import pyplot as plt

    buf = io.StringIO()
    try:
        rc_context: Any = matplotlib.rc_context  # its typed keys are Literals
        with rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
            fig.tight_layout()
            fig.savefig(
                buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None}
            )
    finally:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def log_ticks(low: float, high: float, most: int = 8) -> list[float] | None:
    """Tick positions for a log axis over [low, high]: between 3 and ``most`` of them, the
    densest of 1-2-5, 1-3 or 1 per decade (then every other decade, ...) that fits; every
    integer multiple when the range is too short for three of those; ``None`` (use a linear
    axis) when even that gives fewer than three."""
    if low <= 0 or high <= 0 or high < low:
        return None
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))

    def ticks(steps: tuple[int, ...], every: int = 1) -> list[float]:
        return [
            k * 10.0**e
            for e in range(first, last + 1)
            if (e - first) % every == 0
            for k in steps
            if low * (1 - 1e-9) <= k * 10.0**e <= high * (1 + 1e-9)
        ]

    for steps in ((1, 2, 5), (1, 3), (1,)):
        if 3 <= len(ticks(steps)) <= most:
            return ticks(steps)
    if len(ticks((1,))) > most:
        every = math.ceil(len(ticks((1,))) / most)
        return ticks((1,), every)
    dense = ticks(tuple(range(1, 10)))
    if len(dense) > most:  # a decade or two: thin the integer steps evenly
        dense = dense[:: math.ceil(len(dense) / most)]
    return dense if len(dense) >= 3 else None


def human_axis(ax: Any, which: str, values: Sequence[float], fmt: Formatter) -> None:
    """Scale the ``which`` (``"x"`` or ``"y"``) axis of ``ax`` to ``values``: log with
    :func:`log_ticks` when it gives enough ticks, else linear; labels by ``fmt``."""
    from matplotlib.ticker import FixedLocator, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    positive = [v for v in values if v > 0]
    low, high = (min(positive), max(positive)) if positive else (0.0, 0.0)
    # pad by a tenth of a decade so the extreme ticks of the data are inside
    ticks = log_ticks(low / 10**0.1, high * 10**0.1) if len(positive) == len(values) else None
    if ticks:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_minor_locator(NullLocator())
        # the view spans the data and every tick: autoscaling to the data alone can leave all
        # the ticks of a narrow range outside it (data 110-180 ms, ticks 90, 100 and 200 ms),
        # and then the axis has no label at all
        view = (min(low, ticks[0]) / 10**0.03, max(high, ticks[-1]) * 10**0.03)
        (ax.set_xlim if which == "x" else ax.set_ylim)(*view)
    axis.set_major_formatter(_formatter(fmt))


def cdf(
    series: Mapping[str, Sequence[float]], fmt: Formatter, xlabel: str, name: str
) -> str | None:
    """Cumulative distribution curves sampled at :data:`CURVE`, with p50/p90 marked.

    :param series: label -> the values at p1 ... p99 (an empty list: the series is left out).
    :param fmt: how values are written on the axis and in the legend.
    :returns: the SVG, or None when every series is empty.
    """
    present = {label: list(v) for label, v in series.items() if v}
    if not present:
        return None
    fig, ax = _figure()
    for (label, values), colour in zip(present.items(), PALETTE, strict=False):
        ys = [p * 100 for p in CURVE[: len(values)]]
        points = [(x, float(tag[1:]), tag) for tag, x in marks(values).items() if x is not None]
        legend = f"{label}: " + ", ".join(f"{tag} {fmt(x)}" for x, _, tag in points)
        ax.plot(values, ys, color=colour, label=legend if points else label, linewidth=1.6)
        for x, y, _ in points:
            ax.plot([x], [y], marker="o", color=colour, markersize=5)
    for _, tag in MARKS:
        ax.axhline(float(tag[1:]), color="#999999", linestyle=":", linewidth=0.8)
    human_axis(ax, "x", [v for vs in present.values() for v in vs], fmt)
    ax.set_yticks([0, 25, 50, 75, 90, 100])
    ax.set_ylim(0, 100)
    ax.set_ylabel("% at or below")
    ax.set_xlabel(xlabel)
    _legend_above(ax, len(present))
    return _svg(fig, name)


def _days(rows: Sequence[Mapping[str, Any]]) -> list[datetime.date]:
    return [datetime.date.fromisoformat(r["day"]) for r in rows]


def _date_axis(ax: Any, days: Sequence[datetime.date]) -> None:
    """Whole days only (at most ~12 labels), half a day of margin on each side."""
    from matplotlib import dates

    mdates: Any = dates  # partly untyped

    first, last = (datetime.datetime.combine(d, datetime.time()) for d in (min(days), max(days)))
    span = (last - first).days + 1
    ax.xaxis.set_major_locator(mdates.DayLocator(interval=max(1, math.ceil(span / 12))))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%b %d"))
    margin = datetime.timedelta(hours=14)
    ax.set_xlim(first - margin, last + margin)
    if span > 7:
        ax.tick_params(axis="x", labelrotation=30)


def _count_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
    axis.set_major_formatter(_formatter(humanize.count))


def _legend_above(ax: Any, columns: int, handles: Any = None) -> None:
    """The legend above the axes, where it cannot hide a curve."""
    kwargs: dict[str, Any] = {
        "fontsize": 8,
        "loc": "lower center",
        "bbox_to_anchor": (0.5, 1.0),
        "ncol": columns,
        "frameon": False,
    }
    if handles is not None:
        ax.legend(*handles, **kwargs)
    else:
        ax.legend(**kwargs)


def daily_volume(rows: Sequence[Mapping[str, Any]], name: str) -> str | None:
    """Sessions per day (bars) with the dilation success rate and relay share (lines, %)."""
    if not rows:
        return None
    fig, ax = _figure()
    days = _days(rows)
    ax.bar(days, [r["sessions"] for r in rows], color="#c8d4ea", label="sessions", width=0.8)
    ax.set_ylabel("sessions")
    _count_axis(ax.yaxis)
    right = ax.twinx()
    right.spines["top"].set_visible(False)
    for key, label, colour in (
        ("success", "dilation success", PALETTE[0]),
        ("relay_share", "relay share", PALETTE[1]),
    ):
        points = [(d, r[key] * 100) for d, r in zip(days, rows, strict=True) if r[key] is not None]
        right.plot(*zip(*points, strict=True), marker="o", color=colour, label=label)
    right.set_ylim(0, 105)
    right.yaxis.set_major_formatter(_formatter(lambda v: f"{v:g} %"))
    right.set_ylabel("% of sessions / connections")
    handles = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    _legend_above(right, 3, (handles[0] + more[0], handles[1] + more[1]))
    _date_axis(ax, days)
    return _svg(fig, name)


def daily_lines(
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[tuple[str, str]],
    fmt: Formatter,
    ylabel: str,
    name: str,
) -> str | None:
    """One line per ``(key, label)`` over the days, y on a human (log when it fits) axis."""
    points = {
        label: [(d, r[key]) for d, r in zip(_days(rows), rows, strict=True) if r[key] is not None]
        for key, label in keys
    }
    if not any(points.values()):
        return None
    fig, ax = _figure()
    for (label, pts), colour in zip(points.items(), PALETTE, strict=False):
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", color=colour, label=label)
    human_axis(ax, "y", [v for pts in points.values() for _, v in pts], fmt)
    ax.set_ylabel(ylabel)
    _legend_above(ax, len(keys))
    _date_axis(ax, _days(rows))
    return _svg(fig, name)


def daily_stacked(
    rows: Sequence[Mapping[str, Any]],
    stack_key: str,
    line: tuple[str, str] | None,
    ylabel: str,
    name: str,
) -> str | None:
    """Per day, bars stacked by category (``row[stack_key]``: category -> count), and an
    optional ``(key, label)`` line of another count on the same axis."""
    categories = sorted({c for r in rows for c in r[stack_key]})
    has_line = line is not None and any(r[line[0]] for r in rows)
    if not categories and not has_line:
        return None
    fig, ax = _figure()
    days = _days(rows)
    bottom = [0] * len(rows)
    for category, colour in zip(categories, PALETTE[1:] + PALETTE[:1], strict=False):
        heights = [r[stack_key].get(category, 0) for r in rows]
        ax.bar(days, heights, bottom=bottom, label=category, color=colour, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if line is not None and has_line:
        key, label = line
        ax.plot(days, [r[key] for r in rows], marker="o", color=PALETTE[0], label=label)
    _count_axis(ax.yaxis)
    ax.set_ylabel(ylabel)
    _legend_above(ax, min(4, len(categories) + 1))
    _date_axis(ax, days)
    return _svg(fig, name)


def categories(groups: Mapping[str, Mapping[str, int]], name: str) -> str | None:
    """Horizontal bars of counts per (group, category) on a log axis, each bar labelled with
    its count, so that a category of 3 stays visible beside one of 500,000."""
    bars = [(f"{group}: {cat}", n) for group, counts in groups.items() for cat, n in counts.items()]
    bars = [(label, n) for label, n in bars if n > 0]
    if not bars:
        return None
    fig, ax = _figure(height=0.7 + 0.28 * len(bars))
    labels = [label for label, _ in reversed(bars)]
    values = [n for _, n in reversed(bars)]
    colours = [PALETTE[list(groups).index(label.split(":")[0]) % len(PALETTE)] for label in labels]
    ax.barh(labels, values, color=colours, height=0.7)
    ax.set_xscale("log")
    ax.set_xlim(0.8, max(values) * 8)
    for y, n in enumerate(values):
        ax.text(n * 1.08, y, humanize.count(n), va="center", fontsize=8)
    from matplotlib.ticker import LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(_formatter(humanize.count))
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("rows (log scale)")
    return _svg(fig, name)


def _formatter(fmt: Formatter) -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt(v))


__all__ = [
    "CURVE",
    "MARKS",
    "categories",
    "cdf",
    "daily_lines",
    "daily_stacked",
    "daily_volume",
    "human_axis",
    "log_ticks",
    "marks",
]
