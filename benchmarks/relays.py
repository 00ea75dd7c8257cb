"""
Several relays and WebSocket relays, in network namespaces: what a dead first relay costs, and
time to dilate and 64 MiB throughput over a WebSocket relay against the same relay over TCP.

``python -m benchmarks.relays [--runs 3] [--json FILE]``; ``--report FILE`` prints the tables of
earlier runs. Topology (``benchmarks.namespaced``): the router, the real mailbox server and
transit relay (TCP 4001, WebSocket 4002) on a host of their own, peer hosts ``a`` and ``b``;
both peers txdilation with ``--no-listen`` (only a relay can carry the link).

- ``dead``: left names [X, good], right names [Y, good] where X/Y are the same kind of dead
  relay: ``refusing`` (a closed port on the servers' host) or ``black-holed`` (an address the
  router drops silently); ``none``: both name only the good relay. Time to dilate is from the
  peer's first ``ConnectingPeer`` status to its first ``ConnectedPeer`` (the later of the two).
- ``transfer``: ``ws``: host ``a`` can reach the relay only on its WebSocket port (nftables drop
  of TCP 4001) and is given ``tcp:...,ws://...``; ``b`` uses TCP; ``tcp``: both use TCP. 64 MiB
  from ``b`` to ``a``, no cuts; throughput is the receiver's bytes over its seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from tests.support.harness import run_peer_pair
from tests.support.netns import Network
from tests.support.peers import connections, dilate_seconds, placement
from tests.support.servers import start_servers

from benchmarks.namespaced import keep, log, markdown_table, script_main

WS_PORT = 4002
TOTAL = 64 << 20
DEAD = {"refusing": ("servers", 4009), "black-holed": ("10.200.0.2", 4001)}


async def one_run(reactor: Any, kind: str, case: str, index: int) -> dict[str, Any]:
    """One run in a scene of its own; its record."""
    with ExitStack() as stack:
        net = stack.enter_context(Network())
        internet = net.router()
        server_host = net.host("servers", internet)
        servers = start_servers(server_host, websocket_port=WS_PORT)
        stack.callback(servers.stop)
        a, b = net.host("a", internet), net.host("b", internet)
        good = servers.relay_hint
        common = ["--impl", "txdilation", "--no-listen"]
        if kind == "dead":
            left_relays, right_relays = [good], [good]
            if case != "none":
                host, port = DEAD[case]
                dead = f"tcp:{server_host.address if host == 'servers' else host}:{port}"
                left_relays, right_relays = [dead, good], [dead, good]
            left_args = [*common, "--scenario", "echo-server", "--sizes", "1"]
            right_args = [*common, "--scenario", "echo-client", "--sizes", "1"]
        else:
            more = ["--total", str(TOTAL), "--seed", f"bench-{index}"]
            left_relays, right_relays = [good], [good]
            if case == "ws":
                net.blackhole(a, server_host, extra="tcp dport 4001")
                left_relays = [f"{good},{servers.relay_ws_url}"]
            left_args = [*common, "--scenario", "bulk-recv", *more]
            right_args = [*common, "--scenario", "bulk-send", *more]
        for relay in left_relays:
            left_args += ["--relay", relay]
        for relay in right_relays:
            right_args += ["--relay", relay]
        left, right = await run_peer_pair(
            reactor,
            servers.mailbox_url,
            left_args,
            right_args,
            180.0,
            left=placement(a),
            right=placement(b),
        )
        record: dict[str, Any] = {
            "kind": kind,
            "case": case,
            "run": index,
            "dilate_s": round(max(dilate_seconds(left), dilate_seconds(right)), 3),
            "left_path": connections(left)[0]["hint_description"],
        }
        if kind == "transfer":
            record["seconds"] = left.result["seconds"]
            record["mib_per_s"] = round(TOTAL / 2**20 / left.result["seconds"], 1)
            record["sha256_equal"] = left.result["sha256"] == right.result["sha256"]
        return record


def table(records: list[dict[str, Any]]) -> str:
    """Two Markdown tables: dead first relays, and WebSocket vs TCP relay."""
    out = []
    rows = []
    for case in ("none", *DEAD):
        values = [r["dilate_s"] for r in records if r["kind"] == "dead" and r["case"] == case]
        if values:
            rows.append(
                [
                    case,
                    str(len(values)),
                    f"{statistics.median(values):.2f} s",
                    f"{max(values):.2f} s",
                ]
            )
    if rows:
        header = ["first relay in both lists", "runs", "dilate median", "dilate worst"]
        out.append(markdown_table(header, rows))
    rows = []
    for case in ("tcp", "ws"):
        runs = [r for r in records if r["kind"] == "transfer" and r["case"] == case]
        if runs:
            rows.append(
                [
                    case,
                    str(len(runs)),
                    f"{statistics.median(r['dilate_s'] for r in runs):.2f} s",
                    ", ".join(f"{r['mib_per_s']:.1f}" for r in runs),
                    f"{statistics.median(r['mib_per_s'] for r in runs):.1f} MiB/s",
                    str(all(r["sha256_equal"] for r in runs)),
                ]
            )
    if rows:
        header = ["receiver's relay", "runs", "dilate median", "MiB/s per run", "median", "sha ok"]
        out.append(markdown_table(header, rows))
    return "\n\n".join(out)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.relays", description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--kinds", default="dead,transfer")
    p.add_argument("--json", default=None, help="append every run's record to this file")
    p.add_argument("--report", nargs="*", default=None, help="print the tables of --json files")
    return p.parse_args(argv)


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    cases = {"dead": ("none", *DEAD), "transfer": ("tcp", "ws")}
    for kind in args.kinds.split(","):
        for case in cases[kind]:
            for index in range(args.runs):
                log(f"{kind} {case} run {index + 1}/{args.runs}")
                record = await one_run(reactor, kind, case, index)
                keep(record, "benchmarks.relays", args.json, records)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(parse(argv), measure, table)


if __name__ == "__main__":
    sys.exit(main())
