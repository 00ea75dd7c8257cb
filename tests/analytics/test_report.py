"""The operator report of a real ``analyze`` run, read as an operator would read it.

Inputs: the golden telemetry log (tests/analytics/golden.py: direct pair, relay fallback, a
reconnect, a failed dilation, bad lines), a mailbox usage DB with 2,000 happy mailboxes and a
few rare results, and a relay log. ``analyze`` runs once; the tests then read the page's
tables (parsed from the HTML) and ``summary.json`` and compare them with numbers computed here
from the input files with plain ``json``/``sqlite3`` code (tests/analytics/plain.py), formatted
by :mod:`txdilation_analytics.humanize` (whose own output is pinned in test_report_render.py).
Finally headless Chromium opens the page: a full-page screenshot of a sensible size, not
blank, and nothing logged as an error.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from html.parser import HTMLParser
from typing import Any

import pytest
from twisted.trial.unittest import SynchronousTestCase

from . import golden
from ._browser import find_browser, screenshot
from ._spark import spark
from .golden import MAILBOXES, NAMEPLATES, RELAY
from .plain import connected_seconds, percentile, read_event_files

pytestmark = pytest.mark.spark

SUMMARY_KEYS = (  # every key docs/analytics.md lists, in order
    "schema", "sessions", "sessions_dilated", "dilation_success_rate", "time_to_dilate_s",
    "relay_share", "reconnects_per_session", "generations_total", "retransmitted_bytes_ratio",
    "throughput_Bps", "rtt_s", "rtt_samples", "bytes_sent_total", "bytes_retransmitted_total",
    "pairs", "days", "mailbox_results", "nameplate_results", "transit_results",
    "transit_bytes_total", "client_timing", "corrupt_lines", "corrupt_lines_by_source",
)  # fmt: skip


_RUN: dict[str, Any] = {}


def report_run() -> dict[str, Any]:
    """``analyze`` over the inputs, once per process: paths, page, tables, summary."""
    if not _RUN:
        from txdilation_analytics.cli import main

        spark()  # the shared test session (skips without Spark); analyze reuses it
        tmp = tempfile.mkdtemp(prefix="txdilation-report-")
        atexit.register(shutil.rmtree, tmp, True)
        inputs, good_lines = golden.write_inputs(tmp)
        paths = {
            "events": inputs["--events"],
            "mailbox": inputs["--mailbox-usage-db"],
            "relay": inputs["--transit-log"],
            "out": os.path.join(tmp, "out"),
        }
        started = time.monotonic()
        status = main(
            [
                "analyze", "--events", paths["events"], "--mailbox-usage-db", paths["mailbox"],
                "--transit-log", paths["relay"], "--output", paths["out"], "--quiet",
            ]
        )  # fmt: skip
        sys.stdout.write(f"\nanalyze for the report test: {time.monotonic() - started:.1f} s\n")
        assert status == 0, status
        report = os.path.join(paths["out"], "report")
        with open(os.path.join(report, "index.html"), encoding="utf-8") as f:
            page = f.read()
        with open(os.path.join(report, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        good = os.path.join(tmp, "good.jsonl")  # the golden log's good lines, for plain json
        with open(paths["events"], encoding="utf-8") as f, open(good, "w") as g:
            g.writelines(f.readlines()[:good_lines])
        _RUN.update(
            paths=paths,
            report=report,
            good_lines=good_lines,
            page=page,
            tables=Tables.parse(page),
            summary=summary,
            sessions=read_event_files([good])[0],
        )
    return _RUN


class Tables(HTMLParser):
    """Every ``<table id=...>`` of a page as rows of cell texts (whitespace folded)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    @classmethod
    def parse(cls, page: str) -> dict[str, list[list[str]]]:
        parser = cls()
        parser.feed(page)
        return parser.tables

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id") or "?", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" / ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def visible_text(page: str) -> str:
    """The page's text without its style sheet, charts and tags."""
    page = re.sub(r"<style>.*?</style>|<svg.*?</svg>", " ", page, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def rows_by_first_cell(table: list[list[str]]) -> dict[str, list[str]]:
    return {row[0]: row for row in table[1:]}


def _pq(values: list[float], fmt: Any) -> str:
    return f"p50 {fmt(percentile(values, 0.5))} · p90 {fmt(percentile(values, 0.9))}"


def _day(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).date().isoformat()


# --- what the page should say, from the inputs with plain json ------------------------------


def by_path(sessions: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, list[float]]]:
    """Per path: selections, first-connection time to dilate, RTT samples, throughput."""
    out: dict[str, dict[str, list[float]]] = {
        p: {"connections": [], "ttd": [], "rtt": [], "throughput": []}
        for p in ("direct", "relay", "mixed")
    }
    for records in sessions.values():
        path_of = {
            r["generation"]: "relay" if r["via_relay"] else "direct"
            for r in records
            if r["event"] == "connection_selected"
        }
        if not path_of:
            continue
        for path in path_of.values():
            out[path]["connections"].append(1)
        first = next(r for r in records if r["event"] == "connection_selected")
        out[path_of[first["generation"]]]["ttd"].append(first["since_request_s"])
        for r in records:
            if r["event"] == "ping_rtt":
                out[path_of[r["generation"]]]["rtt"].append(r["rtt_s"])
        last = [r for r in records if r["event"] == "traffic"][-1]
        moved = last["bytes_sent"] + last["bytes_received"]
        used = set(path_of.values())
        out[used.pop() if len(used) == 1 else "mixed"]["throughput"].append(
            moved / connected_seconds(records)
        )
    return out


