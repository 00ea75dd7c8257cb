"""The speed regression guard: ``benchmarks/run.py --quick`` against stock, in CI.

Layer: benchmark harness checks. The guard runs a small bulk transfer (64 MiB in 64 KiB
writes, receiver SHA-256, each peer in its own process, real mailbox server, 127.0.0.1 only)
alternately with stock magic-wormhole and with txdilation, and fails only on a gross regression:

- txdilation slower than stock at all (median of the per-pair throughput ratios below 1), or
- txdilation below 1.5 times stock's throughput AND below 1.5 times stock's efficiency (the
  CPU seconds both peers spend on the transfer, per-pair ratio, median).

On a shared 2-core machine the wall-clock ratio swings with other processes' load (both peers
compete with them for the cores); CPU seconds per byte do not, so a 1.5x shortfall counts only
when both show it. The real figures and targets are measured and reported by
``python benchmarks/run.py``, not asserted here. The other tests pin the report's arithmetic.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from twisted.trial.unittest import SynchronousTestCase

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import latency  # noqa: E402
from benchmarks.run import Figure, Row, format_table, summarize  # noqa: E402

GUARD_RATIO = 1.5  # txdilation/stock throughput, and stock/txdilation CPU seconds
GUARD_PAIRS = 5
GUARD_TIMEOUT = 240  # seconds; the run normally takes 20 to 40


class ReportArithmeticTests(SynchronousTestCase):
    def test_medians_and_per_pair_ratio(self) -> None:
        """Each implementation's median is reported, and the ratio is the median of the
        per-pair txdilation/stock ratios (not the ratio of the medians)."""
        figure = Figure("f", (Row("mbps", "speed", "MB/s", True, 3.0),), lambda *a: {}, 3)
        trials = {
            "stock": [{"mbps": 100.0}, {"mbps": 50.0}, {"mbps": 200.0}],
            "txdilation": [{"mbps": 400.0}, {"mbps": 100.0}, {"mbps": 500.0}],
        }
        (row,) = summarize(figure, trials)
        self.assertEqual(row["stock"], 100.0)
        self.assertEqual(row["txdilation"], 400.0)
        self.assertEqual(row["ratios"], [4.0, 2.0, 2.5])
        self.assertEqual(row["ratio"], 2.5)
        self.assertFalse(row["met"])
        self.assertIn("NOT MET", format_table([row]))

    def test_lower_is_better(self) -> None:
        """For a time or memory row the target is met when the ratio is at most the goal."""
        figure = Figure("f", (Row("ms", "gap", "ms", False, 1.0, 1),), lambda *a: {}, 2)
        trials = {"stock": [{"ms": 12.0}, {"ms": 14.0}], "txdilation": [{"ms": 9.0}, {"ms": 7.0}]}
        (row,) = summarize(figure, trials)
        self.assertTrue(row["met"])
        self.assertIn("| 13.0 | 8.0 | 0.62 | <= 1: met |", format_table([row]))


class LatencyReportTests(SynchronousTestCase):
    """benchmarks.latency's percentiles, pooling and table."""

    def test_percentiles_by_nearest_rank(self) -> None:
        """p50 of 1..100 is 50, p99 is 99, p100 the largest; one sample is every percentile."""
        values = [float(v) for v in range(100, 0, -1)]
        self.assertEqual(
            [latency.percentile(values, q) for q in (50, 90, 99, 100)], [50, 90, 99, 100]
        )
        self.assertEqual(latency.percentile([7.0], 99), 7.0)

    def test_runs_are_pooled_and_tabled_against_the_targets(self) -> None:
        """Each variant's samples are pooled over its runs (spacing by spacing); the table
        has one column per variant and judges txdilation's pooled percentile."""
        run = {"first_ms": [1.0, 3.0], "idle_ms": {"0": [0.5], "5": [1.0]}, "bulk_mbps": 100}
        slow = {**run, "bulk_ms": [20.0, 40.0]}
        fast = {**run, "bulk_ms": [4.0, 12.0]}
        pools = {
            "stock": latency.pooled([slow, slow]),
            "txdilation": latency.pooled([fast, {**fast, "bulk_ms": [5.0]}]),
        }
        self.assertEqual(pools["txdilation"]["bulk_ms"], [4.0, 12.0, 5.0])
        self.assertEqual(pools["stock"]["idle_ms"], {"0": [0.5, 0.5], "5": [1.0, 1.0]})
        table = latency.format_table(pools)
        self.assertIn(
            "| interactive under bulk, p50 / p90 / p99 | 20.00 / 40.00 / 40.00 | "
            "5.00 / 12.00 / 12.00 | p99 <= 10 ms: NOT MET |",
            table,
        )
        self.assertIn(
            "| idle round trip, 5 ms apart, p50 / p90 / p99 | 1.00 / 1.00 / 1.00 | "
            "1.00 / 1.00 / 1.00 | p99 <= 2 ms: met |",
            table,
        )


@pytest.mark.slow
class QuickBenchmarkGuardSlowTests(SynchronousTestCase):
    def test_not_grossly_slower_than_three_halves_of_stock(self) -> None:
        """Over 5 alternating pairs (the received SHA-256 checked in every run), txdilation is
        never slower than stock, and is 1.5 times as fast or spends at most 2/3 of stock's CPU
        seconds on the transfer (medians of the per-pair ratios)."""
        with tempfile.TemporaryDirectory() as scratch:
            output = Path(scratch) / "quick.json"
            command = [
                sys.executable,
                str(REPO_ROOT / "benchmarks" / "run.py"),
                "--quick",
                "--no-limits",
                "--pairs",
                str(GUARD_PAIRS),
                "--json",
                str(output),
            ]
            run = subprocess.run(
                command, capture_output=True, text=True, timeout=GUARD_TIMEOUT, cwd=str(REPO_ROOT)
            )
            report = f"{run.stdout}\n{run.stderr[-3000:]}"
            self.assertEqual(run.returncode, 0, report)
            speed, cpu = json.loads(output.read_text())["rows"]
        self.assertEqual((speed["key"], cpu["key"]), ("mbps", "cpu"))
        self.assertEqual(len(speed["ratios"]), GUARD_PAIRS, report)
        self.assertGreaterEqual(speed["ratio"], 1.0, report)
        fast_enough = speed["ratio"] >= GUARD_RATIO
        efficient_enough = cpu["ratio"] <= 1 / GUARD_RATIO
        self.assertTrue(fast_enough or efficient_enough, report)
