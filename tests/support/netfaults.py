"""
Faults for ``tests.support.netns`` topologies: black holes (nftables drop rules) and link
impairments (delay, jitter, loss: ``tc netem``, or a userspace delayer where the kernel has no
netem). Build them with ``Network.blackhole`` and ``Network.impair``.

Layer: test infrastructure (not shipped). Each fault is undone by its ``remove()``, and in any
case with the namespace it lives in.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.support.namespaces import NetnsError, netem_support, stop_process

if TYPE_CHECKING:
    from tests.support.netns import Link, Node


@dataclass(eq=False)
class BlackHole:
    """Drop rules (an nftables table of their own) in one namespace, until ``remove()``."""

    node: Node
    table: str
    removed: bool = False

    def remove(self) -> None:
        """Delete the rules: traffic flows again. Idempotent."""
        if not self.removed:
            self.removed = True
            self.node.run(["nft", "delete", "table", "inet", self.table])


def blackhole_ruleset(table: str, a: Sequence[str], b: Sequence[str], extra: str) -> str:
    rules = []
    for family, width in (("ip", 4), ("ip6", 6)):
        left = [x for x in a if ipaddress.ip_address(x).version == width]
        right = [x for x in b if ipaddress.ip_address(x).version == width]
        if left and right:
            sa, sb = "{ " + ", ".join(left) + " }", "{ " + ", ".join(right) + " }"
            rules.append(f"{family} saddr {sa} {family} daddr {sb} {extra} drop")
            rules.append(f"{family} saddr {sb} {family} daddr {sa} {extra} drop")
    if not rules:
        raise ValueError(f"no address family in common between {a} and {b}")
    body = "\n".join(f"    {r}" for r in rules)
    chains = "\n".join(
        f"  chain {hook} {{\n    type filter hook {hook} priority -10; policy accept;\n{body}\n  }}"
        for hook in ("forward", "input", "output")
    )
    return f"table inet {table} {{\n{chains}\n}}\n"


@dataclass(eq=False)
class Impairment:
    """
    Delay, jitter and loss on the link between a node and the router, per direction.

    ``up`` is what the node sends, ``down`` what it receives. With the netem backend these are
    qdiscs on the two ends of the link; with the userspace backend (``tests.support.linkdelay``
    behind two TUN devices in the router, reached by policy routing) only traffic the router
    forwards is delayed, not traffic to the router's own addresses.
    """

    link: Link
    backend: str
    up: Shape
    down: Shape
    _delayer: subprocess.Popen[bytes] | None = None
    removed: bool = False

    def update(self, up: Shape | None = None, down: Shape | None = None) -> None:
        """Change the shape of either direction at once (nothing is restarted)."""
        self.up = up or self.up
        self.down = down or self.down
        if self.backend == "netem":
            _apply_netem(self.link, self.up, self.down)
        else:
            assert self._delayer is not None and self._delayer.stdin is not None
            self._delayer.stdin.write(_delayer_config(self.up, self.down).encode() + b"\n")
            self._delayer.stdin.flush()

    def remove(self) -> None:
        """Take the impairment away (queued packets are still delivered). Idempotent."""
        if self.removed:
            return
        self.removed = True
        if self.backend == "netem":
            for node, dev in (
                (self.link.upper, self.link.upper_if),
                (self.link.lower, self.link.lower_if),
            ):
                node.run(["tc", "qdisc", "del", "dev", dev, "root"])
            return
        router, n = self.link.upper, self.link.index
        rules = [f"rule del pref {p}" for p in _delay_prefs(n)]
        router.ip(*rules, *[f"-6 {r}" for r in rules])
        if self._delayer is not None:
            stop_process(self._delayer)


@dataclass(frozen=True)
class Shape:
    """One direction of an impairment: a fixed delay, uniform jitter (+/-), loss probability."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.delay < 0 or self.jitter < 0 or self.jitter > self.delay + 1e-9:
            raise ValueError(f"need 0 <= jitter <= delay: {self}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss is a probability below 1: {self}")


