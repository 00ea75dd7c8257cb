"""Increments: ``ingest`` appends what is new, never re-reads what it has, and runs cover days.

The golden log is split into one file per UTC day (bad lines with the first). Ingesting day 1,
then day 1 again, then both days, then day 1 grown by a line shows: nothing already ingested
is read again (a file whose content was swapped for garbage with the same size and
modification time changes nothing), the day-1 partition files are untouched by day 2's
ingest, a grown file replaces its earlier rows; a usage DB is read from its last ingested row
on; and ``analyze --from/--to`` covers the sessions requested on those days, which the summary
and the page say.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import pytest
from twisted.trial.unittest import SynchronousTestCase

from . import golden
from ._spark import spark
from .test_cli import run_cli

pytestmark = pytest.mark.spark


def split_by_day(source: str, day1: str, day2: str) -> tuple[int, int]:
    """Write the lines of ``source`` whose ``ts`` is on the golden log's second day to
    ``day2``, the others (bad lines included) to ``day1``; returns both line counts."""
    lines: dict[str, list[str]] = {day1: [], day2: []}
    with open(source, encoding="utf-8") as f:
        for line in f:
            try:
                ts = json.loads(line).get("ts")
            except (ValueError, AttributeError):
                ts = None
            late = isinstance(ts, float | int) and ts >= golden.DAY2
            lines[day2 if late else day1].append(line)
    for path, chunk in lines.items():
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(chunk)
    return len(lines[day1]), len(lines[day2])


def parquet_files(table: str) -> dict[str, float]:
    """Every Parquet file under a table directory, with its modification time."""
    out = {}
    for root, _, names in os.walk(table):
        for name in names:
            if name.endswith(".parquet"):
                full = os.path.join(root, name)
                out[os.path.relpath(full, table)] = os.stat(full).st_mtime
    return out


class IncrementTests(SynchronousTestCase):
    """Incremental ingest of event files and usage DBs; day ranges."""

    def setUp(self) -> None:
        spark()  # skips without Spark
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.out = os.path.join(self.dir, "out")
        whole = os.path.join(self.dir, "golden.jsonl")
        golden.write_golden_log(whole)
        self.day1 = os.path.join(self.dir, "events", "day1.jsonl")
        self.day2 = os.path.join(self.dir, "events", "day2.jsonl")
        os.makedirs(os.path.dirname(self.day1))
        self.lines = split_by_day(whole, self.day1, self.day2)

    def ingest(self, *args: str) -> dict[str, Any]:
        status, err = run_cli("ingest", *args, "--output", self.out, "-q")
        self.assertEqual(status, 0, err)
        with open(os.path.join(self.out, "bronze", "_stage.json")) as f:
            result: dict[str, Any] = json.load(f)["result"]
        return result

    def bronze_rows(self, table: str = "events") -> int:
        return int(spark().read.parquet(os.path.join(self.out, "bronze", table)).count())

    def test_event_files(self) -> None:
        """New files are read, known ones skipped (even with swapped content), a grown one
        replaces its rows; bronze is partitioned by day and day 1's files stay as they were."""
        first = self.ingest("--events", self.day1)["events"]
        self.assertEqual((first["files_new"], first["files_skipped"]), (1, 0))
        self.assertEqual(first["rows"] + first["bad_lines"], self.lines[0])
        table = os.path.join(self.out, "bronze", "events")
        days = set(os.listdir(table))
        self.assertIn("day=2026-01-05", days)
        self.assertIn("day=__HIVE_DEFAULT_PARTITION__", days)  # the unparseable line
        self.assertNotIn("day=2026-01-06", days)
        rows = self.bronze_rows()

        # the same file again, its content swapped for garbage of the same size and mtime
        st = os.stat(self.day1)
        with open(self.day1, "r+", encoding="utf-8") as f:
            f.write("x" * st.st_size)
        os.utime(self.day1, ns=(st.st_atime_ns, st.st_mtime_ns))
        again = self.ingest("--events", self.day1)["events"]
        self.assertEqual((again["files_new"], again["files_skipped"], again["rows"]), (0, 1, 0))
        self.assertEqual(self.bronze_rows(), rows)

        before = parquet_files(table)
        both = self.ingest("--events", os.path.join(self.dir, "events"))["events"]
        self.assertEqual((both["files_new"], both["files_skipped"]), (1, 1))
        self.assertEqual(both["rows"] + both["bad_lines"], self.lines[1])
        after = parquet_files(table)
        self.assertEqual({k: v for k, v in after.items() if k in before}, before)
        self.assertIn("day=2026-01-06", os.listdir(table))
        self.assertEqual(self.bronze_rows(), rows + self.lines[1])

        # day 2's file grows by one of its own lines (a log still written): read again, its
        # earlier rows replaced, not doubled
        with open(self.day2, encoding="utf-8") as f:
            extra = f.readline()
        with open(self.day2, "a", encoding="utf-8") as f:
            f.write(extra)
        grown = self.ingest("--events", self.day2)["events"]
        self.assertEqual(grown["files_changed"], 1)
        self.assertEqual(grown["rows"] + grown["bad_lines"], self.lines[1] + 1)
        self.assertEqual(self.bronze_rows(), rows + self.lines[1] + 1)
        day1_files = {k: v for k, v in before.items() if k.startswith("day=2026-01-05")}
        self.assertEqual(
            {k: v for k, v in parquet_files(table).items() if k in day1_files}, day1_files
        )
        with open(os.path.join(self.out, "bronze", "_ingested.json")) as f:
            manifest = json.load(f)
        self.assertEqual(len(manifest["sources"]["events"]["files"]), 2)

    def test_usage_db(self) -> None:
        """A usage DB (the mailbox server's, the relay's) is read from the row after the last
        one ingested; a side seen before is not counted again in client_versions; a relay row
        with a bad mood is counted as bad once."""
        from txdilation_analytics.synth import USAGE_DDL

        db_path = os.path.join(self.dir, "usage.sqlite")
        db = sqlite3.connect(db_path)
        db.executescript(USAGE_DDL)
        row = "INSERT INTO mailboxes VALUES ('app', 1, ?, 2.5, 0.5, 'happy')"
        db.executemany(row, [(golden.DAY1 + i,) for i in range(5)])
        side = "INSERT INTO client_versions VALUES ('app', ?, ?, 'python', '0.24.0')"
        db.executemany(side, [("aaaa", golden.DAY1), ("bbbb", golden.DAY1 + 1)])
        db.commit()
        first = self.ingest("--mailbox-usage-db", db_path)["mailbox_usage_db"]
        self.assertEqual(first["rows"], 5 + 2)
        same = self.ingest("--mailbox-usage-db", db_path)["mailbox_usage_db"]
        self.assertEqual((same["files_skipped"], same["rows"]), (1, 0))
        db.executemany(row, [(golden.DAY2 + i,) for i in range(3)])
        db.executemany(side, [("aaaa", golden.DAY2), ("cccc", golden.DAY2 + 1)])  # aaaa again
        db.commit()
        db.close()
        more = self.ingest("--mailbox-usage-db", db_path)["mailbox_usage_db"]
        self.assertEqual(more["rows"], 3 + 1)
        self.assertEqual(self.bronze_rows("mailbox_mailboxes"), 8)
        self.assertEqual(self.bronze_rows("mailbox_client_versions"), 3)

        relay_path = os.path.join(self.dir, "relay.sqlite")
        relay = sqlite3.connect(relay_path)
        relay.execute("CREATE TABLE usage (started, total_time, waiting_time, total_bytes, result)")
        usage = "INSERT INTO usage VALUES (?, 1.5, 0.5, 1000, ?)"
        relay.executemany(usage, [(golden.DAY1, "happy"), (golden.DAY1 + 1, "sad")])
        relay.commit()
        first = self.ingest("--transit-usage-db", relay_path)["transit_usage_db"]
        self.assertEqual((first["rows"], first["bad_by_reason"]), (1, {"bad_value": 1}))
        relay.execute(usage, (golden.DAY2, "lonely"))
        relay.commit()
        relay.close()
        more = self.ingest("--transit-usage-db", relay_path)["transit_usage_db"]
        self.assertEqual((more["rows"], more["bad_lines"]), (1, 0))
        self.assertEqual(self.bronze_rows("transit_db"), 3)  # the bad row kept, flagged

    def test_day_range(self) -> None:
        """analyze --from/--to DAY2: the sessions requested that day, and the summary, the
        page and stdout say which days."""
        from .test_cli import run_cli_out

        status, out, err = run_cli_out(
            "analyze", "--events", os.path.join(self.dir, "events"), "--output", self.out,
            "--from", "2026-01-06", "--to", "2026-01-06", "-q",
        )  # fmt: skip
        self.assertEqual(status, 0, err)
        with open(os.path.join(self.out, "report", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["range"], {"from": "2026-01-06", "to": "2026-01-06"})
        self.assertEqual(summary["sessions"], 2)  # S4 and S5
        self.assertEqual(summary["days"], {"first": "2026-01-06", "last": "2026-01-06"})
        with open(os.path.join(self.out, "report", "index.html"), encoding="utf-8") as f:
            page = f.read()
        self.assertIn("sessions requested from 2026-01-06 to 2026-01-06", page)
        self.assertIn("2 sessions (2026-01-06)", out)
        status, out, err = run_cli_out("analyze", "--output", self.out)  # no input: all days
        self.assertEqual(status, 0, err)
        with open(os.path.join(self.out, "report", "summary.json")) as f:
            self.assertEqual(json.load(f)["sessions"], 5)