def failure_reason(records: list[dict[str, Any]]) -> str | None:
    """docs/analytics.md's reason for a session that never selected a connection."""
    events = {r["event"] for r in records}
    if "connection_selected" in events:
        return None
    outcomes = {r["attempt"]: "unfinished" for r in records if r["event"] == "attempt_started"}
    outcomes.update({r["attempt"]: r["outcome"] for r in records if r["event"] == "attempt_ended"})
    if not outcomes:
        if "please_received" not in events:
            return "no_please"
        return "no_hints" if "hints_received" not in events else "no_attempt"
    if "unfinished" in outcomes.values() and "session_ended" not in events:
        return "connecting"
    for outcome in ("handshake_failed", "timeout", "connect_failed"):
        if outcome in outcomes.values():
            return outcome
    return "abandoned"


class ReportPageTests(SynchronousTestCase):
    """report/index.html says, with units and definitions, what the inputs hold."""

    def setUp(self) -> None:
        self.run = report_run()
        self.tables = self.run["tables"]
        self.sessions = self.run["sessions"]

    def test_header_names_inputs_dates_time_version(self) -> None:
        """The header: date range of the inputs, generation time, txdilation version, and one
        row per input with its path, rows read and bad lines."""
        from txdilation import __version__

        text = visible_text(self.run["page"])
        days = sorted({_day(r["ts"]) for rs in self.sessions.values() for r in rs})
        self.assertIn(f"Covers {days[0]} \N{EN DASH} {days[-1]} (UTC, {len(days)} days)", text)
        self.assertRegex(text, r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")
        self.assertIn(f"txdilation {__version__}", text)
        inputs = rows_by_first_cell(self.tables["inputs"])
        paths = self.run["paths"]
        self.assertEqual(
            inputs["txdilation events / --events"][1:4],
            [paths["events"], f"{self.run['good_lines'] + 1:,}", "5"],  # + the duplicate line
        )
        covered = f"{days[0]} \N{EN DASH} {days[-1]}"
        self.assertEqual(inputs["txdilation events / --events"][4], covered)
        mailbox_rows = sum(MAILBOXES.values()) + sum(NAMEPLATES.values())
        self.assertEqual(
            inputs["mailbox server usage DB / --mailbox-usage-db"][1:4],
            [paths["mailbox"], f"{mailbox_rows:,}", "0"],
        )
        self.assertEqual(
            inputs["transit relay log / --transit-log"][1:4],
            [paths["relay"], str(sum(RELAY.values())), "0"],
        )

    def test_summary_is_humanized_with_definitions(self) -> None:
        """Every summary row has a value with units and a one-line definition; rates are
        percentages, times ms/s, RTT in ms; no raw float or dict anywhere on the page."""
        summary = rows_by_first_cell(self.tables["summary-table"])
        for metric, row in summary.items():
            self.assertEqual(len(row), 3, row)
            self.assertGreater(len(row[2]), 20, f"{metric} has no definition")
        dilated = sum(
            1
            for rs in self.sessions.values()
            if any(r["event"] == "connection_selected" for r in rs)
        )
        n = len(self.sessions)
        self.assertEqual(summary["Dilated"][1], f"{100 * dilated / n:.1f} % ({dilated} of {n})")
        rtts = [r["rtt_s"] for rs in self.sessions.values() for r in rs if r["event"] == "ping_rtt"]
        self.assertIn(f"p50 {percentile(rtts, 0.5) * 1000:.1f} ms", summary["Ping RTT"][1])
        self.assertIn(f"({len(rtts)} samples)", summary["Ping RTT"][1])
        self.assertEqual(summary["Relay share"][1], "40.0 %")  # 2 of 5 selections
        text = visible_text(self.run["page"])
        self.assertIsNone(re.search(r"\d\.\d{4,}", text), "a raw float on the page")
        self.assertNotIn("{", text)
        self.assertNotIn("None", text)

    def test_failure_reasons(self) -> None:
        """Undilated sessions by reason (the furthest step reached), how they ended, and their
        attempts by path and outcome; summary.json has the same counts."""
        from txdilation_analytics.humanize import percent

        reasons = Counter(
            reason for rs in self.sessions.values() if (reason := failure_reason(rs)) is not None
        )
        self.assertEqual(reasons, {"timeout": 1})  # S5: relay refused, direct timed out
        rows = rows_by_first_cell(self.tables["failure-reasons"])
        for reason, n in reasons.items():
            self.assertEqual(
                rows[reason][1:4], [str(n), percent(n / sum(reasons.values())), "failed 1"]
            )
        self.assertEqual(self.run["summary"]["undilated_reasons"], dict(reasons))
        undilated = [rs for rs in self.sessions.values() if failure_reason(rs)]
        attempts = Counter(
            (r["hint_type"], r["direction"], r["outcome"])
            for rs in undilated
            for r in rs
            if r["event"] == "attempt_ended"
        )
        table = self.tables["undilated-attempts"]
        columns = table[0][2:-1]
        for row in table[1:]:
            for outcome, cell in zip(columns, row[2:-1], strict=True):
                self.assertEqual(int(cell), attempts[(row[0], row[1], outcome)], (row, outcome))
        self.assertEqual(sum(int(row[-1]) for row in table[1:]), sum(attempts.values()))

    def test_daily_table(self) -> None:
        """Per day: sessions, dilated share, time-to-dilate p50/p90, reconnects and losses by
        reason (by the day of the loss), as computed from the events."""
        from txdilation_analytics.humanize import duration, percent

        days: dict[str, dict[str, Any]] = {}
        for records in self.sessions.values():
            day = days.setdefault(
                _day(records[0]["ts"]), {"n": 0, "ok": 0, "ttd": [], "lost": Counter(), "re": 0}
            )
            day["n"] += 1
            selected = [r for r in records if r["event"] == "connection_selected"]
            if selected:
                day["ok"] += 1
                day["ttd"].append(selected[0]["since_request_s"])
            for lost in (r for r in records if r["event"] == "connection_lost"):
                on = days.setdefault(
                    _day(lost["ts"]), {"n": 0, "ok": 0, "ttd": [], "lost": Counter(), "re": 0}
                )
                on["lost"][lost["reason"]] += 1
                on["re"] += any(s["generation"] > lost["generation"] for s in selected)
        table = rows_by_first_cell(self.tables["daily-table"])
        self.assertEqual(sorted(table), sorted(days))
        for day, want in days.items():
            closed = want["lost"].pop("closed", 0)
            losses = ", ".join(f"{k} {v}" for k, v in sorted(want["lost"].items())) or "none"
            losses += f"; closed {closed}" if closed else ""
            self.assertEqual(
                table[day][1:],
                [
                    str(want["n"]),
                    percent(want["ok"] / want["n"]),
                    duration(percentile(want["ttd"], 0.5)),
                    duration(percentile(want["ttd"], 0.9)),
                    table[day][5],  # relay share: pinned by the gold tests
                    table[day][6],  # time on relay: likewise
                    str(want["re"]),
                    losses,
                ],
            )
        self.assertEqual(table["2026-01-06"][7:], ["1", "network_error 1"])  # S4's reconnect

    def test_direct_vs_relay(self) -> None:
        """The split table's connections, time to dilate, RTT and throughput per path equal
        plain-json computations; summary.json's by_path has the exact values."""
        from txdilation_analytics.humanize import duration, rate

        want = by_path(self.sessions)
        rows = rows_by_first_cell(self.tables["paths-table"])
        summary = self.run["summary"]["by_path"]
        for path in ("direct", "relay"):
            w = want[path]
            self.assertEqual(rows[path][1], str(len(w["connections"])))
            self.assertEqual(
                rows[path][2:],
                [
                    f"{_pq(w['ttd'], duration)} / {len(w['ttd'])} session"
                    + ("s" if len(w["ttd"]) != 1 else ""),
                    f"{_pq(w['rtt'], duration)} / {len(w['rtt'])} samples",
                    f"{_pq(w['throughput'], rate)} / {len(w['throughput'])} session"
                    + ("s" if len(w["throughput"]) != 1 else ""),
                ],
            )
            for key, values in (("rtt_s", w["rtt"]), ("throughput_Bps", w["throughput"])):
                for q in (0.5, 0.9):
                    self.assertAlmostEqual(
                        summary[path][key][f"p{round(q * 100)}"], percentile(values, q), places=9
                    )
        # the golden log, worked out by hand: 31.2 ms direct and 62.5 ms relay medians
        self.assertEqual(rows["direct"][3], "p50 31.2 ms · p90 31.2 ms / 3 samples")
        self.assertEqual(rows["relay"][3], "p50 62.5 ms · p90 112 ms / 3 samples")
        self.assertEqual(rows["mixed"][4], "p50 55 kB/s · p90 55 kB/s / 1 session")

    def test_recovery_gaps(self) -> None:
        """The recovery gaps section is on the page, linked from the header, and its rows
        equal plain-json computations over the log's ``recovered`` records (S4's one)."""
        from txdilation_analytics.humanize import count, duration

        page = self.run["page"]
        self.assertIn('<section id="recovery-gaps">', page)
        self.assertIn('<a href="#recovery-gaps">Recovery gaps</a>', page)
        recovered = [r for rs in self.sessions.values() for r in rs if r["event"] == "recovered"]
        self.assertEqual(len(recovered), 1)
        gaps = [r["gap_s"] for r in recovered]
        cells = [count(len(gaps)), *(duration(percentile(gaps, q)) for q in (0.5, 0.9))]
        cells.append(duration(max(gaps)))
        table = self.tables["recovery-gaps-table"]
        self.assertEqual(table[1:], [
            ["all", "", *cells],
            ["noticed by", recovered[0]["noticed_by"], *cells],
            ["path that died", recovered[0]["died"], *cells],
        ])  # fmt: skip
        self.assertEqual(table[1][3], "2 s")

    def test_small_categories_visible(self) -> None:
        """A crowded mailbox among 2,000 happy ones has its own row with a share, and the
        results chart uses a log scale with every bar labelled with its count."""
        rows = rows_by_first_cell(self.tables["mailbox-results"])
        total = sum(MAILBOXES.values())
        self.assertEqual(list(rows), list(MAILBOXES))  # documented order, happy first
        self.assertEqual(rows["crowded"][1:3], ["1", f"{100 / total:.2f} %"])
        self.assertEqual(rows["happy"][1], "2,000")
        self.assertGreater(len(rows["crowded"][3]), 10)  # its meaning
        relay = rows_by_first_cell(self.tables["relay-results"])
        self.assertEqual({k: int(v[1]) for k, v in relay.items()}, RELAY)
        chart = self.run["page"].split('id="servers"', 1)[1]
        self.assertIn("rows (log scale)", chart)
        for label in ("mailbox: crowded", "mailbox: scary", "relay: lonely", "2,000"):
            self.assertIn(f">{label}</text>", chart)

    def test_distribution_charts(self) -> None:
        """Each CDF is a log axis with several labelled ticks in human units and a legend
        naming p50 and p90 per path."""
        page = self.run["page"]
        section = page.split('id="paths"', 1)[1].split("</section>", 1)[0]
        svgs = re.findall(r"<svg.*?</svg>", section, flags=re.S)
        self.assertEqual(len(svgs), 3)
        units = (r"(µs|ms|s|min)", r"(µs|ms|s|min)", r"[kMG]?B/s")
        for svg, unit in zip(svgs, units, strict=True):
            labels = re.findall(r">([^<>]+)</text>", svg)
            ticks = [t for t in labels if re.fullmatch(r"[\d.,]+ " + unit, t)]
            self.assertGreaterEqual(len(ticks), 3, labels)
            self.assertRegex(svg, r">direct: p50 [^<]+, p90 [^<]+</text>")
            self.assertRegex(svg, r">relay: p50 [^<]+, p90 [^<]+</text>")
        self.assertIn(">direct: p50 31.2 ms, p90 31.2 ms</text>", svgs[1])

    def test_report_directory_holds_only_the_report(self) -> None:
        """No Hadoop .crc or _SUCCESS files in report/: the page, summary.json, _stage.json."""
        self.assertEqual(
            sorted(os.listdir(self.run["report"])), ["_stage.json", "index.html", "summary.json"]
        )

    def test_stale_checksum_removed(self) -> None:
        """Replacing a small file that an older writer left with a .crc removes the .crc (else
        Hadoop would refuse to read the new content)."""
        from txdilation_analytics import storage

        path = os.path.join(self.run["paths"]["out"], "stale", "note.txt")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write("old")
        crc = os.path.join(os.path.dirname(path), ".note.txt.crc")
        with open(crc, "wb") as f:
            f.write(b"not a checksum of 'new'")
        storage.write_text(spark(), path, "new")
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))), ["note.txt"])
        self.assertEqual(storage.read_text(spark(), path), "new")

    def test_summary_json_keeps_every_key(self) -> None:
        """summary.json keeps the documented keys in order, then adds undilated_reasons,
        by_path (direct, relay, mixed), range (the days asked for: all here) and the time on
        each path, and the sessions direct through a port mapping."""
        from txdilation_analytics.summary import MAPPING_KEYS, PATH_TIME_KEYS

        summary = self.run["summary"]
        added = ["undilated_reasons", "by_path", "range", *PATH_TIME_KEYS, *MAPPING_KEYS]
        self.assertEqual(list(summary), [*SUMMARY_KEYS, *added], list(summary))
        self.assertEqual(summary["range"], {"from": None, "to": None})
        self.assertEqual(list(summary["by_path"]), ["direct", "relay", "mixed"])
        self.assertEqual(summary["mailbox_results"], dict(sorted(MAILBOXES.items())))
        self.assertEqual(summary["by_path"]["direct"]["connections"], 3)
        self.assertEqual(summary["by_path"]["relay"]["connections"], 2)


