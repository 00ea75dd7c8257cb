"""
Mixed pairs (a stock peer and a txdilation peer) in real processes through a fault proxy, one
transfer per run, each run's outcome classified: the harness behind ``benchmarks/mixed_pairs.py``
and ``tests/test_mixed_pairs.py`` (issue 33).

Layer: test infrastructure. A run is two ``tests.support.peer`` processes (``bulk-send`` to
``bulk-recv``, SHA-256 of every byte compared) through the real mailbox server and transit
relay the caller runs, with a :class:`~tests.support.faults.FaultProxy` rate-limited to
:data:`RATE` on the path: in front of the relay (``relay``: both peers ``--no-listen``) or in
front of the txdilation peer's listener (``direct``: the stock peer ``--no-listen``, no relay).
Who leads: ``stock`` forces the stock peer's side to the highest one; ``txdilation`` forces
nothing (txdilation makes sure it leads), and the run reports the role it got. The moment of
the cuts (:data:`MOMENTS`), every cut an RST of every proxied connection it picks:

- ``all``: every connection, every 250 ms, from the start to the end (the first handshake,
  the stream and the close, as they come);
- ``handshake``: for :data:`HANDSHAKE_WINDOW` seconds from the first connection through the
  proxy, every 5 ms, every connection still in its handshake (fewer than ``HANDSHAKE_BYTES``
  forwarded either way): no generation can connect until the window ends;
- ``stream``: every 250 ms, the connections past their handshake (the link carrying data);
- ``close``: once, 0 to :data:`CLOSE_JITTER` s after the receiver reports it got the sender's
  CLOSE (its answer, its ACK and both wormholes' close race the cut).

Outcomes: ``ok`` (both peers exit 0, the receiver got every byte, digests equal), ``stall``
(a peer still running at the bound), ``unconfirmed`` (a txdilation sender still running at the
bound with records unacknowledged, after a stock receiver got every byte and left: the cut took
the receiver's last ACK, and nothing can tell the sender that its CLOSE arrived; it waits for
the peer timeout) or ``error``. ``sender_lag`` is how long after the
receiver's report (it got the CLOSE and acknowledged it) the sender finished: issue 33's
"a completed transfer ends for the sender within 5 s of its last acknowledgement".
Invariants: every run ends within ``timeout`` (the pair is killed), leaves no proxy, no timer
and no process behind (and no file, unless it failed: then ``logs`` names its directory, with
both peers' logs and the txdilation peer's telemetry), and touches 127.0.0.1 only.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.faults import Every, FaultProxy, free_port, start_fault_proxy
from tests.support.harness import PeerPair, PeerResult, Placement, peer_environment

RATE = 20_000_000
"""Bytes per second through the proxy, each way of each connection (the issue's 20 MB/s)."""
CUT_INTERVAL = 0.25
HANDSHAKE_BYTES = 1024
HANDSHAKE_WINDOW = 3.0
HANDSHAKE_POLL = 0.005
CLOSE_JITTER = 0.05
MOMENTS = ("all", "handshake", "stream", "close")
STOCK_LEADS = "f" * 16  # the highest side: stock leads whatever txdilation picks

__all__ = ["MOMENTS", "RATE", "Cell", "RunOutcome", "run_mixed"]


@dataclass(frozen=True)
class Cell:
    """What one run pairs: who sends, who leads, when the cuts come, through which path."""

    sender: str  # "stock" or "txdilation"; the receiver is the other one
    leader: str  # "stock" or "txdilation"
    moment: str = "all"
    path: str = "relay"

    @property
    def receiver(self) -> str:
        return "txdilation" if self.sender == "stock" else "stock"

    @property
    def pairing(self) -> str:
        return f"{self.sender} -> {self.receiver}"


@dataclass
class RunOutcome:
    """One run's result (see the module docstring)."""

    cell: Cell
    outcome: str
    seconds: float
    cuts: int
    txdilation_role: str | None = None
    sender_lag: float | None = None
    problems: list[str] = field(default_factory=list)
    logs: str | None = None  # a failed run's directory: the peers' logs, the telemetry

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "cell": asdict(self.cell)}


def _txdilation_role(events_path: Path) -> str | None:
    """The role in the txdilation peer's telemetry (None if it never got one)."""
    try:
        lines = events_path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        role = json.loads(line).get("role")
        if role:
            return str(role)
    return None


