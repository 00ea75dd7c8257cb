"""docs/analytics.md's demo -> report path, as its two commands:

    TXDILATION_EVENTS=/tmp/demo-events.jsonl txdilation demo
    txdilation-analytics analyze --events /tmp/demo-events.jsonl --output /tmp/demo-report

The demo (a shorter one: 4 MiB, one link cut) must say where its telemetry went; the report of
its two sessions is then a few lines on stdout (both dilated, one reconnect each, no JSON),
the page and ``summary.json``, with no Spark warning on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from twisted.trial.unittest import SynchronousTestCase

from ._spark import spark
from .test_cli import run_cli_out

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class DemoReportTests(SynchronousTestCase):
    """The demo's telemetry, then its report."""

    def test_demo_then_report(self) -> None:
        """The demo names its telemetry file and the command; analyze reports its two
        dilated sessions in three lines."""
        spark()  # skips without Spark
        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        events = os.path.join(tmp, "demo-events.jsonl")
        demo = subprocess.run(
            [sys.executable, "-m", "txdilation.cli", "demo", "--mib", "4", "--cuts", "1",
             "--timeout", "60"],
            env=dict(os.environ, TXDILATION_EVENTS=events), capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        self.assertEqual(demo.returncode, 0, demo.stdout + demo.stderr)
        self.assertIn(
            f"appended to {events} (TXDILATION_EVENTS); report: "
            f"txdilation-analytics analyze --events {events} --output DIR",
            demo.stdout,
        )

        out = os.path.join(tmp, "demo-report")
        status, stdout, stderr = run_cli_out("analyze", "--events", events, "--output", out)
        self.assertEqual(status, 0, stderr)
        lines = stdout.splitlines()
        self.assertEqual(len(lines), 3, stdout)
        self.assertRegex(lines[0], r"^2 sessions \(\d{4}-\d\d-\d\d\): 100\.0 % dilated, ")
        self.assertEqual(lines[1], f"report:  {out}/report/index.html")
        self.assertEqual(lines[2], f"summary: {out}/report/summary.json")
        self.assertNotIn("WARN", stderr)
        with open(os.path.join(out, "report", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["sessions"], summary["sessions_dilated"]), (2, 2))
        self.assertEqual(summary["pairs"], 1)
        self.assertGreater(summary["reconnects_per_session"], 0)  # the cut
        self.assertTrue(os.path.isfile(os.path.join(out, "report", "index.html")))