def _session(*steps: str, ended: bool = True) -> list[dict[str, Any]]:
    """Records of one session: event names, and ``attempt:<outcome>`` for an attempt that
    started and ended so (``attempt:unfinished``: it never ended)."""
    records: list[dict[str, Any]] = []
    for step in steps:
        if step.startswith("attempt:"):
            attempt, outcome = len(records) + 1, step.split(":", 1)[1]
            records.append({"event": "attempt_started", "attempt": attempt})
            if outcome != "unfinished":
                records.append({"event": "attempt_ended", "attempt": attempt, "outcome": outcome})
        else:
            records.append({"event": step})
    return records + ([{"event": "session_ended", "reason": "closed"}] if ended else [])


class FailureReasonTests(SynchronousTestCase):
    """failures.undilated gives each undilated session the first reason that applies."""

    def test_every_reason(self) -> None:
        """One session per reason (and a dilated one, left out); the pipeline and this
        module's plain reading of the documented rules agree."""
        from txdilation_analytics import failures

        p, h = "please_received", "hints_received"
        cases = {
            "no_please": _session("dilation_requested"),
            "no_hints": _session(p),
            "no_attempt": _session(p, h),
            "connecting": _session(p, h, "attempt:timeout", "attempt:unfinished", ended=False),
            "handshake_failed": _session(p, h, "attempt:timeout", "attempt:handshake_failed"),
            "timeout": _session(p, h, "attempt:connect_failed", "attempt:timeout"),
            "connect_failed": _session(p, h, "attempt:connect_failed", "attempt:cancelled"),
            "abandoned": _session(p, h, "attempt:cancelled", "attempt:unfinished"),
            "dilated": _session(p, h, "attempt:selected", "connection_selected"),
        }
        self.assertEqual(list(failures.REASONS), list(cases)[:-1])
        s = spark()
        day = datetime.date(2026, 1, 5)
        sessions = s.createDataFrame(
            [
                (
                    name, day, name == "dilated",
                    any(r["event"] == "session_ended" for r in rs), None,
                    any(r["event"] == "please_received" for r in rs),
                    sum(r["event"] == "hints_received" for r in rs),
                )
                for name, rs in cases.items()
            ],
            "session string, day date, dilated boolean, ended boolean, end_reason string,"
            " please_received boolean, hints_received long",
        )  # fmt: skip
        outcomes = {
            (name, r["attempt"]): r.get("outcome", "unfinished")
            for name, rs in cases.items()
            for r in rs
            if r["event"].startswith("attempt_")
        }
        attempts = s.createDataFrame(
            [(name, attempt, outcome) for (name, attempt), outcome in outcomes.items()],
            "session string, attempt long, outcome string",
        )
        got = {r["session"]: r["reason"] for r in failures.undilated(sessions, attempts).collect()}
        self.assertEqual(got, {name: name for name in cases if name != "dilated"})
        self.assertEqual(got, {n: failure_reason(rs) for n, rs in cases.items() if n != "dilated"})


