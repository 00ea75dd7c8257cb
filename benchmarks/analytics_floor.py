"""What Spark itself costs per telemetry line on this machine: the floor under ``analyze``.

Whatever the pipeline's own expressions, an ``analyze`` over event logs must at least read and
parse every line once (Spark's JSON reader with the telemetry schema), store the parsed rows
for later increments (Parquet), bring each session's events together in order once (a shuffle
and sort by session) and aggregate them once (a hash aggregation by session). This benchmark
times exactly those Spark operations on the given event files, with no pipeline code between
them, each written to Spark's ``noop`` sink (everything computed, nothing kept) or to Parquet
(the stored rows without ``ingest``'s unparseable-line text column, which makes Spark's JSON
reader cheapest: the floor is a lower bound),
and prints per step the wall and CPU seconds (this process, its JVM and workers), CPU
microseconds per line, and what the step alone would cost for ``--sessions`` sessions (lines
per session as measured here) on ``--cores`` cores, assuming perfect parallelism and linear
growth (docs/analytics.md shows both hold from 1M to 10M sessions). The pipeline's own stage
figures come from
``benchmarks/analytics_scale.py``; compare its CPU seconds per line with the sum here.

Usage (an input written by ``txdilation-analytics synth --compress``)::

    python benchmarks/analytics_floor.py --events /var/tmp/scale/data-1000000-gz/events \\
        --files 4 --sessions 10000000
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "src")]


def main() -> None:
    """Time each floor step on the given files and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", required=True, help="a directory of synth's part-* files")
    p.add_argument("--files", type=int, default=4, help="how many of its files to read")
    p.add_argument("--sessions", type=int, default=10_000_000, help="size to extrapolate to")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    p.add_argument("--driver-memory", default="6g")
    args = p.parse_args()

    from pyspark.sql import functions as F

    from benchmarks.analytics_scale import process_tree_usage
    from txdilation_analytics import schemas, sources
    from txdilation_analytics.session import get_spark

    paths = sorted(glob.glob(os.path.join(args.events, "part-*")))[: args.files]
    if not paths:
        raise SystemExit(f"no part-* files in {args.events}")
    spark = get_spark(f"local[{args.cores}]", driver_memory=args.driver_memory)

    def cpu() -> float:
        return process_tree_usage([os.getpid()])[1]

    work = tempfile.mkdtemp(prefix="txdilation-floor-")
    stored = os.path.join(work, "events")

    def run(df: Any, path: str | None = None) -> tuple[float, float]:
        start, used = time.monotonic(), cpu()
        writer = df.write.mode("overwrite")
        if path is None:
            writer.format("noop").save()
        else:
            writer.parquet(path)
        return time.monotonic() - start, cpu() - used

    raw = sources.read_events(spark, paths)
    run(raw)  # JIT warm-up, not counted
    lines = spark.read.text(paths).count()
    sessions = raw.select("session").distinct().count()
    parsed = raw.drop(schemas.CORRUPT)
    steps: list[tuple[str, Callable[[], tuple[float, float]]]] = [
        ("read the lines (gunzip, split)", lambda: run(spark.read.text(paths))),
        ("parse them (Spark's JSON reader)", lambda: run(raw)),
        ("parse and write Parquet", lambda: run(parsed, stored)),
        (
            "read Parquet, sort by session",
            lambda: run(
                spark.read.parquet(stored)
                .repartition("session")
                .sortWithinPartitions("session", "seq", "ts")
            ),
        ),
        (
            "read Parquet, aggregate by session",
            lambda: run(
                spark.read.parquet(stored)
                .groupBy("session")
                .agg(F.count(F.lit(1)), F.min("ts"), F.max("ts"), F.max("generation"))
            ),
        ),
    ]
    figures = [(name, *step()) for name, step in steps]
    per_session = lines / sessions
    scale = args.sessions * per_session / lines
    print(
        f"\n{len(paths)} files, {lines:,} lines, {sessions:,} sessions "
        f"({per_session:.1f} lines each); {args.cores} cores; extrapolated to "
        f"{args.sessions:,} sessions = {args.sessions * per_session / 1e6:,.0f} M lines\n"
    )
    print(
        f"{'step':<36} {'wall s':>7} {'CPU s':>7} {'us/line':>8} {'at size: CPU s':>15}"
        f" {'min wall':>9}"
    )
    for name, wall, used in figures:
        at = used * scale
        print(
            f"{name:<36} {wall:>7.1f} {used:>7.1f} {used / lines * 1e6:>8.2f} {at:>15,.0f}"
            f" {at / args.cores / 60:>7.1f} m"
        )
    # parse+write includes parsing; the floor is that plus one sort and one aggregation
    floor = sum(used for name, _, used in figures[2:]) * scale
    print(
        f"\nparse + store + one sort + one aggregation at {args.sessions:,} sessions: "
        f"{floor:,.0f} CPU s, at least {floor / args.cores / 60:.1f} min on "
        f"{args.cores} cores"
    )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
