"""
What the warm standby path costs while nothing flows (issue 31), in Linux network namespaces:
``python -m benchmarks.standby [--idle SECONDS] [--runs N] [--json PATH]`` (root).

Layer: benchmark infrastructure; prints figures, asserts nothing. Each run builds
``benchmarks.namespaced``'s scene (hosts ``a`` and ``b`` routed to each other, the real mailbox
server and transit relay on a third network), dilates two txdilation peers with the relay
offered (``a`` leads), sends one record, waits until both links are direct with a standby
through the relay beside them, then counts, in the servers' namespace, what passes the relay's
port for ``--idle`` seconds: the packets that carry data (TCP PSH: the keepalive records) from
each peer, and every byte both ways (TCP and IP headers included). It reports the keepalives
per 15 s each way (the target: at most 1) and the relay bytes per idle hour.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from tests.support.peers import connections, path_of

from benchmarks.namespaced import (
    build_scene,
    keep,
    log,
    markdown_table,
    peer_args,
    script_main,
    settle,
    sleep,
    start_pair,
    within,
)

RELAY_PORT = 4001
SETTLE = 5.0  # seconds after dilating: the standby is made within a second


def _counters(a: str, b: str) -> str:
    rules = []
    for host in (a, b):
        rules.append(f"    ip saddr {host} tcp dport {RELAY_PORT} tcp flags & psh == psh counter")
        rules.append(f"    ip saddr {host} tcp dport {RELAY_PORT} counter")
        rules.append(f"    ip daddr {host} tcp sport {RELAY_PORT} counter")
    body = "\n".join(rules)
    return (
        "table inet txdn_standby_cost {\n"
        "  chain input {\n    type filter hook input priority filter - 5; policy accept;\n"
        f"{body}\n  }}\n"
        "  chain output {\n    type filter hook output priority filter - 5; policy accept;\n"
        f"{body}\n  }}\n"
        "}\n"
    )


def _read(listing: str) -> list[tuple[int, int]]:
    return [(int(p), int(b)) for p, b in re.findall(r"packets (\d+) bytes (\d+)", listing)]


async def standby_run(reactor: Any, idle: float, index: int) -> dict[str, Any]:
    """One run (see the module docstring)."""
    record: dict[str, Any] = {"case": "standby-idle", "run": index, "idle": idle}
    record["date"] = time.strftime("%Y-%m-%d %H:%M")
    with ExitStack() as stack:
        scene = build_scene(stack)
        common = ["--relay", scene.servers.relay_hint, "--record-interval", "3600"]
        sender = peer_args("txdilation", True, "stream-send", *common, "--duration", str(idle + 60))
        receiver = peer_args("txdilation", False, "stream-recv", *common)
        pair = start_pair(reactor, scene, sender, receiver, timeout=idle + 120)
        try:
            started = await within(reactor, pair.when("right", "stream-started"), 60)
            if started is None:
                return record | {"error": "the first record never came"}
            await sleep(reactor, SETTLE)
            paths = {path_of(connections(p)[-1]["hint_description"]) for p in pair.results}
            record["path"] = paths.pop() if len(paths) == 1 else "mixed"
            servers = scene.servers.node
            servers.nft(_counters(scene.a.address, scene.b.address))
            await sleep(reactor, idle)
            listing = servers.run(["nft", "list", "table", "inet", "txdn_standby_cost"])
        finally:
            pair.kill()
            await settle(pair)
    read = _read(listing)  # per peer: PSH packets in, packets in, packets out; input, output
    counts = [(i[0] + o[0], i[1] + o[1]) for i, o in zip(read[:6], read[6:12], strict=True)]
    a_data, a_in, a_out, b_data, b_in, b_out = counts
    total = a_in[1] + a_out[1] + b_in[1] + b_out[1]
    return record | {
        "keepalives_from_a": a_data[0],
        "keepalives_from_b": b_data[0],
        "packets": a_in[0] + a_out[0] + b_in[0] + b_out[0],
        "bytes": total,
        "bytes_per_hour": round(total * 3600 / idle),
    }


def table(records: list[dict[str, Any]]) -> str:
    """One row per run."""
    rows = []
    for r in (r for r in records if r.get("case") == "standby-idle" and "bytes" in r):
        per = 15 / r["idle"]
        rows.append(
            [
                str(r["run"] + 1),
                r.get("path", "?"),
                f"{r['idle']:g} s",
                f"{r['keepalives_from_a'] * per:.2f} / {r['keepalives_from_b'] * per:.2f}",
                str(r["packets"]),
                f"{r['bytes_per_hour'] / 1024:.1f} KiB",
            ]
        )
    header = ["run", "link", "idle", "keepalives per 15 s (Leader / Follower)"]
    return markdown_table([*header, "packets at the relay", "relay bytes per idle hour"], rows)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.standby", description=__doc__)
    p.add_argument("--idle", type=float, default=120.0)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--report", nargs="*", default=None)
    return p.parse_args(argv)


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for index in range(args.runs):
        log(f"standby idle run {index + 1}/{args.runs}")
        keep(await standby_run(reactor, args.idle, index), "benchmarks.standby", args.json, records)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(parse(argv), measure, table)


if __name__ == "__main__":
    sys.exit(main())
