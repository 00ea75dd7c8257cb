"""
Port mapping against the real home-router daemon (issue 31): Debian's miniupnpd on a NAT of a
namespace topology, and txdilation's port mapper (``txdilation.portmap``) behind it.

Each test builds a router, a host ``out`` on it (the outside world) and a port-randomizing NAT
whose firewall drops what nobody asked for, with host ``a`` behind it. The mapper runs in
``a`` as ``python -m tests.support.portmap_client`` (a listener, mapped; one JSON line per
change); a connection from ``out`` to the mapped address shows the forward works, and the
NAT's ruleset shows what miniupnpd holds. The dilation tests put a peer behind such a NAT on
each side (``tests.support.reach.dilate_once``). Figures (20 runs per row) are
``benchmarks/reach.py``'s ``randomizing-upnp`` topologies, in docs/reach-figures.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from tests.support.miniupnpd import MiniUpnpd, miniupnpd_available, start_miniupnpd
from tests.support.netns import Host, Nat, NatKind
from tests.support.reach import dilate_once
from tests.support.servers import start_servers
from tests.test_netns_support import NamespaceTestCase

LEASE = 4  # seconds asked for (and miniupnpd's longest PCP lease): renewed every 2 s
HOLD = 5.0  # seconds each mapper keeps its port mapped
CLIENT_BOUND = 20.0  # seconds: generous, a client run takes HOLD plus milliseconds
FALLBACK_BOUND = 1.0  # seconds: PCP and NAT-PMP are refused at once (port unreachable)
SILENT_BOUND = 8.0  # seconds: three silent protocols, 1.5 s each
UPGRADE_BOUND = 5.0  # seconds from dilating to the direct path (the target)
DILATION_RUNS = 2  # tx with tx (benchmarks.reach runs 20)


@pytest.mark.slow
class PortMappingTests(NamespaceTestCase):
    """The mapper against miniupnpd (see the module docstring)."""

    timeout = 120

    def setUp(self) -> None:
        super().setUp()
        if not miniupnpd_available():
            self.fail("miniupnpd is not installed (.ci/run installs miniupnpd-nftables)")

    def behind_nat(self) -> tuple[Host, Nat, Host]:
        """``out`` on the router, ``a`` behind a port-randomizing NAT ready for miniupnpd."""
        internet = self.net.router()
        out = self.net.host("out", internet)
        nat = self.net.nat("nat-a", internet, NatKind.PORT_RANDOMIZING, port_mapping=True)
        return out, nat, self.net.host("a", nat)

    def daemon(self, nat: Nat, *, natpmp: bool = True, upnp: bool = True) -> MiniUpnpd:
        daemon = start_miniupnpd(nat, natpmp=natpmp, upnp=upnp, min_lifetime=2, max_lifetime=LEASE)
        self.addCleanup(daemon.stop)
        return daemon

    def run_client(self, a: Host, out: Host, protocols: str, hold: float = HOLD) -> list[Any]:
        """The mapper in ``a`` for ``hold`` seconds; its lines, with ``{"reached": ...}`` after
        each new mapping (a connection from ``out`` to its external address)."""
        argv = [sys.executable, "-m", "tests.support.portmap_client", "--protocols", protocols]
        argv += ["--lifetime", str(LEASE), "--hold", str(hold)]
        process = a.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        timer = threading.Timer(CLIENT_BOUND, process.kill)
        timer.start()
        lines: list[Any] = []
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                line = json.loads(raw)
                lines.append(line)
                if line.get("change") == "mapped":
                    host, port = line["external"]
                    probe = ["-m", "tests.support.probe", "connect", host, str(port)]
                    lines.append({"reached": json.loads(out.python([*probe, "--timeout", "3"]))})
            process.wait(timeout=CLIENT_BOUND)
        finally:
            timer.cancel()
        self.assertIn({"stopped": True}, [{k: v for k, v in x.items() if k != "t"} for x in lines])
        return lines

    def assert_mapped_renewed_deleted(self, lines: list[Any], protocol: str) -> None:
        changes = [x for x in lines if "change" in x]
        self.assertEqual(changes[0]["change"], "mapped", lines)
        self.assertEqual(changes[0]["protocol"], protocol, lines)
        self.assertTrue(changes[0]["external"][0].startswith("198.20."), lines)
        reached = [x["reached"] for x in lines if "reached" in x]
        self.assertTrue(reached and reached[0]["ok"], lines)
        self.assertTrue(any("accepted" in x for x in lines), lines)
        self.assertIn("renewed", [c["change"] for c in changes], lines)
        self.assertEqual(changes[-1]["change"], "deleted", lines)

    def each_protocol_alone(self, protocol: str) -> None:
        out, nat, a = self.behind_nat()
        daemon = self.daemon(nat)
        lines = self.run_client(a, out, protocol)
        print(f"\n{protocol}: {[x for x in lines if 'change' in x]}")
        self.assert_mapped_renewed_deleted(lines, protocol)
        self.assertEqual(daemon.forwards(), [], daemon.log_tail())

    def test_pcp_alone(self) -> None:
        """PCP on its own: miniupnpd maps the listener's port (the outside reaches it through
        the NAT that otherwise drops everything unsolicited), the mapping is renewed before
        its 4 s lease ends, and deleted at the stop: the router's table is empty."""
        self.each_protocol_alone("pcp")

    def test_nat_pmp_alone(self) -> None:
        """NAT-PMP on its own: mapped, reachable, renewed, deleted (the table empty)."""
        self.each_protocol_alone("nat-pmp")

    def test_upnp_igd_alone(self) -> None:
        """UPnP IGD on its own (SSDP, the description, SOAP): mapped, reachable, renewed,
        deleted (the table empty)."""
        self.each_protocol_alone("upnp-igd")

    def test_fallback_order(self) -> None:
        """All three protocols in the library's order: PCP maps when the router speaks it;
        with NAT-PMP and PCP off on the router, both are refused at once and UPnP IGD maps,
        within FALLBACK_BOUND of the start."""
        out, nat, a = self.behind_nat()
        everything = "pcp,nat-pmp,upnp-igd"
        daemon = self.daemon(nat)
        first = self.run_client(a, out, everything, hold=0.5)
        daemon.stop()
        self.daemon(nat, natpmp=False)
        second = self.run_client(a, out, everything, hold=1.5)
        mapped = [
            next(x for x in lines if x.get("change") == "mapped") for lines in (first, second)
        ]
        print(f"\nfallback: {mapped}")
        self.assertEqual([m["protocol"] for m in mapped], ["pcp", "upnp-igd"])
        self.assertLess(mapped[1]["t"], FALLBACK_BOUND, second)

    def test_silent_gateway(self) -> None:
        """A gateway that answers nothing (its firewall drops every UDP datagram from the
        LAN): one attempt, 'unavailable' within SILENT_BOUND, nothing mapped."""
        out, nat, a = self.behind_nat()
        nat.nft(
            "table inet txdn_silent {\n"
            "  chain input {\n"
            "    type filter hook input priority filter - 1; policy accept;\n"
            '    iifname != "wan0" meta l4proto udp drop\n'
            "  }\n"
            "}\n"
        )
        lines = self.run_client(a, out, "pcp,nat-pmp,upnp-igd", hold=SILENT_BOUND)
        changes = [x for x in lines if "change" in x]
        print(f"\nsilent gateway: {changes}")
        self.assertEqual([c["change"] for c in changes], ["unavailable"], lines)
        self.assertLess(changes[0]["t"], SILENT_BOUND, lines)


