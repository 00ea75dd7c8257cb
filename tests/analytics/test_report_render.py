"""The report's pure parts, without Spark: number formatting, chart axes, page rendering of
edge cases, and the optional-section extension point."""

from __future__ import annotations

import datetime
import importlib.util
import re
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

NEEDS = ("pyspark", "matplotlib", "jinja2")  # report_data names pyspark types (no JVM needed)
MISSING = [m for m in NEEDS if importlib.util.find_spec(m) is None]


def _skip_without_extra(testcase: SynchronousTestCase) -> None:
    if MISSING:
        testcase.skipTest(f"{', '.join(MISSING)} not installed (pip install -e '.[analytics]')")


def empty_summary() -> dict[str, Any]:
    """A summary.json of a run that saw no sessions and no server rows."""
    return {
        "schema": "txdilation-analytics-summary/1",
        "sessions": 0,
        "sessions_dilated": 0,
        "dilation_success_rate": None,
        "time_to_dilate_s": {"p50": None, "p90": None, "p99": None},
        "relay_share": None,
        "time_on_path_s": {"relay": 0.0, "direct": 0.0},
        "relay_time_share": None,
        "path_upgrades": 0,
        "reconnects_per_session": None,
        "generations_total": 0,
        "retransmitted_bytes_ratio": None,
        "throughput_Bps": {"p50": None, "p90": None},
        "rtt_s": {"p50": None, "p90": None},
        "rtt_samples": 0,
        "bytes_sent_total": 0,
        "bytes_retransmitted_total": 0,
        "pairs": 0,
        "days": {"first": None, "last": None},
        "mailbox_results": {},
        "nameplate_results": {},
        "transit_results": {},
        "transit_bytes_total": 0,
        "client_timing": {"files": 0, "events": 0, "duration_p50_s": {}},
        "corrupt_lines": 0,
        "corrupt_lines_by_source": {},
    }


def empty_data(**changes: Any) -> Any:
    from txdilation_analytics.report_data import PATHS, PathStats, ReportData

    fields: dict[str, Any] = {
        "paths": {p: PathStats() for p in PATHS},
        "undilated": [],
        "undilated_attempts": [],
        "attempts": [],
        "daily": [],
        "ranges": {},
    }
    fields.update(changes)
    return ReportData(**fields)


class HumanizeTests(SynchronousTestCase):
    """Numbers are written with units and three significant digits, never as raw floats."""

    def setUp(self) -> None:
        _skip_without_extra(self)

    def test_percent(self) -> None:
        """One decimal, more only when rounding would hide a difference from 0 or 100 %."""
        from txdilation_analytics.humanize import MISSING, percent

        cases = {
            0.9623333333333334: "96.2 %",
            1.0: "100.0 %",
            0.99996: "99.996 %",
            0.00012: "0.01 %",
            0.0: "0.0 %",
            None: MISSING,
        }
        for value, text in cases.items():
            self.assertEqual(percent(value), text, value)

    def test_duration(self) -> None:
        """Seconds in µs, ms, s, min or h, whichever reads best after rounding."""
        from txdilation_analytics.humanize import duration

        cases = {
            0.6188874244689941: "619 ms",
            0.00109: "1.09 ms",
            5e-7: "0.5 µs",
            0.9996: "1 s",
            2.907: "2.91 s",
            61.0: "1.02 min",
            7200.0: "2 h",
            0.0: "0 s",
        }
        for value, text in cases.items():
            self.assertEqual(duration(value), text, value)

    def test_sizes_rates_counts(self) -> None:
        """Decimal prefixes for bytes and rates; thousands separators for counts."""
        from txdilation_analytics.humanize import count, number, rate, size

        self.assertEqual(rate(9394999.0), "9.39 MB/s")
        self.assertEqual(rate(10763.0), "10.8 kB/s")
        self.assertEqual(rate(999.6), "1 kB/s")
        self.assertEqual(size(17216678), "17.2 MB")
        self.assertEqual(size(395477674482), "395 GB")
        self.assertEqual(size(0), "0 B")
        self.assertEqual(count(1000000), "1,000,000")
        self.assertEqual(number(2.2857142857), "2.29")
        self.assertEqual(number(0.24062), "0.241")


class AxisTests(SynchronousTestCase):
    """Log axes carry several labelled ticks in human units; CDFs mark p50 and p90."""

    def setUp(self) -> None:
        _skip_without_extra(self)

    def test_log_ticks(self) -> None:
        """Between 3 and 8 ticks over ranges of a fraction of a decade to nine decades."""
        from txdilation_analytics.charts import log_ticks

        for low, high in (
            (40, 3e6),
            (0.4, 6),
            (0.015, 0.15),
            (20e3, 55e3),
            (0.5, 0.75),
            (1e-6, 1e3),
        ):
            ticks = log_ticks(low, high)
            assert ticks is not None
            self.assertTrue(3 <= len(ticks) <= 8, (low, high, ticks))
            self.assertTrue(all(low <= t <= high * (1 + 1e-9) for t in ticks), ticks)
        self.assertEqual(log_ticks(0.4, 6), [0.5, 1.0, 2.0, 5.0])
        self.assertIsNone(log_ticks(1.0, 1.2))  # too narrow: the axis stays linear
        self.assertIsNone(log_ticks(0.0, 5.0))

    def test_cdf_axis_labels_and_marks(self) -> None:
        """A CDF over 5 ms .. 150 ms is labelled 10 ms, 20 ms, 50 ms, 100 ms, and its legend
        names each series' p50 and p90."""
        from txdilation_analytics import humanize
        from txdilation_analytics.charts import CURVE, cdf

        direct = [0.005 + 0.05 * p for p in CURVE]  # p50 = 0.03 s, p90 = 0.05 s
        relay = [0.05 + 0.1 * p for p in CURVE]
        svg = cdf({"direct": direct, "relay": relay}, humanize.duration, "RTT", "test")
        assert svg is not None
        self.assertTrue(svg.startswith("<svg"))
        labels = re.findall(r">([^<>]*?)</text>", svg)
        for tick in ("10 ms", "20 ms", "50 ms", "100 ms"):
            self.assertIn(tick, labels)
        self.assertIn("direct: p50 30 ms, p90 50 ms", labels)
        self.assertIn("relay: p50 100 ms, p90 140 ms", labels)
        self.assertIsNone(cdf({"direct": []}, humanize.duration, "RTT", "test"))


