"""
Shared pieces of the benchmarks that run in Linux network namespaces (``benchmarks.recovery``,
``benchmarks.reach``).

Layer: benchmark infrastructure. A ``Scene`` is one topology from ``tests.support.netns`` with
the real mailbox server and transit relay running on a network of their own ("servers", behind
the router) and two peer hosts ``a`` and ``b``, routed to each other or each behind a NAT. Every
run builds its own scene and tears it down (namespaces, processes) whatever happens. Peers are
``tests.support.peer`` processes in the hosts' namespaces (``tests.support.peers.placement``), sides
forced so that the Leader is the one asked for. The figures are summarized as the median and
the worst over the runs, a run that never got there counting as worse than any that did.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.harness import PeerPair  # noqa: E402
from tests.support.miniupnpd import start_miniupnpd  # noqa: E402
from tests.support.netns import (  # noqa: E402
    Firewall,
    Host,
    NatKind,
    Network,
    Node,
    Shape,
    namespace_support,
)
from tests.support.peers import placement  # noqa: E402
from tests.support.reach import within as within  # noqa: E402  (re-exported)
from tests.support.servers import NamespacedServers, start_servers  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import deferLater  # noqa: E402
from twisted.python.failure import Failure  # noqa: E402

LEADER = "f" * 16  # the higher dilation side leads
FOLLOWER = "0" * 16


@dataclass
class Scene:
    """One topology: the router, the servers' host and peer hosts ``a`` and ``b``."""

    net: Network
    servers: NamespacedServers
    a: Host
    b: Host
    extra: dict[str, Host]


def build_scene(
    stack: ExitStack,
    nat: NatKind | None = None,
    hosts: Sequence[str] = (),
    *,
    firewall: Firewall = Firewall.DROP,
    report_ttl_expiry: bool = True,
    nat_delay: float = 0.0,
    routers: str = "",
) -> Scene:
    """
    Build a scene (closed by ``stack``): ``a`` and ``b`` on the router, or each behind its own
    NAT of kind ``nat`` whose firewall is ``firewall``; more hosts named in ``hosts`` go on the
    router; ``report_ttl_expiry``: whether the router answers an expired TTL with an ICMP time
    exceeded (``tests.support.netns``); ``nat_delay``: seconds each way on each NAT's link to
    the router (so twice that between the two NATs); ``routers``: ``miniupnpd`` runs the real
    port-mapping daemon on both NATs (``tests.support.miniupnpd``), ``stopped`` makes the NATs
    ready for it (a public WAN address) without running it.
    """
    net = stack.enter_context(Network())
    internet = net.router(report_ttl_expiry=report_ttl_expiry)
    servers = start_servers(net.host("servers", internet))
    stack.callback(servers.stop)
    if nat is None:
        a, b = net.host("a", internet), net.host("b", internet)
    else:
        mapping = bool(routers)
        nats = [
            net.nat(f"nat-{h}", internet, nat, firewall=firewall, port_mapping=mapping)
            for h in "ab"
        ]
        if nat_delay:
            for n in nats:
                net.impair(n, up=Shape(nat_delay), down=Shape(nat_delay))
        a, b = net.host("a", nats[0]), net.host("b", nats[1])
        if routers == "miniupnpd":
            for n in nats:
                stack.callback(start_miniupnpd(n).stop)
    extra = {name: net.host(name, internet) for name in hosts}
    return Scene(net, servers, a, b, extra)


def peer_args(impl: str, leads: bool, scenario: str, *more: str) -> list[str]:
    """A peer's arguments: implementation, forced side, scenario, then ``more``."""
    return ["--impl", impl, "--side", LEADER if leads else FOLLOWER, "--scenario", scenario, *more]


def start_pair(
    reactor: Any,
    scene: Scene,
    left_args: Sequence[str],
    right_args: Sequence[str],
    timeout: float,
    *,
    left: Node | None = None,
    right: Node | None = None,
) -> PeerPair:
    """Start two peers in ``left``/``right`` (default hosts ``a`` and ``b``)."""
    return PeerPair(
        reactor,
        scene.servers.mailbox_url,
        left_args,
        right_args,
        timeout,
        left=placement(left or scene.a),
        right=placement(right or scene.b),
    ).start()


async def sleep(reactor: Any, seconds: float) -> None:
    """Wait ``seconds`` on the reactor."""
    await deferLater(reactor, seconds, lambda: None)


async def settle(pair: PeerPair) -> None:
    """Kill both peers and wait until they are gone."""
    pair.kill()
    await pair.ended()


def median_and_worst(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Median and worst of ``values``; ``None`` (never happened) counts as infinitely bad,
    so a median or worst of ``inf`` means "did not happen"."""
    if not values:
        return None, None
    numbers = [float("inf") if v is None else v for v in values]
    return statistics.median(numbers), max(numbers)


def seconds_text(value: float | None, never: str) -> str:
    """A number of seconds for a table, ``never`` for infinity, ``—`` for no data."""
    if value is None:
        return "—"
    if value == float("inf"):
        return never
    return f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def save(path: str | None, records: list[dict[str, Any]]) -> None:
    """Append the run records to a JSON-lines file (if a path was given)."""
    if path:
        with open(path, "a") as out:
            for record in records:
                out.write(json.dumps(record) + "\n")


def load(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every run record in these JSON-lines files."""
    records = []
    for path in paths:
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def run(main: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    """
    Run ``main(reactor)`` on the reactor and return its exit status (1 if it raised, with the
    traceback printed; 2, with the reason, where namespaces cannot be created).
    """
    from twisted.internet import reactor

    reason = namespace_support()
    if reason is not None:
        print(f"network namespaces unavailable: {reason}", file=sys.stderr)
        return 2
    outcome: list[Any] = []

    def done(result: Any) -> None:
        outcome.append(result)
        reactor.stop()

    reactor.callWhenRunning(lambda: Deferred.fromCoroutine(main(reactor)).addBoth(done))
    reactor.run()
    if not outcome or isinstance(outcome[0], Failure):
        if outcome:
            outcome[0].printTraceback()
        return 1
    return int(outcome[0])


def log(message: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def keep(record: dict[str, Any], module: str, path: str | None, records: list[Any]) -> None:
    """Finish a run's record: note the command line, log it, keep it, save it."""
    record["command"] = command_line(module)
    log(json.dumps(record))
    records.append(record)
    save(path, [record])


def script_main(
    args: Any,
    measure: Callable[[Any, Any], Coroutine[Any, Any, list[dict[str, Any]]]],
    render: Callable[[list[dict[str, Any]]], str],
) -> int:
    """
    A benchmark's ``main``: print the tables of ``--report`` files, or measure (``measure``
    returns the run records) and print the tables of what it measured.
    """
    if args.report is not None:
        print(render(load(args.report)))
        return 0

    async def measured(reactor: Any) -> int:
        print(render(await measure(reactor, args)))
        return 0

    return run(measured)


def command_line(module: str) -> str:
    """This process's command line as ``python -m module ...``, for the record."""
    return " ".join(["python", "-m", module, *sys.argv[1:]])
