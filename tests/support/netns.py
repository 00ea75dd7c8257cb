"""
Network topologies in Linux network namespaces, for tests and benchmarks.

Layer: test infrastructure (not shipped). Needs root, ``ip`` (iproute2), ``nft`` (nftables) and
``setpriv`` (util-linux); ``tc`` with the netem qdisc is used for delay when the kernel has it.

A ``Network`` (a context manager) owns every namespace it makes. Namespaces are named
``txdn-<pid>-<n>-<node>``: ``txdn`` marks them as ours, ``<pid>`` is the process that made them.
Entering a ``Network`` first sweeps namespaces left by a process that is gone (a crashed run),
killing what still runs in them. ``Network.close()`` (also on the way out of the ``with``, even
when the body raised, and at interpreter exit) kills every process inside its namespaces and
deletes them; veth pairs, NAT and drop rules and TUN devices go with them.

Addresses exist only inside these namespaces (nothing is connected to the machine's own
network): link ``n`` from the router to a node is ``10.n.0.0/24`` and ``2001:db8:n::/64``
(router ``.1``/``::1``, the node ``.2``/``::2``, then ``.3`` ... after address changes), but
``198.20.n.0/24`` for a NAT made with ``port_mapping=True`` (miniupnpd refuses to map from a
private or documentation address: that public block exists only inside these namespaces,
which have no route to anywhere else); the LAN behind a NAT on link ``n`` is
``192.168.n.0/24``; the router itself also answers on
``203.0.113.1`` and ``2001:db8:ffff::1`` (its "public" addresses, on its loopback). Packets
to any other of those ranges are dropped at the router without an ICMP error (as on the
internet), so a connection to a peer's LAN address hangs until its timeout.

Building "two hosts behind port-preserving NATs, servers on the internet"::

    with Network() as net:
        internet = net.router()
        servers = net.host("servers", internet)
        a = net.host("a", net.nat("nat-a", internet, NatKind.PORT_PRESERVING))
        b = net.host("b", net.nat("nat-b", internet, NatKind.PORT_PRESERVING))

A NAT's firewall drops what the WAN sends unsolicited (``Firewall.DROP``, the default) or
refuses it with a RST (``Firewall.RESET``, OpenWrt's default); the router reports a TTL that
runs out with an ICMP time exceeded unless made with ``report_ttl_expiry=False``.

Faults: ``net.blackhole(a, b)`` drops everything between two nodes at the router until
``.remove()``; ``net.impair(node, delay=2.0)`` delays (with jitter and loss) every packet the
router forwards to and from a node attached to it; ``host.change_address()`` moves a host to
a new address on its link. Processes: ``node.run([...])`` (bounded, synchronous),
``node.popen([...])`` (tracked, killed at ``close``), ``node.exec_argv([...])`` (the argv for
``reactor.spawnProcess``); each runs under ``setpriv --pdeathsig KILL``, so it dies with the
process that started it even when that one is killed.

Policy (``require_namespaces``): a test that needs namespaces skips, with the reason printed,
only where they cannot be created; with ``CI=true`` that becomes a failure.

The commands, sweeping and policy live in ``tests.support.namespaces``, the faults in
``tests.support.netfaults``; this module re-exports what a test needs. Around it:
``tests.support.servers`` (the real mailbox server and transit relay as processes in a
namespace), ``tests.support.peers`` (``tests.support.peer`` processes in namespaces, and what their
events say about the path), and two programs run inside namespaces,
``python -m tests.support.probe`` (ping, TCP listen/connect, a connection flood) and
``python -m tests.support.linkdelay`` (the userspace delayer). They import nothing heavy so
that they start fast.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import ipaddress
import itertools
import os
import re
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, Any

from tests.support.namespaces import (
    COMMAND_TIMEOUT,
    PREFIX,
    REPO_ROOT,
    TERMINATE_GRACE,
    NamespacesRequired,
    NetnsError,
    destroy_namespace,
    namespace_support,
    netem_available,
    python_environment,
    require_namespaces,
    sh,
    sweep_leftovers,
)
from tests.support.netfaults import BlackHole, Impairment, Shape, blackhole_ruleset, impair_link

__all__ = [
    "PUBLIC4",
    "PUBLIC6",
    "BlackHole",
    "Firewall",
    "Host",
    "Impairment",
    "Link",
    "NamespacesRequired",
    "Nat",
    "NatKind",
    "NetnsError",
    "Network",
    "Node",
    "Router",
    "Shape",
    "namespace_support",
    "netem_available",
    "python_environment",
    "require_namespaces",
]

# run a program so that it is killed when its parent dies, and not at all if that already happened
_DEATH_SIGNAL = ("setpriv", "--pdeathsig", "KILL", "--")
_PARENT_GUARD = '[ "$PPID" = "$0" ] || exit 137; exec "$@"'

PUBLIC4 = "203.0.113.1"
PUBLIC_WAN4 = "198.20"  # the first two bytes of a port-mapping NAT's WAN link (see above)
PUBLIC6 = "2001:db8:ffff::1"
# what the router drops silently unless a link is more specific
UNROUTABLE4 = ("10.0.0.0/8", "192.168.0.0/16", "192.0.2.0/24", "198.51.100.0/24")
UNROUTABLE6 = ("2001:db8::/32",)


# ---------------------------------------------------------------------------------------------
# nodes and links


class NatKind(enum.Enum):
    """How a NAT maps a LAN host's (address, port) to its public address."""

    PORT_PRESERVING = "masquerade persistent"
    """Endpoint-independent: the source port is kept when free (what hole punching needs)."""
    PORT_RANDOMIZING = "masquerade fully-random"
    """A random public port for every new connection (hole punching cannot work)."""


