"""
The network namespace harness (``tests.support``) does what the namespace tests rely on.

Each test builds its own topology in namespaces named ``txdn-<pid>-...`` with addresses that
exist only there, and removes it afterwards, also when it fails. Where namespaces cannot be
created the tests are skipped with the reason printed; under ``CI=true`` they fail instead
(``require_namespaces``, itself tested here without namespaces). Reachability is checked with
``tests.support.probe`` run inside the namespaces (ICMP echo from a raw socket, TCP connects).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from twisted.trial import unittest

from tests.support.harness import PeerPair, run_peer_pair
from tests.support.linkdelay import Direction, take_lines
from tests.support.namespaces import (
    PREFIX,
    list_namespaces,
    namespace_pids,
    namespace_support,
    netem_support,
    sh,
    sweep_leftovers,
)
from tests.support.netns import (
    PUBLIC4,
    Firewall,
    NamespacesRequired,
    NatKind,
    NetnsError,
    Network,
    Node,
    Shape,
    require_namespaces,
)
from tests.support.peers import connections, described_host, path_of, placement
from tests.support.servers import start_servers

PROBE_PORT = 7000


def probe(node: Node, *args: str, timeout: float = 15.0) -> dict[str, Any]:
    """Run ``python -m tests.support.probe ARGS`` in ``node``; its last JSON line."""
    out = node.python(["-m", "tests.support.probe", *args], timeout=timeout)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def replies(node: Node, address: str, count: int = 1, timeout: float = 1.0) -> int:
    """How many of ``count`` pings from ``node`` to ``address`` were answered."""
    answered: int = probe(node, "ping", address, "--count", str(count), "--timeout", str(timeout))[
        "received"
    ]
    return answered


def rtts(node: Node, address: str, count: int = 3) -> list[float]:
    """The round-trip times (s) of ``count`` pings from ``node`` to ``address``."""
    found: list[float] = probe(node, "ping", address, "--count", str(count), "--timeout", "5")[
        "rtt"
    ]
    return found


def seen_source(via: Node, server: Node, source_port: int) -> tuple[str, int]:
    """Connect from ``via`` to a listener on the router from ``source_port``; returns the
    (address, port) the listener saw."""
    listener = server.popen(
        [sys.executable, "-m", "tests.support.probe", "serve", PUBLIC4, str(PROBE_PORT)],
        stdout=subprocess.PIPE,
    )
    assert listener.stdout is not None
    assert json.loads(listener.stdout.readline())["listening"]
    connected = probe(via, "connect", PUBLIC4, str(PROBE_PORT), "--source-port", str(source_port))
    assert connected["ok"], connected
    peer = json.loads(listener.stdout.readline())["peer"]
    listener.wait(timeout=10)
    return str(peer[0]), int(peer[1])


class NamespaceTestCase(unittest.TestCase):
    """Skips (or, under CI=true, fails) without namespaces; ``self.net`` is a fresh network."""

    timeout = 120

    def setUp(self) -> None:
        from twisted.internet import reactor

        require_namespaces()
        self.reactor: Any = reactor
        self.net = Network()
        self.addCleanup(self.net.close)


class TopologyTests(NamespaceTestCase):
    """Routing, NAT, black holes, delay and address changes behave as documented."""

    def test_hosts_reach_each_other_through_the_router(self) -> None:
        """Two dual-stack hosts on their own subnets ping each other (v4 and v6) via the
        router, and reach the router's public addresses."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        self.assertNotEqual(a.uplink and a.uplink.subnet4, b.uplink and b.uplink.subnet4)
        for source, target in ((a, b), (b, a)):
            for address in target.addresses:
                self.assertEqual(replies(source, address), 1, f"{source.name} -> {address}")
        for address in internet.addresses:
            self.assertEqual(replies(a, address), 1, address)

    def test_unroutable_addresses_are_dropped_silently(self) -> None:
        """The router drops packets to private addresses it has no link for (a peer's LAN
        address) without an ICMP error: connecting hangs instead of failing at once. Routed
        hosts still refuse at once."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        for address in ("192.168.99.2", "10.200.0.2", "2001:db8:99::2"):
            outcome = probe(a, "connect", address, "9", "--timeout", "1")
            self.assertIn("TimeoutError", outcome["error"], address)
        self.assertIn("ConnectionRefused", probe(a, "connect", b.address, "9")["error"])

    def test_port_preserving_nat(self) -> None:
        """Behind a port-preserving NAT the router sees the NAT's address and the host's own
        source port."""
        internet = self.net.router()
        nat = self.net.nat("nat", internet, NatKind.PORT_PRESERVING)
        host = self.net.host("a", nat)
        self.assertTrue(host.address.startswith("192.168."))
        for port in (40000, 40001):
            self.assertEqual(seen_source(host, internet, port), (nat.address, port))

    def test_port_randomizing_nat(self) -> None:
        """Behind a port-randomizing NAT the router sees the NAT's address and other ports
        than the host's (each of three connections could keep its port by chance only once
        in ~28,000)."""
        internet = self.net.router()
        nat = self.net.nat("nat", internet, NatKind.PORT_RANDOMIZING)
        host = self.net.host("a", nat)
        seen = [seen_source(host, internet, port) for port in (40000, 40001, 40002)]
        self.assertEqual({address for address, _ in seen}, {nat.address})
        self.assertNotEqual([port for _, port in seen], [40000, 40001, 40002])

    def test_nat_firewalls(self) -> None:
        """A NAT lets in only what belongs to a connection from behind it: its firewall drops
        an unsolicited SYN (``Firewall.DROP``: the connect times out) or answers it at once
        with a RST (``Firewall.RESET``: refused), while a connection from the host behind it
        works either way."""
        internet = self.net.router()
        for firewall, name in ((Firewall.DROP, "nat-d"), (Firewall.RESET, "nat-r")):
            nat = self.net.nat(name, internet, NatKind.PORT_PRESERVING, firewall=firewall)
            host = self.net.host(name.replace("nat", "host"), nat)
            self.assertEqual(nat.firewall, firewall)
            outcome = probe(internet, "connect", nat.address, "40000", "--timeout", "1")
            self.assertFalse(outcome["ok"], firewall)
            if firewall is Firewall.DROP:
                self.assertIn("TimeoutError", outcome["error"])
            else:
                self.assertIn("ConnectionRefused", outcome["error"])
                self.assertLess(outcome["after"], 0.5)
            self.assertEqual(seen_source(host, internet, 40001), (nat.address, 40001))

    def test_ttl_expiry_reported_or_silent(self) -> None:
        """A SYN whose TTL runs out at the router (TTL 2 from behind a NAT: the NAT is the
        first hop) is answered with an ICMP time exceeded, which fails the connect at once,
        unless the router was made with ``report_ttl_expiry=False``: then it goes unanswered.
        One more hop reaches the host beyond the router (which refuses: nothing listens)."""
        for report in (True, False):
            with Network() as net:
                internet = net.router(report_ttl_expiry=report)
                a = net.host("a", net.nat("nat", internet, NatKind.PORT_PRESERVING))
                b = net.host("b", internet)
                short = probe(a, "connect", b.address, "9", "--ttl", "2", "--timeout", "1")
                self.assertFalse(short["ok"])
                if report:
                    self.assertIn("No route to host", short["error"])
                    self.assertLess(short["after"], 0.5)
                else:
                    self.assertIn("TimeoutError", short["error"])
                longer = probe(a, "connect", b.address, "9", "--ttl", "3", "--timeout", "1")
                self.assertIn("ConnectionRefused", longer["error"], report)

    def test_blackhole_drops_and_removal_restores(self) -> None:
        """A black hole between two hosts drops their traffic both ways and nothing else;
        removing it lets the traffic through again."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        hole = self.net.blackhole(a, b)
        for address in b.addresses:
            self.assertEqual(replies(a, address, timeout=0.3), 0, address)
        for address in a.addresses:
            self.assertEqual(replies(b, address, timeout=0.3), 0, address)
        self.assertEqual(replies(a, PUBLIC4), 1)  # the rest of the network still works
        hole.remove()
        hole.remove()  # idempotent
        for address in b.addresses:
            self.assertEqual(replies(a, address), 1, address)

    def test_blackhole_of_a_natted_host_uses_the_nat_address(self) -> None:
        """Nodes behind a NAT are black-holed at the router by their NAT's address."""
        internet = self.net.router()
        a = self.net.host("a", self.net.nat("nat", internet, NatKind.PORT_PRESERVING))
        b = self.net.host("b", internet)
        self.assertEqual(replies(a, b.address), 1)
        hole = self.net.blackhole(a, b)
        self.assertEqual(replies(a, b.address, timeout=0.3), 0)
        hole.remove()
        self.assertEqual(replies(a, b.address), 1)

    def test_address_change(self) -> None:
        """``change_address`` replaces a host's addresses and routes: the old ones answer no
        more, the new ones do, and the host reaches the others from them."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        old = list(a.addresses)
        a.change_address()
        self.assertEqual(len(a.addresses), 2)
        self.assertFalse(set(old) & set(a.addresses))
        for address in old:
            self.assertEqual(replies(b, address, timeout=0.3), 0, address)
        for address in a.addresses:
            self.assertEqual(replies(b, address), 1, address)
        for address in b.addresses:
            self.assertEqual(replies(a, address), 1, address)
        listed = a.run(["ip", "-o", "addr", "show", "scope", "global"])
        self.assertEqual(
            sorted(w.split("/")[0] for w in listed.split() if "/" in w), sorted(a.addresses)
        )

    def test_ipv6_only_hosts(self) -> None:
        """IPv6-only hosts have no IPv4 address and reach each other at once (no DAD wait)."""
        internet = self.net.router()
        a = self.net.host("a", internet, ipv4=False, ipv6=True)
        b = self.net.host("b", internet, ipv4=False, ipv6=True)
        self.assertEqual(a.addresses4, [])
        self.assertNotIn("inet ", a.run(["ip", "-4", "addr", "show", "dev", "eth0"]))
        self.assertEqual(replies(a, b.address), 1)
        self.assertEqual(replies(b, a.address), 1)
        with self.assertRaises(ValueError):
            self.net.host("c", self.net.nat("nat", internet, NatKind.PORT_PRESERVING), ipv6=True)

    def test_impairment_delays_and_removal_restores(self) -> None:
        """Delay on a host's link adds to every round trip through the router (per
        direction), can be changed, and goes away when removed."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        impairment = self.net.impair(a, up=Shape(0.2), down=Shape(0.1))
        self.assertTrue(all(0.3 <= rtt < 1.3 for rtt in rtts(a, b.address)), rtts)
        self.assertTrue(all(0.3 <= rtt < 1.3 for rtt in rtts(b, a.addresses6[0])))
        impairment.update(down=Shape(0.5, jitter=0.1))
        self.assertTrue(all(0.6 <= rtt < 2.0 for rtt in rtts(a, b.address)))
        impairment.remove()
        self.assertTrue(all(rtt < 0.3 for rtt in rtts(a, b.address)))

    def test_netem_backend(self) -> None:
        """With tc netem, the same shapes apply; where the kernel has none, asking for it
        says so (and "auto" falls back to the userspace delayer, tested above)."""
        internet = self.net.router()
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        missing = netem_support()
        if missing is not None:
            with self.assertRaises(NetnsError):
                self.net.impair(a, up=Shape(0.1), backend="netem")
            return
        impairment = self.net.impair(a, up=Shape(0.2), down=Shape(0.1), backend="netem")
        self.assertTrue(all(0.3 <= rtt < 1.3 for rtt in rtts(a, b.address)))
        impairment.remove()
        self.assertTrue(all(rtt < 0.3 for rtt in rtts(a, b.address)))


