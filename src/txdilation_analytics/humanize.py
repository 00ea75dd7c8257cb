"""Numbers as an operator reads them: ``96.2 %``, ``619 ms``, ``1.25 MB/s``, ``1,000,000``.

Layer: pure formatting for the report (no Spark, no I/O). Every function takes ``None`` for an
undefined value (a rate with a zero denominator, a percentile of nothing) and returns
:data:`MISSING` for it. Values are shown with three significant digits, trailing zeros
dropped; sizes and rates use decimal (SI) prefixes, as network tools do.
"""

from __future__ import annotations

import math

MISSING = "\N{EN DASH}"
"""What an undefined value is shown as."""

_SIZE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def significant(value: float, digits: int = 3) -> str:
    """``value`` rounded to ``digits`` significant digits, without exponent or trailing zeros.

    >>> significant(0.6188874), significant(2.5), significant(1234.5)
    ('0.619', '2.5', '1,234')
    """
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{round(value, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _scaled(value: float, step: float, units: tuple[str, ...]) -> str:
    """``value`` in the largest unit of ``units`` (each ``step`` times the previous) that
    keeps it at 1 or more, after rounding to three significant digits."""
    index = 0
    while index + 1 < len(units) and float(significant(abs(value)).replace(",", "")) >= step:
        value /= step
        index += 1
    return f"{significant(value)} {units[index]}"


def count(value: int | float | None) -> str:
    """A count with thousands separators: ``1,000,000``."""
    return MISSING if value is None else f"{round(value):,}"


def percent(value: float | None) -> str:
    """A fraction as a percentage with one decimal, more when that would hide a difference
    from 0 or 100 %: ``0.9623 -> 96.2 %``, ``0.99996 -> 99.996 %``, ``0.00012 -> 0.01 %``."""
    if value is None:
        return MISSING
    pct = value * 100
    for decimals in range(1, 5):
        text = f"{pct:.{decimals}f}"
        shown = float(text)
        if (shown != 0 or pct == 0) and (shown != 100 or pct == 100):
            break
    return f"{text} %"


def duration(seconds: float | None) -> str:
    """Seconds in the unit that reads best: ``850 µs``, ``12.3 ms``, ``2.91 s``, ``4.2 min``."""
    if seconds is None:
        return MISSING
    if seconds == 0:
        return "0 s"
    if float(significant(seconds).replace(",", "")) < 1:
        return _scaled(seconds * 1e6, 1000, ("µs", "ms"))
    if seconds < 60:
        return f"{significant(seconds)} s"
    if seconds < 3600:
        return f"{significant(seconds / 60)} min"
    return f"{significant(seconds / 3600)} h"


def size(value: float | None) -> str:
    """Bytes with a decimal prefix: ``17.2 MB``."""
    return MISSING if value is None else _scaled(value, 1000, _SIZE_UNITS)


def rate(bytes_per_second: float | None) -> str:
    """A throughput: ``10.8 kB/s``, ``1.25 MB/s``."""
    return MISSING if bytes_per_second is None else size(bytes_per_second) + "/s"


def number(value: float | None) -> str:
    """A plain ratio with three significant digits: ``0.241``, ``2.29``."""
    return MISSING if value is None else significant(value)


__all__ = ["MISSING", "count", "duration", "number", "percent", "rate", "significant", "size"]