def _netem_args(shape: Shape) -> list[str]:
    args = ["delay", f"{shape.delay * 1000:.3f}ms"]
    if shape.jitter:
        args.append(f"{shape.jitter * 1000:.3f}ms")
    if shape.loss:
        args += ["loss", f"{shape.loss * 100:.4f}%"]
    return [*args, "limit", "100000"]


def _apply_netem(link: Link, up: Shape, down: Shape) -> None:
    for node, dev, shape in ((link.lower, link.lower_if, up), (link.upper, link.upper_if, down)):
        node.run(["tc", "qdisc", "replace", "dev", dev, "root", "netem", *_netem_args(shape)])


def _delayer_config(up: Shape, down: Shape) -> str:
    return json.dumps({"up": vars(up), "down": vars(down)})


LOCAL_PREF = 100


def _delay_prefs(n: int) -> tuple[int, int, int]:
    # every "from the link" rule before every "back from a delayer" rule before every "to the
    # link" rule, so a packet between two impaired links is delayed by both (once each)
    return (1000 + n, 2000 + n, 3000 + n)


def impair_link(link: Link, up: Shape, down: Shape, backend: str = "auto") -> Impairment:
    """
    Impair ``link`` (between a node and the router) with ``up``/``down`` shapes.

    :param backend: ``"netem"``, ``"userspace"``, or ``"auto"`` (netem where the kernel has it).
    :raises NetnsError: for ``"netem"`` where it is missing, or when the delayer fails.
    """
    if backend == "auto":
        backend = "userspace" if netem_support() else "netem"
    if backend not in ("netem", "userspace"):
        raise ValueError(f"unknown backend {backend!r}")
    impairment = Impairment(link, backend, up, down)
    if backend == "netem":
        reason = netem_support()
        if reason is not None:
            raise NetnsError(f"tc netem is unavailable here: {reason}")
        _apply_netem(link, up, down)
    else:
        impairment._delayer = _start_delayer(link, up, down)
    return impairment


def _start_delayer(link: Link, up: Shape, down: Shape) -> subprocess.Popen[bytes]:
    """Start ``tests.support.linkdelay`` in the router and route the link's traffic into it."""
    router, n = link.upper, link.index
    up_dev, down_dev = f"dl{n}u", f"dl{n}d"
    delayer = router.popen(
        [sys.executable, "-m", "tests.support.linkdelay", up_dev, down_dev],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert delayer.stdin is not None and delayer.stdout is not None
    delayer.stdin.write(_delayer_config(up, down).encode() + b"\n")
    delayer.stdin.flush()
    if delayer.stdout.readline().strip() != b"ready":  # bounded: it exits on any error
        stop_process(delayer)
        raise NetnsError(f"the link delayer for {link.lower.name} did not start")
    from_link, back, to_link = _delay_prefs(n)
    commands = [f"link set {up_dev} up", f"link set {down_dev} up"]
    if not router.run(["ip", "rule", "show", "pref", str(LOCAL_PREF)]).strip():
        # the router's own packets are routed as usual (a delayer cannot send them back in)
        commands += [f"rule add pref {LOCAL_PREF} iif lo lookup main"]
        commands += [f"-6 rule add pref {LOCAL_PREF} iif lo lookup main"]
    for family, subnet in (("", link.subnet4), ("-6 ", link.subnet6)):
        if subnet is None:
            continue
        commands += [
            f"{family}route add default dev {up_dev} table {from_link}",
            f"{family}route add default dev {down_dev} table {to_link}",
            f"{family}rule add pref {from_link} iif {link.upper_if} lookup {from_link}",
            f"{family}rule add pref {back} iif {down_dev} lookup main",
            f"{family}rule add pref {to_link} to {subnet} lookup {to_link}",
        ]
    router.ip(*commands)
    return delayer