class TeardownTests(unittest.TestCase):
    """Nothing of ours outlives a network: namespaces, processes, leftovers of a crash."""

    timeout = 60

    def setUp(self) -> None:
        require_namespaces()

    def test_cleanup_when_the_body_raises(self) -> None:
        """Leaving the ``with`` by an exception removes every namespace and kills what ran
        inside them (also what was started without ``popen``)."""
        with self.assertRaises(ZeroDivisionError), Network() as net:
            internet = net.router()
            a = net.host("a", internet)
            tracked = a.popen(["sleep", "60"])
            untracked = subprocess.Popen(a.exec_argv(["sleep", "60"]))
            prefix = net.prefix
            self.assertEqual(len([n for n in list_namespaces() if n.startswith(prefix)]), 2)
            1 / 0  # noqa: B018
        self.assertEqual([n for n in list_namespaces() if n.startswith(prefix)], [])
        self.assertIsNotNone(tracked.poll())
        self.assertIsNotNone(untracked.wait(timeout=10))

    def test_leftovers_of_a_dead_process_are_swept(self) -> None:
        """A namespace named after a process that no longer exists is removed (with what
        runs in it) when a network is made; one of a live process is left alone."""
        gone = subprocess.Popen(["true"])
        gone.wait()
        leftover = f"{PREFIX}-{gone.pid}-1-crashed"
        sh(["ip", "netns", "add", leftover])
        self.addCleanup(lambda: sweep_leftovers() and None)
        sleeper = subprocess.Popen(["ip", "netns", "exec", leftover, "sleep", "60"])
        self.addCleanup(sleeper.kill)
        _wait_until(lambda pid: pid in namespace_pids(leftover), sleeper.pid)
        with Network() as net:
            net.router()
            self.assertNotIn(leftover, list_namespaces())
            self.assertIsNotNone(sleeper.wait(timeout=10))
            self.assertEqual(sweep_leftovers(), [])  # our own (live) network is kept
            self.assertTrue(any(n.startswith(net.prefix) for n in list_namespaces()))

    def test_processes_die_with_their_parent(self) -> None:
        """A process started in a namespace is killed when the process that started it dies
        (``setpriv --pdeathsig KILL``), even by SIGKILL, once it runs and also at once
        (before the death signal was set up), so a crashed run leaves none behind."""
        with Network() as net:
            a = net.host("a", net.router())
            for settled in (False, True):
                starter = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        "import os, subprocess, sys, time\n"
                        f"argv = {a.exec_argv(['sleep', '60'], parent=-1)!r}\n"
                        "argv[argv.index('-1')] = str(os.getpid())\n"
                        "p = subprocess.Popen(argv)\n"
                        "print(p.pid, flush=True)\n"
                        "time.sleep(60)\n",
                    ],
                    stdout=subprocess.PIPE,
                )
                assert starter.stdout is not None
                child = int(starter.stdout.readline())
                if settled:  # the child runs ``sleep`` itself by now
                    _wait_until(lambda pid: _command(pid) == "sleep", child)
                starter.kill()
                starter.wait()
                _wait_until(lambda pid: not _running(pid), child)
                self.assertFalse(_running(child), f"settled={settled}")


