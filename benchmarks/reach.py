"""
Which path two peers dilate over, and how fast, in NAT topologies built in Linux network
namespaces (issue 13's "before"): ``python -m benchmarks.reach [--runs N] [--json PATH]`` (root).

Layer: benchmark infrastructure; prints figures, asserts nothing. Every run builds its own
topology (``benchmarks.namespaced.Scene``: the real mailbox server and transit relay on a
network of their own behind the router, hosts ``a`` and ``b`` each behind its own NAT, or
routed directly as a control) and removes it afterwards. The peers dilate and echo two
messages; the path is read from both peers' ``ConnectedPeer`` status (``direct``, ``relay``),
or ``failed`` if they had not dilated within ``--cap`` seconds (``tests.support.reach``). The
time to dilate runs from both peers' having the code to both peers having dilated (since
issue 13 both peers start at once with a code chosen for the run; before, host ``a``
allocated it and ``b`` joined: the same moment). Host ``a`` leads (sides are forced);
topologies:

- ``routed``: no NAT (control), relay offered;
- ``preserving+relay`` / ``preserving``: both behind address-and-port-preserving NATs
  (nftables ``masquerade persistent``), relay offered or not;
- ``preserving-reset+relay`` / ``preserving-reset``: the same NATs, whose firewalls answer an
  unsolicited SYN with a RST (OpenWrt's default ``REJECT``) instead of dropping it;
- ``preserving-reset-quiet+relay`` / ``preserving-reset-quiet``: the same, with a router that
  drops a packet whose TTL runs out without an ICMP time exceeded;
- ``preserving-reset-20ms[+relay]``: ``preserving-reset`` with 10 ms each way on each NAT's link
  to the router (20 ms between the NATs; userspace delayer where the kernel has no netem);
- ``randomizing+relay`` / ``randomizing``: both behind port-randomizing NATs
  (``masquerade fully-random``), relay offered or not;
- ``randomizing-upnp+relay`` / ``randomizing-upnp``: the same NATs running the real home-router
  daemon, miniupnpd (PCP, NAT-PMP, UPnP IGD), which a txdilation peer asks for a port forward
  (``txdilation.portmap``); ``randomizing-upnp-stopped+relay``: the same NATs, the daemon not
  running;
- ``ipv6-only+relay``: both hosts IPv6-only on the router, the servers reached over IPv6
  (an IPv6 mailbox URL and an IPv6-literal relay hint);
- ``ipv6-blocked+relay``: the same, the router dropping everything between the
  two hosts (only the relay path works).

Behind the NATs a txdilation peer hole-punches (``txdilation.selection.punch``) unless its
``TXDILATION_PUNCH`` is off.

``--stay SECONDS`` keeps each link up that long after dilating and adds the path it ended on
(a link that starts on the relay may move to a direct path) and how long that move took.
``--report FILE...`` prints the table of earlier ``--json`` files instead of running.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, NamedTuple

from tests.support.netns import Firewall, Host, NatKind, Network
from tests.support.reach import dilate_once
from tests.support.servers import start_servers

from benchmarks.namespaced import (
    build_scene,
    keep,
    log,
    markdown_table,
    median_and_worst,
    script_main,
    seconds_text,
)


class Topology(NamedTuple):
    """Hosts behind NATs of ``nat`` kind (``None``: routed), relay offered or not, the NATs'
    firewall, and whether the router reports an expired TTL (``tests.support.netns``)."""

    nat: NatKind | None
    relay: bool
    firewall: Firewall = Firewall.DROP
    report_ttl_expiry: bool = True
    nat_delay: float = 0.0
    routers: str = ""


PRESERVING, RANDOMIZING, RESET = NatKind.PORT_PRESERVING, NatKind.PORT_RANDOMIZING, Firewall.RESET
TOPOLOGIES: dict[str, Topology] = {
    "routed": Topology(None, True),
    "preserving+relay": Topology(PRESERVING, True),
    "preserving": Topology(PRESERVING, False),
    "preserving-reset+relay": Topology(PRESERVING, True, RESET),
    "preserving-reset": Topology(PRESERVING, False, RESET),
    "preserving-reset-quiet+relay": Topology(PRESERVING, True, RESET, report_ttl_expiry=False),
    "preserving-reset-quiet": Topology(PRESERVING, False, RESET, report_ttl_expiry=False),
    "preserving-reset-20ms+relay": Topology(PRESERVING, True, RESET, nat_delay=0.01),
    "preserving-reset-20ms": Topology(PRESERVING, False, RESET, nat_delay=0.01),
    "randomizing+relay": Topology(RANDOMIZING, True),
    "randomizing": Topology(RANDOMIZING, False),
    "randomizing-upnp+relay": Topology(RANDOMIZING, True, routers="miniupnpd"),
    "randomizing-upnp": Topology(RANDOMIZING, False, routers="miniupnpd"),
    "randomizing-upnp-stopped+relay": Topology(RANDOMIZING, True, routers="stopped"),
    "ipv6-only+relay": Topology(None, True),
    "ipv6-blocked+relay": Topology(None, True),
}
IPV6_ONLY = {"ipv6-only+relay", "ipv6-blocked+relay"}
# (Leader on host a, Follower on host b)
PAIRINGS = {
    "tx-tx": ("txdilation", "txdilation"),
    "tx-leads-stock": ("txdilation", "stock"),
    "stock-leads-tx": ("stock", "txdilation"),
    "stock-stock": ("stock", "stock"),
}
LABELS = {"txdilation": "tx", "stock": "stock"}


def ipv6_scene(stack: ExitStack, block_direct: bool) -> tuple[str, str, Host, Host]:
    """IPv6-only hosts ``a`` and ``b`` on the router, the servers (dual-stack) reached at their
    IPv6 address; ``block_direct``: the router drops everything between ``a`` and ``b``.
    Returns the mailbox URL, the relay hint and the two hosts."""
    net = stack.enter_context(Network())
    internet = net.router()
    servers_host = net.host("servers", internet)
    address = servers_host.addresses6[0]
    servers = start_servers(servers_host, address=address)
    stack.callback(servers.stop)
    a = net.host("a", internet, ipv4=False, ipv6=True)
    b = net.host("b", internet, ipv4=False, ipv6=True)
    if block_direct:
        net.blackhole(a, b)
    return servers.mailbox_url, servers.relay_hint, a, b


async def reach_run(
    reactor: Any, topology: str, pairing: str, cap: float, index: int, stay: float = 0.0
) -> dict[str, Any]:
    """One run: dilate and echo across ``topology``; which path, how long."""
    nat, relay, firewall, report_ttl_expiry, nat_delay, routers = TOPOLOGIES[topology]
    leader, follower = PAIRINGS[pairing]
    record: dict[str, Any] = {
        "topology": topology,
        "pairing": pairing,
        "run": index,
        "cap": cap,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    with ExitStack() as stack:
        if topology in IPV6_ONLY:
            mailbox, relay_hint, a, b = ipv6_scene(stack, topology == "ipv6-blocked+relay")
        else:
            scene = build_scene(
                stack,
                nat,
                firewall=firewall,
                report_ttl_expiry=report_ttl_expiry,
                nat_delay=nat_delay,
                routers=routers,
            )
            mailbox, relay_hint, a, b = (
                scene.servers.mailbox_url,
                scene.servers.relay_hint,
                scene.a,
                scene.b,
            )
        outcome = await dilate_once(
            reactor,
            mailbox,
            (a, leader),
            (b, follower),
            relay=relay_hint if relay else None,
            cap=cap,
            stay=stay,
        )
    return record | outcome


def table(records: list[dict[str, Any]]) -> str:
    """Topology x pairing -> path counts and time to dilate (other records are ignored); with
    records of ``--stay`` runs, also how many ended direct and how long the move took."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in (r for r in records if "topology" in r):
        groups.setdefault((r["topology"], r["pairing"]), []).append(r)
    stayed = any("path_after" in r for r in records)
    rows = []
    for (topology, pairing), runs in groups.items():
        leader, follower = PAIRINGS[pairing]
        counts = {p: sum(1 for r in runs if r["path"] == p) for p in ("direct", "relay", "failed")}
        other = len(runs) - sum(counts.values())
        done = [r["seconds"] for r in runs if r["seconds"] is not None]
        median, worst = median_and_worst(done)
        row = [
            topology,
            f"{LABELS[leader]} leads {LABELS[follower]}",
            str(len(runs)),
            str(counts["direct"]),
            str(counts["relay"]),
            str(counts["failed"]) + (f" (+{other} mixed)" if other else ""),
            seconds_text(median, ""),
            seconds_text(worst, ""),
        ]
        if stayed:
            moved = [r["moved_after"] for r in runs if r.get("moved_after") is not None]
            moved_median, moved_worst = median_and_worst(moved)
            row += [
                str(sum(1 for r in runs if r.get("path_after") == "direct")),
                f"{len(moved)}: {seconds_text(moved_median, '')}, {seconds_text(moved_worst, '')}"
                if moved
                else "—",
            ]
        rows.append(row)
    header = ["topology", "pairing", "runs", "direct", "relay", "failed"]
    header += ["median time to dilate", "worst (dilated runs)"]
    if stayed:
        header += ["direct at the end", "moved relay -> direct: runs: median, worst"]
    return markdown_table(header, rows)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.reach", description=__doc__)
    p.add_argument("--topologies", default=",".join(TOPOLOGIES))
    p.add_argument("--pairings", default=",".join(PAIRINGS))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cap", type=float, default=30.0, help="seconds to wait for dilation")
    p.add_argument(
        "--stay", type=float, default=0.0, help="keep each link up this long; report its last path"
    )
    p.add_argument("--json", default=None, help="append every run's record to this file")
    p.add_argument("--report", nargs="*", default=None, help="print the table of --json files")
    return p.parse_args(argv)


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every topology x pairing ``--runs`` times; the run records."""
    records: list[dict[str, Any]] = []
    for topology in args.topologies.split(","):
        for pairing in args.pairings.split(","):
            for index in range(args.runs):
                log(f"{topology} {pairing} run {index + 1}/{args.runs}")
                record = await reach_run(reactor, topology, pairing, args.cap, index, args.stay)
                keep(record, "benchmarks.reach", args.json, records)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, or with ``--report`` print earlier measurements."""
    return script_main(parse(argv), measure, table)


if __name__ == "__main__":
    sys.exit(main())
