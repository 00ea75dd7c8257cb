"""Golden tests: hand-built telemetry logs through bronze, silver, gold and the summary.

The log is written by the real emitter (see golden.py); every expected table below was worked
out by hand from the scenario timelines. Percentiles are Spark's exact ``percentile``.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import shutil
import tempfile
from typing import Any

import pytest
from twisted.trial.unittest import SynchronousTestCase

from txdilation.telemetry import pair_id

from . import golden
from ._spark import spark
from .golden import DAY1, DAY2, S1, S2, S3, S4, S5

pytestmark = pytest.mark.spark

PA, PB, PC, PD = (
    pair_id("a" * 10, "b" * 10),
    pair_id("c" * 10, "d" * 10),
    pair_id("e" * 10, "f" * 10),
    pair_id("0" * 10, "9" * 10),
)
D, R = "direct-tcp-v1", "relay-v1"
DATE1, DATE2 = datetime.date(2026, 1, 5), datetime.date(2026, 1, 6)


LD, FL, OUT, IN = "leader", "follower", "outbound", "inbound"
OK, NE = "selected", "network_error"

# fmt: off
ATTEMPTS = (
    ["session", "attempt", "pair", "role", "generation", "hint_type", "direction",
     "started_ts", "ended_ts", "outcome", "connect_s", "handshake_s"],
    [
        (S1, 1, PA, LD, 1, D, OUT, DAY1 + 100.25, DAY1 + 100.75, OK, 0.125, 0.25),
        (S1, 2, PA, LD, 1, R, OUT, DAY1 + 100.25, DAY1 + 100.75, "cancelled", None, None),
        (S2, 1, PA, FL, 1, D, IN, DAY1 + 100.25, DAY1 + 100.75, OK, 0.125, 0.25),
        (S2, 2, PA, FL, 1, R, OUT, DAY1 + 100.25, DAY1 + 100.75, "cancelled", None, None),
        (S3, 1, PB, LD, 1, D, OUT, DAY1 + 200.25, DAY1 + 202.25, "timeout", None, None),
        (S3, 2, PB, LD, 1, R, OUT, DAY1 + 200.25, DAY1 + 202.5, OK, 0.5, 0.25),
        (S4, 1, PC, LD, 1, D, OUT, DAY2 + 50.25, DAY2 + 50.5, OK, 0.125, 0.125),
        (S4, 3, PC, LD, 2, D, OUT, DAY2 + 60.5, DAY2 + 61.5, "connect_failed", None, None),
        (S4, 4, PC, LD, 2, R, OUT, DAY2 + 60.5, DAY2 + 62.5, OK, 0.5, 0.5),
        (S5, 1, PD, FL, 1, D, OUT, DAY2 + 300.25, DAY2 + 330.25, "timeout", None, None),
        (S5, 2, PD, FL, 1, R, OUT, DAY2 + 300.25, DAY2 + 305.25, "connect_failed", None, None),
    ],
)
GENERATIONS = (
    ["session", "generation", "attempts", "hints_sent", "hints_received", "selected",
     "selected_ts", "hint_type", "via_relay", "since_request_s", "candidates", "lost_reason",
     "uptime_s", "pings"],
    [
        (S1, 1, 2, 3, 2, True, DAY1 + 100.75, D, False, 0.75, 1, None, 10.0, 1),
        (S2, 1, 2, 3, 2, True, DAY1 + 100.75, D, False, 0.5, 1, None, 10.0, 1),
        (S3, 1, 2, 3, 2, True, DAY1 + 202.5, R, True, 2.5, 1, None, 20.0, 2),
        (S4, 1, 1, 3, 2, True, DAY2 + 50.5, D, False, 0.5, 2, NE, 10.0, 1),
        (S4, 2, 2, 3, 2, True, DAY2 + 62.5, R, True, 12.5, 1, None, 10.0, 1),
        (S5, 1, 2, 3, 2, False, None, None, None, None, None, None, None, 0),
    ],
)
SESSIONS = (
    ["session", "pair", "role", "day", "ended", "end_reason", "dilated", "time_to_dilate_s",
     "first_via_relay", "first_hint_type", "generations", "connections", "relayed_connections",
     "connections_lost", "reconnects", "bytes_sent", "bytes_retransmitted", "bytes_received",
     "pings", "rtt_median_s", "subchannels", "connected_s", "throughput_Bps"],
    [
        (S1, PA, LD, DATE1, True, "happy", True, 0.75, False, D, 1, 1, 0, 0, 0,
         160_000, 0, 40_000, 1, 1 / 64, 1, 10.0, 20_000.0),
        (S2, PA, FL, DATE1, True, "happy", True, 0.5, False, D, 1, 1, 0, 0, 0,
         40_000, 0, 160_000, 1, 1 / 32, 1, 10.0, 20_000.0),
        (S3, PB, LD, DATE1, True, "happy", True, 2.5, True, R, 1, 1, 1, 0, 0,
         1_000_000, 0, 0, 2, 0.09375, 0, 20.0, 50_000.0),
        (S4, PC, LD, DATE2, True, "happy", True, 0.5, False, D, 2, 2, 1, 1, 1,
         1_000_000, 250_000, 100_000, 2, 0.046875, 0, 20.0, 55_000.0),
        (S5, PD, FL, DATE2, True, "failed", False, None, None, None, 1, 0, 0, 0, 0,
         0, 0, 0, 0, None, 0, None, None),
    ],
)
DAILY_SESSIONS = (
    ["day", "sessions", "sessions_dilated", "dilation_success_rate", "time_to_dilate_p50_s",
     "time_to_dilate_p90_s", "time_to_dilate_p99_s", "relay_share", "reconnects_per_session",
     "generations", "retransmitted_bytes_ratio", "throughput_p50_Bps", "throughput_p90_Bps",
     "rtt_samples", "rtt_p50_s", "rtt_p90_s"],
    [
        (DATE1, 3, 3, 1.0, 0.75, 2.15, 2.465, 1 / 3, 0.0, 3, 0.0, 20_000.0, 44_000.0,
         4, 0.046875, 0.10625),
        (DATE2, 2, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 3, 0.25, 55_000.0, 55_000.0,
         2, 0.046875, 0.059375),
    ],
)
DAILY_ATTEMPTS = (
    ["day", "hint_type", "direction", "outcome", "attempts", "connect_p50_s"],
    [
        (DATE1, D, IN, OK, 1, 0.125),
        (DATE1, D, OUT, OK, 1, 0.125),
        (DATE1, D, OUT, "timeout", 1, None),
        (DATE1, R, OUT, "cancelled", 2, None),
        (DATE1, R, OUT, OK, 1, 0.5),
        (DATE2, D, OUT, "connect_failed", 1, None),
        (DATE2, D, OUT, OK, 1, 0.125),
        (DATE2, D, OUT, "timeout", 1, None),
        (DATE2, R, OUT, "connect_failed", 1, None),
        (DATE2, R, OUT, OK, 1, 0.5),
    ],
)
DAILY_LOSSES = (
    ["day", "reason", "losses", "reconnected"],
    [(DATE2, NE, 1, 1)],  # S4's direct link, replaced by the relay
)
# fmt: on


_TABLES: dict[str, Any] = {}


def golden_tables() -> dict[str, Any]:
    """The golden log through bronze and silver, built once per process (trial has no
    setUpClass) and cached in Spark memory."""
    if not _TABLES:
        from txdilation_analytics import bronze, silver, sources

        s = spark()
        tmp = tempfile.mkdtemp(prefix="txdilation-golden-")
        atexit.register(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "events.jsonl")
        good_lines = golden.write_golden_log(path)
        validated = bronze.validate_events(sources.read_events(s, [path])).cache()
        events = silver.sessionize(bronze.good(validated)).cache()
        gens = silver.generations(events).cache()
        _TABLES.update(
            good_lines=good_lines,
            bronze=validated,
            events=events,
            pings=silver.pings(events),
            attempts=silver.attempts(events),
            generations=gens,
            sessions=silver.sessions(events, gens).cache(),
        )
    return _TABLES


class GoldenTests(SynchronousTestCase):
    """Each stage's output on the golden log equals the hand-computed tables."""

    def setUp(self) -> None:
        self.tables = golden_tables()
        self.good_lines = self.tables["good_lines"]

    def assertTable(self, actual: Any, columns: list[str], expected: list[tuple]) -> None:
        from pyspark.testing import assertDataFrameEqual

        rows = [dict(zip(columns, row, strict=True)) for row in expected]
        assertDataFrameEqual(actual.select(*columns), [_row(r) for r in rows])

    def test_bronze_bad_lines(self) -> None:
        """Each kind of bad line is flagged once; good lines (and the duplicate) are kept."""
        from pyspark.sql import functions as F

        bronze = self.tables["bronze"]
        reasons = {
            r["bad_reason"]: r["count"] for r in bronze.groupBy("bad_reason").count().collect()
        }
        self.assertEqual(
            reasons,
            {
                None: self.good_lines + 1,
                "unparseable": 1,
                "wrong_schema": 1,
                "unknown_event": 1,
                "missing_field": 1,
                "bad_value": 1,
            },
        )
        leaked = bronze.filter(F.col("bad_reason").isNotNull() & F.col("hint_type").isNotNull())
        self.assertEqual(leaked.count(), 0, "strings of bad rows must be nulled")

    def test_sessionize_drops_duplicates_and_fills_context(self) -> None:
        """The duplicate line is dropped; role and pair are filled on the first events."""
        from pyspark.sql import functions as F

        events = self.tables["events"]
        self.assertEqual(events.count(), self.good_lines)
        first = events.filter(F.col("event") == "dilation_requested")
        self.assertTable(
            first,
            ["session", "role", "pair", "generation", "day"],
            [
                (S1, "leader", PA, None, DATE1),
                (S2, "follower", PA, None, DATE1),
                (S3, "leader", PB, None, DATE1),
                (S4, "leader", PC, None, DATE2),
                (S5, "follower", PD, None, DATE2),
            ],
        )

    def test_attempts(self) -> None:
        """One row per attempt with start/end times, outcome and durations."""
        self.assertTable(self.tables["attempts"], *ATTEMPTS)

    def test_generations(self) -> None:
        """One row per generation: selection, loss and uptime; a failed one is unselected."""
        self.assertTable(self.tables["generations"], *GENERATIONS)

    def test_sessions(self) -> None:
        """One row per peer session with the headline per-session metrics."""
        self.assertTable(self.tables["sessions"], *SESSIONS)

    def test_time_on_each_path(self) -> None:
        """Connected time split by path: a relayed generation counts as relay until its path
        upgrade (S3: 6 s of 20), a direct one as direct; per session, per day and overall."""
        from txdilation_analytics import gold

        self.assertTable(
            self.tables["generations"],
            ["session", "generation", "upgraded", "upgraded_after_s", "relay_s", "direct_s"],
            [
                (S1, 1, False, None, 0.0, 10.0),
                (S2, 1, False, None, 0.0, 10.0),
                (S3, 1, True, 6.0, 6.0, 14.0),
                (S4, 1, False, None, 0.0, 10.0),
                (S4, 2, False, None, 10.0, 0.0),
                (S5, 1, False, None, None, None),
            ],
        )
        self.assertTable(
            self.tables["sessions"],
            ["session", "relay_s", "direct_s", "upgrades", "direct_via_mapping"],
            [
                (S1, 0.0, 10.0, 0, False),
                (S2, 0.0, 10.0, 0, True),
                (S3, 6.0, 14.0, 1, False),
                (S4, 10.0, 10.0, 0, False),
                (S5, None, None, 0, False),
            ],
        )
        daily = gold.daily_sessions(self.tables["sessions"], self.tables["pings"])
        self.assertTable(
            daily,
            ["day", "relay_s", "direct_s", "relay_time_share", "upgrades"],
            [(DATE1, 6.0, 34.0, 0.15, 1), (DATE2, 10.0, 10.0, 0.5, 0)],
        )

    def test_daily_sessions(self) -> None:
        """Gold per-day rates and exact percentiles."""
        from txdilation_analytics import gold

        daily = gold.daily_sessions(self.tables["sessions"], self.tables["pings"])
        self.assertTable(daily, *DAILY_SESSIONS)

    def test_daily_attempts(self) -> None:
        """Gold attempts per day, hint type, direction and outcome."""
        from txdilation_analytics import gold

        self.assertTable(gold.daily_attempts(self.tables["attempts"]), *DAILY_ATTEMPTS)

    def test_daily_losses(self) -> None:
        """Gold connection losses per day (of the loss) and reason, and how many of them a
        reconnect followed."""
        from txdilation_analytics import gold

        self.assertTable(gold.daily_losses(self.tables["generations"]), *DAILY_LOSSES)

    def test_recovery_gaps(self) -> None:
        """The report's recovery gaps: S4's one recovery (direct lost, noticed as a closed
        connection, 2 s gap) in the whole, per noticed_by and per path rows; the section's
        table formats them; no recovery, no section."""
        from types import SimpleNamespace

        from txdilation_analytics import recovery
        from txdilation_analytics.recovery import GapRow

        rows = recovery.gap_rows(SimpleNamespace(events=self.tables["events"]))  # type: ignore[arg-type]
        self.assertEqual(
            rows,
            [
                GapRow("all", "", 1, 2.0, 2.0, 2.0),
                GapRow("noticed_by", "connection_closed", 1, 2.0, 2.0, 2.0),
                GapRow("died", "direct", 1, 2.0, 2.0, 2.0),
            ],
        )
        data = recovery.section_data(rows)
        assert data is not None
        self.assertEqual(
            data["rows"],
            [
                ["all", "", "1", "2 s", "2 s", "2 s"],
                ["noticed by", "connection_closed", "1", "2 s", "2 s", "2 s"],
                ["path that died", "direct", "1", "2 s", "2 s", "2 s"],
            ],
        )
        none = self.tables["events"].filter("event != 'recovered'")
        self.assertIsNone(recovery.collect(SimpleNamespace(events=none)))  # type: ignore[arg-type]

    def test_recovery_gaps_grouped(self) -> None:
        """Several recoveries: exact percentiles (linear interpolation) per group, groups in
        the documented order, a recovery without a gap counted but in no percentile."""
        from types import SimpleNamespace

        from txdilation_analytics import recovery

        events = spark().createDataFrame(
            [
                ("recovered", "probe", "direct", 1.0),
                ("recovered", "probe", "relay", 3.0),
                ("recovered", "liveness", "direct", 50.0),
                ("recovered", "peer_report", "direct", 2.0),
                ("recovered", "liveness", "relay", None),
                ("connection_lost", None, None, None),
            ],
            "event string, noticed_by string, died string, gap_s double",
        )
        rows = recovery.gap_rows(SimpleNamespace(events=events))  # type: ignore[arg-type]
        self.assertEqual([(g.by, g.value, g.count) for g in rows], [
            ("all", "", 5),
            ("noticed_by", "probe", 2), ("noticed_by", "liveness", 2),
            ("noticed_by", "peer_report", 1),
            ("died", "direct", 3), ("died", "relay", 2),
        ])  # fmt: skip
        expected = [
            (2.5, 35.9, 50.0), (2.0, 2.8, 3.0), (50.0, 50.0, 50.0), (2.0, 2.0, 2.0),
            (2.0, 40.4, 50.0), (3.0, 3.0, 3.0),
        ]  # fmt: skip
        for g, (p50, p90, top) in zip(rows, expected, strict=True):
            self.assertAlmostEqual(g.p50, p50, places=9, msg=g)
            self.assertAlmostEqual(g.p90, p90, places=9, msg=g)
            self.assertEqual(g.max, top, g)

    def test_summary(self) -> None:
        """summary.json's session metrics over the whole log, exact percentiles."""
        from txdilation_analytics import schemas
        from txdilation_analytics.summary import build_summary

        s = spark()
        empty = {
            name: s.createDataFrame([], schema)
            for name, schema in (
                ("mailboxes", schemas.MAILBOX_MAILBOXES),
                ("nameplates", schemas.MAILBOX_NAMEPLATES),
                ("transit", schemas.TRANSIT_USAGE),
                ("timing", schemas.CLIENT_TIMING),
            )
        }
        summary = build_summary(
            self.tables["sessions"],
            self.tables["pings"],
            empty["mailboxes"],
            empty["nameplates"],
            empty["transit"],
            empty["timing"],
            {"events": 5},
        )
        json.dumps(summary, allow_nan=False)  # serialisable as is
        approx = {
            "dilation_success_rate": 0.8,
            "relay_share": 0.4,
            "reconnects_per_session": 0.25,
            "retransmitted_bytes_ratio": 250_000 / 2_200_000,
        }
        for key, value in approx.items():
            self.assertAlmostEqual(summary[key], value, places=12, msg=key)
        for key, value in {
            "time_to_dilate_s": {"p50": 0.625, "p90": 1.975, "p99": 2.4475},
            "throughput_Bps": {"p50": 35_000.0, "p90": 53_500.0},
            "rtt_s": {"p50": 0.046875, "p90": 0.09375},
        }.items():
            for q, expected in value.items():
                self.assertAlmostEqual(summary[key][q], expected, places=9, msg=f"{key} {q}")
        self.assertAlmostEqual(summary["relay_time_share"], 16 / 60, places=12)
        exact = {
            "time_on_path_s": {"relay": 16.0, "direct": 44.0},
            "path_upgrades": 1,
            "sessions_direct_via_mapping": 1,
            "sessions": 5,
            "sessions_dilated": 4,
            "generations_total": 6,
            "pairs": 4,
            "rtt_samples": 6,
            "corrupt_lines": 5,
            "mailbox_results": {},
            "nameplate_results": {},
            "transit_results": {},
            "transit_bytes_total": 0,
            "days": {"first": "2026-01-05", "last": "2026-01-06"},
        }
        self.assertEqual({k: summary[k] for k in exact}, exact)


def _row(values: dict[str, Any]) -> Any:
    from pyspark.sql import Row

    return Row(**values)


class QuantileTests(SynchronousTestCase):
    """The bracketed exact percentiles of large runs equal Spark's ``percentile``."""

    def test_bracketed_equals_spark(self) -> None:
        """Random values, values from a few distinct ones (ties across brackets), one value,
        none: the same percentiles as Spark's, to the last bit (a small accuracy makes the
        brackets narrow, as on a large column)."""
        import random

        from txdilation_analytics.quantiles import bracketed, spark_exact

        rng = random.Random(7)
        probs = (0.0, 0.01, 0.5, 0.9, 0.99, 1.0)
        columns = {
            "spread": [rng.lognormvariate(0, 2) for _ in range(20_000)] + [None] * 10,
            "ties": [float(rng.randrange(7)) for _ in range(20_000)],
            "one": [3.5],
            "none": [None],
        }
        for name, values in columns.items():
            df = spark().createDataFrame([(v,) for v in values], "x double")
            self.assertEqual(
                bracketed(df, "x", probs, accuracy=500), spark_exact(df, "x", probs), name
            )
