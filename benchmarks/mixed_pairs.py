"""
Mixed pairs under cuts (issue 33): how often a transfer between a stock peer and a txdilation
peer fails, per pairing, direction, leader, moment of the cuts and CPU load, and who leads.

``python -m benchmarks.mixed_pairs [--runs N] [--senders stock,txdilation] [--leaders
stock,txdilation] [--moments all,handshake,stream,close] [--loads 0,3] [--path relay]
[--total BYTES] [--json FILE]``; ``--report FILE...`` prints the tables of earlier runs.

Layer: benchmark infrastructure; prints figures, asserts nothing. Each run is
``tests.support.mixed.run_mixed`` (real processes, the real mailbox server and transit relay
in this process, a fault proxy rate-limited to 20 MB/s; its docstring defines the moments and
the outcomes; ``--leaders stock`` forces the stock peer's side to the highest, ``txdilation``
forces nothing, and the table says how often txdilation then led). ``--runs`` runs per cell,
the moments taken in turn when several are given (so ``--runs 200 --moments
all,handshake,stream,close`` is 50 runs of each). Load ``3`` runs three
busy-looping processes (``tests.support.hogs``) for the cell, on top of whatever else runs;
each cell's record carries ``/proc/loadavg`` before and after. The role table compares 1,000
sides from txdilation's ``make_side`` with 1,000 from stock's (the higher side leads, in both
implementations), and counts the roles the txdilation peers got in the runs where nobody
forced a side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.harness import (  # noqa: E402
    apply_loopback_env,
    start_mailbox_server,
    start_transit_relay,
)
from tests.support.hogs import start_hogs  # noqa: E402
from tests.support.mixed import MOMENTS, Cell, run_mixed  # noqa: E402

ROLE_CHOICES = 1000
HOG_LIFETIME = 7200.0


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.mixed_pairs", description=__doc__)
    p.add_argument("--runs", type=int, default=20, help="runs per cell")
    p.add_argument("--senders", default="stock,txdilation")
    p.add_argument("--leaders", default="stock,txdilation")
    p.add_argument("--moments", default=",".join(MOMENTS))
    p.add_argument("--loads", default="0", help="comma-separated: 0 (quiet) or N hogs")
    p.add_argument("--path", default="relay", choices=("relay", "direct"))
    p.add_argument("--total", type=int, default=16 << 20, help="bytes per transfer")
    p.add_argument("--timeout", type=float, default=60.0, help="a run's bound (s)")
    p.add_argument("--json", default=None, help="append each run's record to this file")
    p.add_argument("--report", nargs="+", default=None, help="print the tables of these files")
    return p.parse_args(argv)


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages ("unknown" without /proc)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def role_choices(count: int = ROLE_CHOICES) -> dict[str, Any]:
    """Who leads when txdilation's make_side meets stock's (this process never installs
    txdilation: ``wormhole._dilation.manager`` is stock's)."""
    from wormhole._dilation.manager import make_side as stock_side

    from txdilation.mailbox.dilate_messages import make_side as our_side

    led = sum(our_side() > stock_side() for _ in range(count))
    return {"kind": "roles", "choices": count, "txdilation_leads": led}


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    apply_loopback_env()
    records: list[dict[str, Any]] = [role_choices()]
    mailbox = await start_mailbox_server(reactor)
    relay = await start_transit_relay(reactor)
    moments = args.moments.split(",")
    try:
        for load in [int(x) for x in args.loads.split(",")]:
            stop_hogs = start_hogs(load, HOG_LIFETIME) if load else None
            try:
                for sender in args.senders.split(","):
                    for leader in args.leaders.split(","):
                        before = loadavg()
                        for index in range(args.runs):
                            cell = Cell(sender, leader, moments[index % len(moments)], args.path)
                            run = await run_mixed(
                                reactor,
                                mailbox.url,
                                relay.port,
                                cell,
                                total=args.total,
                                timeout=args.timeout,
                                seed=f"mixed-{index}",
                            )
                            record = {"kind": "run", "load": load, **run.as_json()}
                            record["loadavg"] = [before, loadavg()]
                            print(json.dumps(record), file=sys.stderr, flush=True)
                            records.append(record)
                            if args.json:
                                with open(args.json, "a") as out:
                                    out.write(json.dumps(record) + "\n")
            finally:
                if stop_hogs is not None:
                    stop_hogs()
    finally:
        await relay.stop()
        await mailbox.stop()
    if args.json:
        with open(args.json, "a") as out:
            out.write(json.dumps(records[0]) + "\n")
    return records


def table(records: list[dict[str, Any]]) -> str:
    """The failure table (pairing x leader x moment x load x path) and the role table."""
    cells: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("kind") == "run":
            c = r["cell"]
            key = (
                f"{c['sender']} -> {'txdilation' if c['sender'] == 'stock' else 'stock'}",
                "stock (forced)" if c["leader"] == "stock" else "not forced",
                c["moment"],
                str(r["load"]),
                c["path"],
            )
            cells[key].append(r)
    columns = ["sender -> receiver", "sides", "cuts at", "load (hogs)", "path", "runs"]
    columns += ["txdilation led"]
    columns += ["failed", "stalls", "unconfirmed", "errors"]
    columns += ["sender ends after the last ACK: worst (s)"]
    columns += ["median run (s)"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key in sorted(cells):
        runs = cells[key]
        outcomes = Counter(r["outcome"] for r in runs)
        lags = [r["sender_lag"] for r in runs if r.get("sender_lag") is not None]
        seconds = sorted(r["seconds"] for r in runs)
        failed = len(runs) - outcomes["ok"]
        led = sum(r.get("txdilation_role") == "leader" for r in runs)
        worst = f"{max(lags):.2f}" if lags else "-"
        lines.append(
            f"| {' | '.join(key)} | {len(runs)} | {led} | {failed} | {outcomes['stall']} | "
            f"{outcomes['unconfirmed']} | {outcomes['error']} | {worst} | "
            f"{seconds[len(seconds) // 2]:.1f} |"
        )
    lines.append("")
    for r in records:
        if r.get("kind") == "roles":
            share = 100.0 * r["txdilation_leads"] / r["choices"]
            lines.append(
                f"role choices (make_side, txdilation's against stock's): txdilation leads "
                f"{r['txdilation_leads']} of {r['choices']} ({share:.1f}%)"
            )
    natural = Counter(
        r.get("txdilation_role")
        for r in records
        if r.get("kind") == "run" and r["cell"]["leader"] == "txdilation"
    )
    if natural:
        lines.append(
            "roles the txdilation peer got where nobody forced a side: "
            + ", ".join(f"{role}: {n}" for role, n in sorted(natural.items(), key=str))
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.report is not None:
        records = []
        for path in args.report:
            with open(path) as f:
                records += [json.loads(line) for line in f if line.strip()]
        print(table(records))
        return 0
    from twisted.internet import defer, task

    async def run(reactor: Any) -> None:
        started = time.monotonic()
        records = await measure(reactor, args)
        print(table(records))
        print(f"({time.monotonic() - started:.0f} s)")

    task.react(lambda reactor: defer.ensureDeferred(run(reactor)))  # exits the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