class BrowserTests(SynchronousTestCase):
    """The page in a real headless Chromium."""

    def test_page_renders_without_errors(self) -> None:
        """A full-page screenshot is wide and long enough and not blank; the page logs no
        console error, throws nothing and loads nothing but itself; every chart has at least
        two visible tick labels on each axis."""
        find_browser()  # before Spark: under CI=true a missing browser fails, never skips
        run = report_run()
        page = os.path.join(run["report"], "index.html")
        png = os.path.abspath(self.mktemp()) + ".png"
        started = time.monotonic()
        visit = screenshot(page, png, width=1100)
        sys.stdout.write(f"\nreport screenshot: {png} ({time.monotonic() - started:.1f} s)\n")
        self.assertEqual(visit.errors(), [])
        self.assertEqual(
            {u.split(":", 1)[0] for u in visit.requests}, {"file"}, visit.requests
        )  # self-contained: no network, no other file
        self.assertGreaterEqual(len(visit.charts), 7, visit.charts)  # (the inputs draw seven)
        self.assertEqual(visit.unlabelled_axes(), [])  # every chart: both axes labelled
        from PIL import Image

        with Image.open(png) as image:
            width, height = image.size
            self.assertEqual(width, 1100)
            self.assertEqual(height, visit.height)
            self.assertGreater(height, 3000)  # header, tables and ten charts
            levels = image.convert("L").histogram()  # pixels per grey level, 0 = black
        ink = sum(levels[:200]) / sum(levels)
        self.assertTrue(0.01 < ink < 0.5, f"share of dark pixels {ink:.3f}: blank or garbled")
        self.assertGreater(sum(1 for n in levels if n), 50)  # text and charts, not flat
        self.assertGreater(os.path.getsize(png), 100_000)

    def test_errors_are_caught(self) -> None:
        """The check itself: a page that logs a console error, throws and misses an image
        reports all three."""
        find_browser()
        base = os.path.abspath(self.mktemp())
        with open(base + ".html", "w") as f:
            f.write(
                "<!doctype html><title>t</title><p>x</p><img src='missing.png'>"
                "<script>console.error('logged'); null.boom;</script>"
            )
        errors = screenshot(base + ".html", base + ".png", width=400).errors()
        self.assertGreaterEqual(len(errors), 3, errors)
        self.assertIn("console error: logged", errors)
        self.assertTrue(any(e.startswith("uncaught: ") for e in errors), errors)
        self.assertTrue(any(e.endswith("missing.png") for e in errors), errors)