class Firewall(enum.Enum):
    """What a NAT's firewall does with an unsolicited packet from the WAN (no port forwards)."""

    DROP = "drop"
    """Drop it without a word (many consumer routers): an unsolicited SYN goes unanswered, so
    the sender's connect hangs and its SYN is retransmitted."""
    RESET = "reset"
    """Refuse it, as OpenWrt's default ``wan`` zone (``REJECT``) and many Linux-based routers
    do: an unsolicited TCP segment is answered with a RST (anything else with an ICMP port
    unreachable), so the sender's connect fails at once."""

    @property
    def verdicts(self) -> tuple[str, ...]:
        """The nftables rules (in order) for what the WAN sends that nobody asked for."""
        if self is Firewall.DROP:
            return ("drop",)
        return ("meta l4proto tcp reject with tcp reset", "reject")


@dataclass(eq=False)
class Link:
    """
    A veth pair between an upper node (the router, or a NAT on its LAN side) and a lower one.

    ``subnet4``/``subnet6`` are ``None`` for a family the link does not carry.
    """

    index: int
    upper: Node
    lower: Node
    upper_if: str
    lower_if: str
    subnet4: ipaddress.IPv4Network | None
    subnet6: ipaddress.IPv6Network | None

    @property
    def gateway4(self) -> str | None:
        """The upper node's IPv4 address on this link."""
        return None if self.subnet4 is None else str(self.subnet4[1])

    @property
    def gateway6(self) -> str | None:
        """The upper node's IPv6 address on this link."""
        return None if self.subnet6 is None else str(self.subnet6[1])

    def lower_address4(self, number: int) -> str | None:
        """The ``number``-th IPv4 address of the link (2: the lower node's first)."""
        return None if self.subnet4 is None else str(self.subnet4[number])

    def lower_address6(self, number: int) -> str | None:
        """The ``number``-th IPv6 address of the link (2: the lower node's first)."""
        return None if self.subnet6 is None else str(self.subnet6[number])


