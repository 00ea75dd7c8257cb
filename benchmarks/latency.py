"""Latency, stock Dilation vs txdilation side by side: ``python -m benchmarks.latency``.

Layer: benchmark infrastructure. One real mailbox server on 127.0.0.1, and per run two peers
in their own processes (``benchmarks.latency_peer``: stock confined to 127.0.0.1 by
``tests.support.harness.stock_loopback()``, txdilation installed as the drop-in), run
alternately (stock, txdilation, stock, ...; with ``--base DIR`` a third, txdilation from another
checkout's ``src``, e.g. the commit a change started from). Each run measures, on one link:

- the first exchange on a new subchannel: ``connect()`` -> the echo of the 100 bytes its
  protocol writes in ``connectionMade`` (a fresh subchannel each time, the link idle before);
- the idle echo round trip of 100 bytes, per write spacing (ms from an echo to the next write);
- the interactive echo round trip (10 ms apart) on one subchannel while another subchannel of
  the same link streams bulk data (64 KiB writes from a push producer) the same way, and that
  bulk stream's rate.

The table pools each implementation's samples over its runs and shows percentiles (nearest
rank); the load during the runs (1-minute load average, other processes' CPU) is printed too.
``--json PATH`` writes every sample.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.run import (  # noqa: E402
    BenchmarkError,
    Session,
    child_environment,
    environment_summary,
    start_mailbox,
)

#: target (ms) of each figure, and the percentile it applies to
FIRST_TARGET = (2.0, 50)
IDLE_TARGET = (2.0, 99)
BULK_TARGET = (10.0, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile by nearest rank (``q`` in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's samples over all its runs."""
    spacings: dict[str, list[float]] = {}
    for run in runs:
        for spacing, values in run["idle_ms"].items():
            spacings.setdefault(spacing, []).extend(values)
    return {
        "first_ms": [v for run in runs for v in run["first_ms"]],
        "idle_ms": spacings,
        "bulk_ms": [v for run in runs for v in run["bulk_ms"]],
        "bulk_mbps": [run["bulk_mbps"] for run in runs],
    }


def _cell(values: Sequence[float], qs: Sequence[float]) -> str:
    return " / ".join(f"{percentile(values, q):.2f}" for q in qs)


def _verdict(values_by_variant: dict[str, Sequence[float]], target: tuple[float, float]) -> str:
    limit, q = target
    ours = values_by_variant.get("txdilation")
    if not ours:
        return ""
    met = percentile(ours, q) <= limit
    return f"p{q:g} <= {limit:g} ms: {'met' if met else 'NOT MET'}"


def format_table(pools: dict[str, dict[str, Any]]) -> str:
    """The Markdown table: one row per figure, one column per variant."""
    variants = list(pools)
    lines = [
        "| figure (ms) | " + " | ".join(variants) + " | target (txdilation) |",
        "|---|" + "---:|" * len(variants) + "---|",
    ]

    def row(title: str, key: str, qs: Sequence[float], target: tuple[float, float]) -> None:
        values = {v: pools[v][key] for v in variants}
        cells = " | ".join(_cell(values[v], qs) for v in variants)
        lines.append(f"| {title} | {cells} | {_verdict(values, target)} |")

    row("first exchange on a new subchannel, p50 / p99", "first_ms", (50, 99), FIRST_TARGET)
    spacings = list(pools[variants[0]]["idle_ms"])
    for spacing in spacings:
        values = {v: pools[v]["idle_ms"].get(spacing, []) for v in variants}
        cells = " | ".join(_cell(values[v], (50, 90, 99)) for v in variants)
        title = f"idle round trip, {spacing} ms apart, p50 / p90 / p99"
        lines.append(f"| {title} | {cells} | {_verdict(values, IDLE_TARGET)} |")
    row("interactive under bulk, p50 / p90 / p99", "bulk_ms", (50, 90, 99), BULK_TARGET)
    rates = " | ".join(f"{statistics.median(pools[v]['bulk_mbps']):.0f}" for v in variants)
    lines.append(f"| bulk rate meanwhile (MB/s, median of runs) | {rates} | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns 0 (1 when a run failed)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=3, help="alternating rounds")
    p.add_argument("--base", default=None, help="also run txdilation from DIR/src")
    p.add_argument("--first", type=int, default=30, help="new subchannels per run")
    p.add_argument("--samples", type=int, default=100, help="idle round trips per spacing")
    p.add_argument("--spacings", default="0,1,5,20,100", help="ms between idle writes")
    p.add_argument("--bulk-samples", type=int, default=200, help="round trips under bulk")
    p.add_argument("--json", default=None, help="write every sample to this file")
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    args = p.parse_args(argv)

    env = child_environment()
    environments = {"stock": env}
    if args.base:
        base = dict(env)
        base["PYTHONPATH"] = os.pathsep.join([str(Path(args.base) / "src"), env["PYTHONPATH"]])
        environments["txdilation (base)"] = base
    environments["txdilation"] = env
    mailbox, url = start_mailbox(env)
    session = Session(url, mailbox.pid, args.timeout, None, env, "benchmarks.latency_peer")
    client = [
        "--first", str(args.first), "--samples", str(args.samples), "--spacings", args.spacings,
        "--bulk-samples", str(args.bulk_samples),
    ]  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in environments}
    loads: list[dict[str, float]] = []
    try:
        for index in range(args.pairs):
            for name, variant_env in environments.items():
                session.env = variant_env
                impl = "stock" if name == "stock" else "txdilation"
                _, right, load = session.run_pair(
                    impl, ("latency-server", []), ("latency-client", client)
                )
                runs[name].append(right)
                loads.append(load)
                print(
                    f"#{index + 1} {name}: first p50 {percentile(right['first_ms'], 50):.2f} ms, "
                    f"under bulk p99 {percentile(right['bulk_ms'], 99):.2f} ms, bulk "
                    f"{right['bulk_mbps']:.0f} MB/s (load {load['loadavg1']:.1f}, other CPU "
                    f"{load['other_cores']:.2f} cores)",
                    file=sys.stderr,
                    flush=True,
                )
    except BenchmarkError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        assert mailbox.stdin is not None
        mailbox.stdin.close()
        mailbox.wait(timeout=30)
    pools = {name: pooled(variant_runs) for name, variant_runs in runs.items()}
    print(format_table(pools))
    others = [load["other_cores"] for load in loads]
    averages = [load["loadavg1"] for load in loads]
    print(
        f"\n{args.pairs} runs per variant; 1-minute load average {statistics.median(averages):.1f}"
        f" (median; {min(averages):.1f} to {max(averages):.1f}); other processes kept "
        f"{statistics.median(others):.2f} cores busy (median; max {max(others):.2f})"
    )
    if args.base:
        print(f"txdilation (base): {args.base}")
    print(environment_summary())
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "loads": loads}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