def tick_labels(svg: str, axis: str) -> list[str]:
    """The labels matplotlib drew on ``axis`` (``x`` or ``y``): only ticks inside the view."""
    return re.findall(rf'<g id="{axis}tick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, flags=re.S)


class NarrowRangeTests(SynchronousTestCase):
    """Data in a narrow range (a fraction of a decade) still gets labels on both axes."""

    def setUp(self) -> None:
        _skip_without_extra(self)

    def test_every_axis_labelled(self) -> None:
        """Throughput CDFs and time-to-dilate-per-day lines over ranges whose log ticks fall
        just outside the data (110-180 ms: ticks 90, 100, 200 ms) have at least two labels
        on each axis (they had none: the view was the data's, the ticks outside it)."""
        from txdilation_analytics import humanize
        from txdilation_analytics.charts import CURVE, cdf, daily_lines

        for low, high, fmt in (
            (0.11, 0.18, humanize.duration),
            (0.5, 0.55, humanize.duration),
            (61e6, 72e6, humanize.rate),
            (1.1e3, 1.8e3, humanize.rate),
        ):
            with self.subTest(low=low, high=high):
                curve = [low + (high - low) * p for p in CURVE]
                svg = cdf({"direct": curve}, fmt, "x", "narrow")
                assert svg is not None
                self.assertGreaterEqual(len(tick_labels(svg, "x")), 2, svg[-3000:])
                self.assertGreaterEqual(len(tick_labels(svg, "y")), 2)
                rows = [
                    {"day": "2026-01-05", "p50": low, "p90": high},
                    {"day": "2026-01-06", "p50": low * 1.01, "p90": high * 0.99},
                ]
                keys = [("p50", "p50"), ("p90", "p90")]
                svg = daily_lines(rows, keys, fmt, "time to dilate", "days")
                assert svg is not None
                self.assertGreaterEqual(len(tick_labels(svg, "y")), 2, tick_labels(svg, "y"))
                self.assertEqual(len(tick_labels(svg, "x")), 2)


class RenderTests(SynchronousTestCase):
    """The page renders whatever the data, and optional sections appear only with data."""

    def setUp(self) -> None:
        _skip_without_extra(self)

    def test_empty_run(self) -> None:
        """No sessions, no server rows: every section says so instead of failing."""
        from txdilation_analytics.humanize import MISSING
        from txdilation_analytics.report import Meta, render_html

        when = datetime.datetime(2026, 1, 7, 8, 30, tzinfo=datetime.timezone.utc)
        page = render_html(empty_summary(), empty_data(), Meta(generated_at=when))
        self.assertIn("generated <strong>2026-01-07 08:30 UTC</strong>", page)
        self.assertIn("No dated rows in the inputs", page)
        self.assertIn("Every session dilated (there were no sessions).", page)
        self.assertIn("no connection was selected", page)
        self.assertIn(f"{MISSING} (no relay records)", page)
        self.assertNotIn("<svg", page)
        self.assertNotIn("None", page)

    def test_extra_sections(self) -> None:
        """A section whose collect returns None is absent; one with data is rendered (escaped)
        with a link in the navigation."""
        from txdilation_analytics.report import render_html
        from txdilation_analytics.report_data import Section, extra_sections

        seen: list[Any] = []

        def nothing(tables: Any) -> None:
            seen.append(tables)
            return None

        def gaps(tables: Any) -> dict[str, Any]:
            return {
                "intro": "Gaps between a lost link and its replacement.",
                "columns": ["what died", "gap p50"],
                "rows": [["<relay>", "1.2 s"]],
            }

        tables = object()  # the sections here read nothing
        sections = extra_sections(
            tables,  # type: ignore[arg-type]
            [Section("absent", "Absent", nothing), Section("recovery-gaps", "Recovery gaps", gaps)],
        )
        self.assertEqual(seen, [tables])
        self.assertEqual([s.anchor for s, _ in sections], ["recovery-gaps"])
        page = render_html(empty_summary(), empty_data(sections=sections))
        self.assertIn('<section id="recovery-gaps">', page)
        self.assertIn('<a href="#recovery-gaps">Recovery gaps</a>', page)
        self.assertIn("<td>&lt;relay&gt;</td><td>1.2 s</td>", page)
        self.assertNotIn('id="absent"', page)
        self.assertNotIn('href="#absent"', page)