def _wait_until(condition: Callable[[int], bool], pid: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _command(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except FileNotFoundError:
        return None


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


class LinkDelayTests(unittest.SynchronousTestCase):
    """The userspace delayer's schedule (no namespaces needed)."""

    def test_jitter_never_reorders(self) -> None:
        """With jitter, a packet never goes out before one read earlier, and each waits at
        least the delay minus the jitter."""
        direction = Direction(fd=-1)
        direction.configure({"delay": 0.5, "jitter": 0.4})
        rng = random.Random(7)
        dues = [direction.due(t * 0.01, rng) for t in range(500)]
        self.assertEqual(dues, sorted(dues))
        self.assertTrue(all(d is not None and d >= t * 0.01 + 0.1 for t, d in enumerate(dues)))

    def test_loss(self) -> None:
        """Loss drops about that share of packets (and none without loss)."""
        direction, rng = Direction(fd=-1), random.Random(3)
        direction.configure({"delay": 0.1})
        self.assertTrue(all(direction.due(0.0, rng) is not None for _ in range(1000)))
        direction.configure({"delay": 0.1, "loss": 0.3})
        lost = sum(direction.due(0.0, rng) is None for _ in range(10000))
        self.assertTrue(2500 < lost < 3500, lost)

    def test_shape_validation(self) -> None:
        """Jitter larger than the delay, negative values and certain loss are refused."""
        for bad in ({"delay": 0.1, "jitter": 0.2}, {"delay": -1.0}, {"loss": 1.0}):
            with self.assertRaises(ValueError):
                Shape(**bad)

    def test_commands_are_read_by_line(self) -> None:
        """Shape updates arrive as JSON lines, possibly split across reads."""
        seen: list[str] = []
        rest = take_lines(b'{"up": 1}\n{"do', seen.append)
        self.assertEqual((seen, rest), (['{"up": 1}'], b'{"do'))
        self.assertEqual(take_lines(rest + b'wn": 2}\n\n', seen.append), b"")
        self.assertEqual(seen, ['{"up": 1}', '{"down": 2}'])


class PolicyTests(unittest.SynchronousTestCase):
    """Skip only where namespaces cannot be created; never under CI=true."""

    def test_unavailable_skips_outside_ci(self) -> None:
        """Without namespaces and without CI=true the test is skipped, with the reason."""
        with self.assertRaises(unittest.SkipTest) as caught:
            require_namespaces(environ={}, reason="no root here")
        self.assertIn("no root here", str(caught.exception))
        with self.assertRaises(unittest.SkipTest):
            require_namespaces(environ={"CI": "false"}, reason="no root here")

    def test_unavailable_fails_under_ci(self) -> None:
        """Under CI=true the same situation is a failure (an AssertionError)."""
        with self.assertRaises(NamespacesRequired) as caught:
            require_namespaces(environ={"CI": "true"}, reason="no root here")
        self.assertIsInstance(caught.exception, AssertionError)
        self.assertIn("no root here", str(caught.exception))

    def test_available_passes(self) -> None:
        """Where namespaces work, the policy lets the test run, CI or not."""
        if namespace_support() is not None:
            raise unittest.SkipTest(f"namespaces unavailable: {namespace_support()}")
        require_namespaces(environ={"CI": "true"})
        require_namespaces(environ={})


class PeersInNamespacesTests(NamespaceTestCase):
    """The real servers and dilation peers run inside namespaces, on their addresses."""

    timeout = 180

    async def test_servers_listen_in_the_router_namespace(self) -> None:
        """The mailbox server and transit relay started in the router accept connections
        from a host, over IPv4 and IPv6, and are gone after ``stop()``."""
        internet = self.net.router()
        host = self.net.host("a", internet)
        servers = start_servers(internet)
        self.addCleanup(servers.stop)
        for address in internet.addresses:
            for port in (servers.mailbox_port, servers.relay_port):
                self.assertTrue(probe(host, "connect", address, str(port))["ok"], (address, port))
        servers.stop()
        self.assertFalse(internet.listening(servers.mailbox_port))

    async def test_txdilation_peers_dilate_through_namespaced_servers(self) -> None:
        """Two txdilation peers on two dual-stack hosts dilate through the real servers in the
        router namespace over a direct path between the hosts' own addresses (IPv4 or IPv6,
        whichever wins the race), and echo data. (No relay offered: the first path that works
        is selected, and on a routed network a relayed one may win the race.)"""
        internet = self.net.router()
        servers = start_servers(internet)
        self.addCleanup(servers.stop)
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        common = ["--impl", "txdilation"]
        left, right = await run_peer_pair(
            self.reactor,
            servers.mailbox_url,
            [*common, "--scenario", "echo-server", "--sizes", "1,1000,70000"],
            [*common, "--scenario", "echo-client", "--sizes", "1,1000,70000"],
            90.0,
            left=placement(a),
            right=placement(b),
        )
        self.assertEqual(right.result["bytes"], 71001)
        self.assertEqual(left.result["bytes"], 71001)
        for peer, other in ((left, b), (right, a)):
            link = connections(peer)[0]["hint_description"]
            self.assertEqual(path_of(link), "direct", link)
            self.assertIn(described_host(link), other.addresses, link)

    async def test_stream_reports_recovery_from_a_black_hole(self) -> None:
        """
        The streaming scenario measures a fault the parent injects: with the direct path
        black-holed while records flow (ping interval 1 s, relay on a third network), the
        receiver reports the recovery and every record exactly once, in order.
        """
        internet = self.net.router()
        servers = start_servers(self.net.host("servers", internet))
        self.addCleanup(servers.stop)
        a, b = self.net.host("a", internet), self.net.host("b", internet)
        common = ["--impl", "txdilation", "--relay", servers.relay_hint, "--ping-interval", "1"]
        pair = PeerPair(
            self.reactor,
            servers.mailbox_url,
            [*common, "--scenario", "stream-send", "--duration", "60", "--side", "f" * 16],
            [*common, "--scenario", "stream-recv", "--side", "0" * 16],
            120.0,
            left=placement(a),
            right=placement(b),
        ).start()
        try:
            await pair.when("right", "stream-started").addTimeout(60, self.reactor)
            self.net.blackhole(a, b)
            pair.send("right", {"command": "fault", "t": time.time()})
            await pair.when("right", "stream-resumed").addTimeout(30, self.reactor)
            pair.send("left", {"command": "finish"})
            left, right = await pair.finish()
        finally:
            pair.kill()
        report = right.result
        self.assertTrue(report["recovered"], report)
        self.assertTrue(report["exactly_once_in_order"], report)
        self.assertEqual(report["records"], left.result["sent"])
        self.assertGreater(report["gap_after_fault"], 0)
        self.assertEqual(path_of(connections(right)[-1]["hint_description"]), "relay")
