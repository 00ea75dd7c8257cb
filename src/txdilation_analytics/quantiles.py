"""Percentiles of whole columns: exact (linear interpolation between the closest ranks, as
Spark's ``percentile``) at any size.

Spark's ``percentile`` keeps every distinct value of its group in one aggregation buffer (a hash
map of boxed values, sorted at the end): fine for thousands of values, a few GB of one task's
memory and minutes of CPU for the tens of millions of RTT samples of ten million sessions.
:func:`bracketed` finds the same values from three passes that hold nothing large:

1. the count ``N`` and, from ``percentile_approx`` (rank error at most ``N / ACCURACY``), for
   every percentile ``p`` a bracket of values ``[lo, hi]`` around ranks ``p (N - 1) +- 2N /
   ACCURACY``;
2. for every bracket, how many values lie below ``lo``;
3. the values inside the brackets (about ``4N / ACCURACY`` each: ~20,000 for 50 M values),
   collected and sorted on the driver, where the values at the ranks ``floor(p (N - 1))`` and
   ``ceil(p (N - 1))`` are interpolated.

A bracket that misses its ranks (the approximation's bound did not hold) is answered by Spark's
``percentile`` for that value alone. :func:`spark_exact` is Spark's ``percentile`` in one job,
for small columns (fewer jobs); :func:`for_rows` picks one by the size of the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

ACCURACY = 10_000
LARGE_ROWS = 2_000_000
"""From this many rows (the run's events) on, whole-column percentiles are :func:`bracketed`."""

Quantiles = Callable[[DataFrame, str, Sequence[float]], list[float | None]]
"""(rows, column, percentiles in [0, 1]) -> the column's exact percentiles (None if empty)."""


def _lits(probs: Sequence[float]) -> Column:
    return F.array(*[F.lit(float(p)) for p in probs])


def spark_exact(df: DataFrame, col: str, probs: Sequence[float]) -> list[float | None]:
    """Spark's exact ``percentile`` of ``col`` (NULLs left out), one job."""
    row = df.agg(F.percentile(F.col(col), _lits(probs)).alias("q")).first()
    values = row["q"] if row is not None else None
    if values is None:
        return [None] * len(probs)
    return [float(v) if v is not None else None for v in values]


def _interpolate(values: Sequence[float], rank: float, first: int) -> float | None:
    """The value at fractional ``rank`` of a column whose values from rank ``first`` on are
    ``values`` (sorted), or None when the ranks needed are not among them."""
    low, high = math.floor(rank), math.ceil(rank)
    if low < first or high >= first + len(values):
        return None
    a, b = values[low - first], values[high - first]
    return a if low == high else (high - rank) * a + (rank - low) * b  # Spark's formula


def bracketed(
    df: DataFrame, col: str, probs: Sequence[float], accuracy: int = ACCURACY
) -> list[float | None]:
    """Exact percentiles of ``col`` (NULLs left out) in three passes that hold nothing large
    (module docstring); equal to :func:`spark_exact`."""
    x = df.select(F.col(col).cast("double").alias("x")).filter(F.col("x").isNotNull())
    margin = 2.0 / accuracy
    edges = sorted({min(1.0, max(0.0, p + d)) for p in probs for d in (-margin, margin)})
    head = x.agg(
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx("x", _lits(edges), accuracy).alias("q"),
    ).first()
    n = int(head["n"]) if head is not None else 0
    if head is None or n == 0:
        return [None] * len(probs)
    at = dict(zip(edges, head["q"], strict=True))
    brackets = [
        (at[min(1.0, max(0.0, p - margin))], at[min(1.0, max(0.0, p + margin))]) for p in probs
    ]
    counts = x.agg(
        *[F.count(F.when(F.col("x") < lo, F.lit(1))).alias(f"b{i}") for i, (lo, _) in
          enumerate(brackets)]
    ).first()  # fmt: skip
    assert counts is not None
    inside = F.lit(False)
    for lo, hi in brackets:
        inside = inside | F.col("x").between(lo, hi)
    window = sorted(float(r["x"]) for r in x.filter(inside).collect())
    out: list[float | None] = []
    for i, (p, (lo, hi)) in enumerate(zip(probs, brackets, strict=True)):
        values = [v for v in window if lo <= v <= hi]
        value = _interpolate(values, p * (n - 1), int(counts[f"b{i}"]))
        out.append(value if value is not None else spark_exact(x, "x", [p])[0])
    return out


def for_rows(rows: int) -> Quantiles:
    """:func:`bracketed` for a run of ``rows`` rows (events) from :data:`LARGE_ROWS` on, else
    :func:`spark_exact` (one job instead of three)."""
    return bracketed if rows >= LARGE_ROWS else spark_exact


__all__ = ["ACCURACY", "LARGE_ROWS", "Quantiles", "bracketed", "for_rows", "spark_exact"]