@dataclass(eq=False)
class Node:
    """One network namespace. ``name`` is the short name, ``netns`` the namespace's."""

    network: Network
    name: str
    netns: str
    uplink: Link | None = None
    downlinks: list[Link] = field(default_factory=list)
    addresses4: list[str] = field(default_factory=list)
    addresses6: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        """This node's first address (IPv4 if it has one)."""
        for address in [*self.addresses4, *self.addresses6]:
            return address
        raise NetnsError(f"{self.name} has no address")

    @property
    def addresses(self) -> list[str]:
        """Every address of this node, IPv4 first."""
        return [*self.addresses4, *self.addresses6]

    def public_addresses(self) -> list[str]:
        """The addresses the router sees for this node (behind a NAT: the NAT's)."""
        upper = self.uplink.upper if self.uplink is not None else None
        if isinstance(upper, Nat):
            return upper.public_addresses()
        return self.addresses

    # --- commands inside the namespace ---

    def exec_argv(self, argv: Sequence[str], *, parent: int | None = None) -> list[str]:
        """
        The argv that runs ``argv`` inside this namespace, killed when its parent dies.

        ``setpriv`` asks for SIGKILL at the parent's death; then ``sh`` checks that the parent
        is still ``parent`` (default: this process, the one that will start it) and exits at
        once if not: a parent that died before the request would otherwise leave it running.
        """
        expected = str(os.getpid() if parent is None else parent)
        guard = ["sh", "-c", _PARENT_GUARD, expected]
        return ["ip", "netns", "exec", self.netns, *_DEATH_SIGNAL, *guard, *argv]

    def run(
        self, argv: Sequence[str], *, input: str | None = None, timeout: float = COMMAND_TIMEOUT
    ) -> str:
        """Run ``argv`` inside this namespace to completion; returns stdout.

        :raises NetnsError: on a non-zero exit or after ``timeout`` seconds (it is killed).
        """
        return sh(self.exec_argv(argv), input=input, timeout=timeout)

    def python(self, args: Sequence[str], *, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run ``python args`` inside this namespace (``python_environment()``); stdout."""
        argv = self.exec_argv([sys.executable, *args])
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=python_environment(),
                cwd=REPO_ROOT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise NetnsError(f"python {' '.join(args)} in {self.name}: over {timeout} s") from None
        if done.returncode != 0:
            raise NetnsError(
                f"python {' '.join(args)} in {self.name} exited {done.returncode}: "
                f"{done.stderr.strip()[-2000:]}"
            )
        return done.stdout

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        stderr: int | IO[Any] | None = subprocess.DEVNULL,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside this namespace; the network kills it at ``close()``."""
        process = subprocess.Popen(
            self.exec_argv(argv),
            env=dict(env) if env is not None else python_environment(),
            cwd=REPO_ROOT,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )
        self.network.processes.append(process)
        return process

    def ip(self, *commands: str) -> None:
        """
        Run ``ip`` commands (one per string, as in ``ip -batch``) in this namespace; a command
        starting with ``-6`` runs with ``ip -6`` (after the others: batch lines take no options).
        """
        v6 = [c.removeprefix("-6 ") for c in commands if c.startswith("-6 ")]
        other = [c for c in commands if not c.startswith("-6 ")]
        for options, batch in (([], other), (["-6"], v6)):
            if batch:
                sh(["ip", *options, "-n", self.netns, "-batch", "-"], input="\n".join(batch) + "\n")

    def nft(self, ruleset: str) -> None:
        """Load an nftables ruleset (``nft -f``) in this namespace."""
        self.run(["nft", "-f", "-"], input=ruleset)

    def sysctl(self, **settings: str | int) -> None:
        """Set sysctls in this namespace (``net__ipv4__ip_forward=1`` is net.ipv4.ip_forward)."""
        pairs = [f"{k.replace('__', '.')}={v}" for k, v in settings.items()]
        self.run(["sysctl", "-qw", *pairs])

    def listening(self, port: int) -> bool:
        """Whether something in this namespace listens on TCP ``port``."""
        return bool(self.run(["ss", "-Hltn", f"sport = :{port}"]).strip())


@dataclass(eq=False)
class Router(Node):
    """The "internet": forwards between every node attached to it; answers on ``PUBLIC4``."""


@dataclass(eq=False)
class Nat(Node):
    """A NAT gateway: its WAN side on a router link, LAN hosts on links below it."""

    kind: NatKind = NatKind.PORT_PRESERVING
    firewall: Firewall = Firewall.DROP


@dataclass(eq=False)
class Host(Node):
    """An end host with one uplink (to the router or to a NAT)."""

    _number: int = 2

    def change_address(self) -> None:
        """
        Move to the next address of the uplink's subnets: the old addresses and the routes
        through them are removed, the new ones and the default routes added (like a new DHCP
        lease). Existing connections on the old addresses are left to die, silently.
        """
        link = self.uplink
        assert link is not None
        self._number += 1
        self.ip(f"addr flush dev {link.lower_if} scope global")  # the default routes go too
        self.addresses4, self.addresses6 = [], []
        self.ip(*_address_commands(self, link, self._number), *_default_routes(link))


def _address_commands(node: Node, link: Link, number: int) -> list[str]:
    """Give ``node`` address ``number`` of ``link`` (recorded on the node)."""
    commands = []
    v4, v6 = link.lower_address4(number), link.lower_address6(number)
    if v4 is not None and link.subnet4 is not None:
        commands.append(f"addr add {v4}/{link.subnet4.prefixlen} dev {link.lower_if}")
        node.addresses4.append(v4)
    if v6 is not None and link.subnet6 is not None:
        commands.append(f"addr add {v6}/{link.subnet6.prefixlen} dev {link.lower_if} nodad")
        node.addresses6.append(v6)
    return commands


def _default_routes(link: Link) -> list[str]:
    routes = []
    if link.gateway4 is not None:
        routes.append(f"route replace default via {link.gateway4} dev {link.lower_if}")
    if link.gateway6 is not None:
        routes.append(f"-6 route replace default via {link.gateway6} dev {link.lower_if}")
    return routes


# ---------------------------------------------------------------------------------------------
# the network


_open_networks: weakref.WeakSet[Network] = weakref.WeakSet()
_serial = itertools.count(1)


class Network:
    """
    Every namespace of one topology; a context manager that tears it all down (see the module
    docstring). Build it with ``router``, ``nat`` and ``host``; break it with ``blackhole``,
    ``impair`` and ``Host.change_address``.
    """

    def __init__(self, *, prefix: str = PREFIX) -> None:
        self.prefix = f"{prefix}-{os.getpid()}-{next(_serial)}"
        self.nodes: list[Node] = []
        self.links: list[Link] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.blackholes: list[BlackHole] = []
        self.impairments: list[Impairment] = []
        self._link_numbers = itertools.count(1)
        self._closed = False
        sweep_leftovers(prefix)
        _open_networks.add(self)

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except Exception as e:
            if value is None:
                raise
            print(f"network teardown also failed: {e}", file=sys.stderr)

    # --- building ---

    def _namespace(self, name: str, node_class: type[Node], **fields: Any) -> Any:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,15}", name):
            raise ValueError(f"node names are short lowercase words, not {name!r}")
        if any(n.name == name for n in self.nodes):
            raise ValueError(f"there already is a node named {name!r}")
        netns = f"{self.prefix}-{name}"
        sh(["ip", "netns", "add", netns])
        node = node_class(network=self, name=name, netns=netns, **fields)
        self.nodes.append(node)
        node.ip("link set lo up")
        forwarding = node_class is not Host
        node.sysctl(
            net__ipv6__conf__all__accept_dad=0,
            net__ipv6__conf__default__accept_dad=0,
            net__ipv6__conf__all__accept_ra=0,
            net__ipv6__conf__default__accept_ra=0,
            net__ipv4__ip_forward=int(forwarding),
            net__ipv6__conf__all__forwarding=int(forwarding),
            net__ipv4__conf__all__rp_filter=0,
            net__ipv4__conf__default__rp_filter=0,
        )
        return node

    def router(
        self,
        name: str = "internet",
        *,
        silent_unroutable: bool = True,
        report_ttl_expiry: bool = True,
    ) -> Router:
        """
        The router ("internet") namespace, answering on ``PUBLIC4`` and ``PUBLIC6``.

        :param silent_unroutable: drop packets to the private and documentation ranges it
            has no link for (a peer's LAN address behind a NAT, an address a host left)
            without a word, as the internet mostly does, so that a connection attempt to
            them hangs until its timeout; ``False``: answer with ICMP unreachable (it fails
            at once).
        :param report_ttl_expiry: answer a packet whose TTL (hop limit) runs out here with an
            ICMP time exceeded, as most routers do; ``False``: drop it without a word, as some
            routers and filtering firewalls do (a SYN sent with too small a TTL then simply
            goes unanswered).
        """
        router: Router = self._namespace(name, Router)
        router.ip(f"addr add {PUBLIC4}/32 dev lo", f"addr add {PUBLIC6}/128 dev lo")
        if silent_unroutable:
            router.ip(*[f"route add blackhole {prefix}" for prefix in UNROUTABLE4])
            router.ip(*[f"-6 route add blackhole {prefix}" for prefix in UNROUTABLE6])
        if not report_ttl_expiry:
            router.nft(
                "table inet txdn_ttl {\n"
                "  chain output {\n"
                "    type filter hook output priority filter; policy accept;\n"
                "    icmp type time-exceeded drop\n"
                "    icmpv6 type time-exceeded drop\n"
                "  }\n"
                "}\n"
            )
        router.addresses4, router.addresses6 = [PUBLIC4], [PUBLIC6]
        return router

    def _link(
        self, upper: Node, lower: Node, ipv4: bool, ipv6: bool, lan: bool, public: bool = False
    ) -> Link:
        n = next(self._link_numbers)
        if n > 250:
            raise ValueError("at most 250 links per network")
        wan = f"{PUBLIC_WAN4}.{n}.0/24" if public else f"10.{n}.0.0/24"
        subnet4 = ipaddress.IPv4Network(f"192.168.{n}.0/24" if lan else wan)
        subnet6 = ipaddress.IPv6Network(f"2001:db8:{n:x}::/64")
        upper_if = f"{'lan' if isinstance(upper, Nat) else 'r'}{n}"
        lower_if = "wan0" if isinstance(lower, Nat) else "eth0"
        link = Link(
            n,
            upper,
            lower,
            upper_if,
            lower_if,
            subnet4 if ipv4 else None,
            subnet6 if ipv6 else None,
        )
        veth = ["type", "veth", "peer", "name", lower_if, "netns", lower.netns]
        sh(["ip", "link", "add", upper_if, "netns", upper.netns, *veth])
        upper_commands = [f"link set {upper_if} up"]
        if link.subnet4 is not None:
            upper_commands.append(f"addr add {link.gateway4}/24 dev {upper_if}")
        if link.subnet6 is not None:
            upper_commands.append(f"addr add {link.gateway6}/64 dev {upper_if} nodad")
        upper.ip(*upper_commands)
        lower.ip(
            f"link set {lower_if} up", *_address_commands(lower, link, 2), *_default_routes(link)
        )
        upper.downlinks.append(link)
        lower.uplink = link
        self.links.append(link)
        return link

    def nat(
        self,
        name: str,
        upstream: Router,
        kind: NatKind,
        *,
        firewall: Firewall = Firewall.DROP,
        port_mapping: bool = False,
    ) -> Nat:
        """
        A NAT on its own router link (IPv4 only): hosts behind it get ``192.168.n.0/24`` and
        reach the router through nftables masquerade (``kind``). Like a home router, it lets in
        from the WAN only what belongs to a connection from the LAN (conntrack ``established``
        or ``related``, which includes the reply to a SYN it let out and the peer's SYN of a
        simultaneous open); everything else it drops or refuses with a RST (``firewall``).

        :param port_mapping: ready for ``tests.support.miniupnpd``: a public WAN address
            (``198.20.n.2``), and the chains miniupnpd fills (``MINIUPNPD_CHAINS``: its port
            forwards, DNAT at prerouting, and what the forward chain lets in for them).
        """
        if not isinstance(upstream, Router):
            raise ValueError("a NAT hangs off the router")
        nat: Nat = self._namespace(name, Nat, kind=kind, firewall=firewall)
        self._link(upstream, nat, ipv4=True, ipv6=False, lan=False, public=port_mapping)
        unsolicited = "".join(f'    iifname "wan0" {v}\n' for v in firewall.verdicts)
        forwards, mapped = "", ""
        if port_mapping:  # (miniupnpd's nftables rules live in an inet table)
            forwards = (
                "  chain prerouting {\n"
                "    type nat hook prerouting priority dstnat; policy accept;\n"
                "    jump prerouting_miniupnpd\n"
                "  }\n"
                "  chain prerouting_miniupnpd {\n  }\n"
                "  chain postrouting_miniupnpd {\n  }\n"
                "  chain miniupnpd {\n  }\n"
            )
            mapped = '    iifname "wan0" jump miniupnpd\n'
        family = "inet" if port_mapping else "ip"
        nat.nft(
            f"table {family} txdn_nat {{\n"
            "  chain postrouting {\n"
            "    type nat hook postrouting priority srcnat; policy accept;\n"
            f'    oifname "wan0" {kind.value}\n'
            "  }\n"
            f"{forwards}"
            "  chain forward {\n"
            "    type filter hook forward priority filter; policy accept;\n"
            '    iifname "wan0" ct state established,related accept\n'
            f"{mapped}"
            f"{unsolicited}"
            "  }\n"
            "  chain input {\n"
            "    type filter hook input priority filter; policy accept;\n"
            '    iifname "wan0" ct state established,related accept\n'
            f"{unsolicited}"
            "  }\n"
            "}\n"
        )
        return nat

    def host(
        self, name: str, upstream: Router | Nat, *, ipv4: bool = True, ipv6: bool | None = None
    ) -> Host:
        """
        A host on a link of its own below ``upstream``.

        :param ipv6: default: dual-stack on the router, IPv4 only behind a NAT. ``ipv4=False``
            with ``ipv6=True`` makes an IPv6-only host.
        :raises ValueError: for IPv6 behind a NAT, or no family at all.
        """
        if ipv6 is None:
            ipv6 = isinstance(upstream, Router)
        if isinstance(upstream, Nat) and ipv6:
            raise ValueError("NATs here are IPv4 only: put IPv6 hosts on the router")
        if not (ipv4 or ipv6):
            raise ValueError("a host needs IPv4 or IPv6")
        host: Host = self._namespace(name, Host)
        self._link(upstream, host, ipv4, ipv6, lan=isinstance(upstream, Nat))
        return host

    # --- faults ---

    def blackhole(
        self,
        a: Node | Sequence[str],
        b: Node | Sequence[str],
        *,
        at: Node | None = None,
        extra: str = "",
    ) -> BlackHole:
        """
        Silently drop every packet between ``a`` and ``b`` (nodes or address lists), both ways,
        in namespace ``at`` (default: the router, where nodes are seen at their
        ``public_addresses()``), until ``.remove()``. Nothing is rejected: established
        connections just stop hearing from each other.

        :param extra: more nftables match expressions for every rule (e.g. ``"tcp dport 4001"``).
        """
        where = at or self._the_router()
        left = a.public_addresses() if isinstance(a, Node) else list(a)
        right = b.public_addresses() if isinstance(b, Node) else list(b)
        hole = BlackHole(where, f"txdn_bh_{len(self.blackholes) + 1}")
        where.nft(blackhole_ruleset(hole.table, left, right, extra))
        self.blackholes.append(hole)
        return hole

    def impair(
        self,
        node: Node,
        *,
        up: Shape | None = None,
        down: Shape | None = None,
        backend: str = "auto",
    ) -> Impairment:
        """
        Delay/jitter/lose packets on the link between ``node`` and the router
        (``tests.support.netfaults.Impairment``).

        :param up: what ``node`` sends (default: unchanged); ``down``: what it receives.
        :param backend: ``"netem"`` (``tc``), ``"userspace"`` (``tests.support.linkdelay``), or
            ``"auto"``: netem where the kernel has it.
        :raises ValueError: if ``node`` is not attached to the router (impair its NAT instead).
        :raises NetnsError: for ``backend="netem"`` where netem is missing.
        """
        link = node.uplink
        if link is None or not isinstance(link.upper, Router):
            raise ValueError(f"{node.name} is not on a router link (impair its NAT instead)")
        impairment = impair_link(link, up or Shape(), down or Shape(), backend)
        self.impairments.append(impairment)
        return impairment

    def _the_router(self) -> Router:
        routers = [n for n in self.nodes if isinstance(n, Router)]
        if len(routers) != 1:
            raise ValueError("say where (at=): there is not exactly one router")
        return routers[0]

    # --- teardown ---

    def close(self) -> None:
        """
        Kill every process in our namespaces and delete them all. Idempotent; runs every step
        even when one fails, then raises the first error.
        """
        if self._closed:
            return
        self._closed = True
        _open_networks.discard(self)
        errors: list[BaseException] = []
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + TERMINATE_GRACE
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
        for node in reversed(self.nodes):
            try:
                destroy_namespace(node.netns)
            except Exception as e:
                errors.append(e)
        for process in self.processes:
            try:
                process.kill()
                process.wait(timeout=COMMAND_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired) as e:
                errors.append(e)
        if errors:
            raise errors[0]


def _close_all() -> None:
    for network in list(_open_networks):
        try:
            network.close()
        except Exception as e:
            print(f"closing network {network.prefix} at exit: {e}", file=sys.stderr)


atexit.register(_close_all)