@pytest.mark.slow
class DirectThroughMappingTests(NamespaceTestCase):
    """Peers behind port-randomizing NATs running miniupnpd (no hole punching gets through
    them): direct through the mapped port."""

    timeout = 240

    def setUp(self) -> None:
        super().setUp()
        if not miniupnpd_available():
            self.fail("miniupnpd is not installed (.ci/run installs miniupnpd-nftables)")

    def scene(self) -> tuple[str, str, Host, Host, list[MiniUpnpd]]:
        internet = self.net.router()
        servers = start_servers(self.net.host("servers", internet))
        self.addCleanup(servers.stop)
        hosts, daemons = [], []
        for name in "ab":
            nat = self.net.nat(f"nat-{name}", internet, NatKind.PORT_RANDOMIZING, port_mapping=True)
            hosts.append(self.net.host(name, nat))
            daemons.append(start_miniupnpd(nat))
            self.addCleanup(daemons[-1].stop)
        return servers.mailbox_url, servers.relay_hint, hosts[0], hosts[1], daemons

    async def test_txdilation_peers_go_direct(self) -> None:
        """Two txdilation peers, relay offered: direct at dilation or within UPGRADE_BOUND
        of it, every run; once both wormholes closed, both routers' tables are empty (each
        peer deleted its mapping)."""
        mailbox, relay, a, b, daemons = self.scene()
        outcomes = []
        for _ in range(DILATION_RUNS):
            outcome = await dilate_once(
                self.reactor,
                mailbox,
                (a, "txdilation"),
                (b, "txdilation"),
                relay=relay,
                stay=6,
                exit_within=15,
            )
            outcomes.append(outcome)
            self.assertTrue(outcome["exited"], outcome)
            self.assertEqual([d.forwards() for d in daemons], [[], []], outcome)
        print(f"\ntx-tx behind mapping routers: {outcomes}")
        for outcome in outcomes:
            direct = outcome["path"] == "direct" or (
                outcome["path_after"] == "direct" and outcome["moved_after"] < UPGRADE_BOUND
            )
            self.assertTrue(direct, outcome)

    async def test_stock_peer_dials_our_mapped_hint(self) -> None:
        """A txdilation Leader behind a mapping router, a stock Follower behind the same kind
        of NAT (stock maps nothing): the stock side dials our mapped hint, an ordinary
        direct-tcp-v1 hint, and the link ends direct (at once, or after the Leader's one new
        generation once that direct connection proved to work)."""
        mailbox, relay, a, b, _ = self.scene()
        outcome = await dilate_once(
            self.reactor, mailbox, (a, "txdilation"), (b, "stock"), relay=relay, stay=8
        )
        print(f"\ntx leads stock behind mapping routers: {outcome}")
        self.assertEqual(outcome["path_after"], "direct", outcome)