def _schedule(reactor: Any, cell: Cell, proxy: FaultProxy, bound: float) -> Every | None:
    if cell.moment == "all":
        return Every(reactor, CUT_INTERVAL, proxy.cut, duration=bound)
    if cell.moment == "handshake":
        window: list[float] = []  # when the first connection came through

        def in_handshake() -> None:
            if not window and proxy.stats.accepted:
                window.append(reactor.seconds() + HANDSHAKE_WINDOW)
            if window and reactor.seconds() < window[0]:
                proxy.cut(below=HANDSHAKE_BYTES)

        return Every(reactor, HANDSHAKE_POLL, in_handshake, duration=bound)
    if cell.moment == "stream":
        return Every(
            reactor, CUT_INTERVAL, lambda: proxy.cut(carried=HANDSHAKE_BYTES), duration=bound
        )
    if cell.moment == "close":
        return None
    raise ValueError(f"unknown moment {cell.moment!r}")


async def run_mixed(
    reactor: Any,
    mailbox_url: str,
    relay_port: int,
    cell: Cell,
    *,
    total: int = 16 << 20,
    timeout: float = 60.0,
    seed: str = "mixed",
) -> RunOutcome:
    """Run one transfer of ``total`` bytes for ``cell`` (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="txdilation-mixed-"))
    events = workdir / "events.jsonl"
    common = ["--total", str(total), "--seed", seed]
    args = {
        "sender": ["--impl", cell.sender, "--scenario", "bulk-send", *common],
        "receiver": ["--impl", cell.receiver, "--scenario", "bulk-recv", *common],
    }
    txdilation = "sender" if cell.sender == "txdilation" else "receiver"
    stock = "receiver" if txdilation == "sender" else "sender"
    args[txdilation] += ["--events", str(events)]
    if cell.leader == "stock":
        args[stock] += ["--side", STOCK_LEADS]
    if cell.path == "relay":
        proxy = await start_fault_proxy(reactor, relay_port, lifetime=timeout + 10)
        for role in args:
            args[role] += ["--no-listen", "--relay", proxy.hint]
    else:
        listen_port = free_port()
        proxy = await start_fault_proxy(reactor, listen_port, lifetime=timeout + 10)
        args[txdilation] += ["--listen-port", str(listen_port), "--hint-port", str(proxy.port)]
        args[stock] += ["--no-listen"]
    proxy.throttle(RATE)
    started = time.monotonic()
    # each peer's Twisted log goes to the run's directory, kept only when the run failed
    here = Placement(env={**peer_environment(), "TXDILATION_PEER_LOG": str(workdir / "peer")})
    pair = PeerPair(
        reactor, mailbox_url, args["receiver"], args["sender"], timeout, left=here, right=here
    ).start()
    schedule = _schedule(reactor, cell, proxy, timeout)
    seen: dict[str, float] = {}

    def noted(name: str) -> Any:
        def note(event: dict[str, Any]) -> None:
            seen[name] = time.monotonic()
            if name == "received" and cell.moment == "close":
                reactor.callLater(random.uniform(0, CLOSE_JITTER), proxy.cut)

        return note

    pair.when("left", "result").addCallback(noted("received"))
    pair.when("right", "result").addCallback(noted("sent"))
    try:
        await pair.ended()
    finally:
        if schedule is not None:
            schedule.stop()
        await proxy.stop()
    receiver, sender = pair.results
    outcome = RunOutcome(
        cell,
        _classify(pair, sender, receiver, total),
        round(time.monotonic() - started, 3),
        proxy.stats.cuts,
        _txdilation_role(events),
        problems=_problems(pair, sender, receiver),
    )
    if "received" in seen and "sent" in seen:
        outcome.sender_lag = round(seen["sent"] - seen["received"], 3)
    if outcome.outcome == "ok":
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        outcome.logs = str(workdir)
    return outcome


def _classify(pair: PeerPair, sender: PeerResult, receiver: PeerResult, total: int) -> str:
    if pair.problems or 3 in (sender.exit_code, receiver.exit_code):
        error = sender.event("error") or {}
        received = receiver.exit_code == 0 and receiver.result.get("bytes") == total
        if received and error.get("unacknowledged"):
            return "unconfirmed"
        return "stall"  # killed at the bound, or a peer gave up waiting (its --timeout)
    if sender.exit_code != 0 or receiver.exit_code != 0:
        return "error"
    got, sent = receiver.result, sender.result
    if got.get("bytes") != total or got.get("sha256") != sent.get("sha256"):
        return "error"
    return "ok"


def _problems(pair: PeerPair, sender: PeerResult, receiver: PeerResult) -> list[str]:
    problems = list(pair.problems)
    for name, peer in (("sender", sender), ("receiver", receiver)):
        error = peer.event("error")
        if error is not None:
            unacknowledged = error.get("unacknowledged")
            more = "" if unacknowledged is None else f", {unacknowledged} unacknowledged"
            problems.append(f"{name}: {error.get('error')} ({error.get('phase')}{more})")
        elif peer.exit_code not in (0, None):
            problems.append(f"{name} exited with {peer.exit_code}")
    return problems
