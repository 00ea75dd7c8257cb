"""
How fast a dilated link recovers, measured in Linux network namespaces (issue 14's "before"):
``python -m benchmarks.recovery [--cases ...] [--runs N] [--json PATH]`` (root).

Layer: benchmark infrastructure; prints figures, asserts nothing. Every run builds its own
topology (``benchmarks.namespaced.Scene``: hosts ``a`` and ``b`` routed to each other, the real
mailbox server and transit relay on a third network, the relay offered by both peers) and
removes it afterwards. The sender (host ``a``) streams a 1 KiB record every 10 ms to the
receiver (host ``b``) on one subchannel (``tests.support.peer_stream``); once records flow over the
direct path, the fault is applied and the receiver reports the delivery gap around it and
whether every record arrived exactly once, in order. Sides are forced so the Leader is the
peer the pairing names. Cases:

- ``blackhole``: the direct path between ``a`` and ``b`` silently drops everything (the relay
  stays reachable). Gap until a record written after the fault arrives; a run waits at most
  ``--cap`` seconds (120 at the default 30 s ping interval, 60 at 5 s) and otherwise counts as
  "no recovery within N s".
- ``address``: the sending host moves to a new address (old address and routes removed).
- ``idle``: nothing flows (one record at the start), the direct path is black-holed; when
  each side reports the link gone.
- ``slow``: 2 s of delay added to every packet host ``a`` sends (RTT +2 s; ``tc netem`` or the
  userspace delayer), then 60 s of streaming: how many times either side dropped the link.
- ``jitter`` / ``lossy``: the soak (``--soak`` seconds, 30 minutes by default): 150 +/- 120 ms
  each way, or 50 +/- 50 ms and 1% loss each way (issue 31); how many times either side
  dropped the link or moved it to another connection (its standby path): none is needed.
- ``stall``: the receiver's application reads nothing for ``--stall`` seconds (60) while the
  sender writes 64 MiB as fast as flow control lets it; how many times either side dropped
  the link (the dead-path detector must not take a closed window for a dead path).
- ``flood``: a third host opens ``--flood-count`` connections within a second at the txdilation
  listener (a fixed port), half of them writing 64 bytes of garbage, while the real peer's
  connection attempt is held back until the flood starts: refused, never accepted, garbage
  connections not closed within 5 s, and whether (and how fast) the real peer got in.

``--report FILE...`` prints the tables of earlier ``--json`` files instead of running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from tests.support.harness import PeerPair, PeerResult
from tests.support.netns import Shape
from tests.support.peers import (
    connections,
    moves,
    noticed_at,
    path_of,
    reconnections,
    status_events,
)
from twisted.internet import threads

from benchmarks.namespaced import (
    Scene,
    build_scene,
    keep,
    log,
    markdown_table,
    median_and_worst,
    peer_args,
    script_main,
    seconds_text,
    settle,
    sleep,
    start_pair,
    within,
)

STEADY = 3.0  # seconds of records over the direct path before the fault
SLOW_WATCH = 60.0
SLOW_DELAY = 2.0
# the jittery soak: each direction of host a's link delayed 150 ms +/- 120 ms (in order)
SOAK_SHAPE = Shape(0.15, 0.12)
# the lossy soak (issue 31): 50 ms +/- 50 ms each way and 1% of the packets lost each way
LOSSY_SHAPE = Shape(0.05, 0.05, 0.01)
START_ATTEMPTS = 4
FLOOD_PORT = 40000


@dataclass(frozen=True)
class Pairing:
    """Which implementation sends and receives, and which of them leads."""

    key: str
    sender: str
    receiver: str
    leader: str  # "sender" or "receiver"

    @property
    def label(self) -> str:
        lead = self.sender if self.leader == "sender" else self.receiver
        short = {"txdilation": "tx", "stock": "stock"}
        return (
            f"{short[self.sender]} sender → {short[self.receiver]} receiver, "
            f"{self.leader} ({short[lead]}) leads"
        )


PAIRINGS = {
    p.key: p
    for p in (
        Pairing("tx-tx-sender-leads", "txdilation", "txdilation", "sender"),
        Pairing("tx-tx-receiver-leads", "txdilation", "txdilation", "receiver"),
        Pairing("tx-leads-stock-sender", "stock", "txdilation", "receiver"),
        Pairing("stock-leads-tx-sender", "txdilation", "stock", "receiver"),
        Pairing("tx-leads-stock-receiver", "txdilation", "stock", "sender"),
        Pairing("stock-stock", "stock", "stock", "sender"),
    )
}
CASE_PAIRINGS = {
    "blackhole": list(PAIRINGS),
    "address": ["tx-tx-sender-leads", "tx-tx-receiver-leads", "stock-stock"],
    "idle": ["tx-tx-sender-leads"],
    "slow": ["tx-tx-sender-leads", "tx-leads-stock-sender", "stock-stock"],
    "jitter": ["tx-tx-sender-leads"],
    "lossy": ["tx-tx-sender-leads"],
    "flood": ["tx-tx-sender-leads"],
    "stall": ["tx-tx-sender-leads", "tx-leads-stock-receiver"],
}
STALL_TOTAL = 64 * 2**20
_STOPPED = "StoppedPeer"
DEFAULT_CAP = {30.0: 120.0, 5.0: 60.0}


def stream_args(
    pairing: Pairing, scene: Scene, ping: float | None, duration: float, interval: float = 0.01
) -> tuple[list[str], list[str]]:
    """The sender's and the receiver's arguments for a stream through ``scene``."""
    common = ["--relay", scene.servers.relay_hint]
    if ping is not None:
        common += ["--ping-interval", str(ping)]
    sender = peer_args(pairing.sender, pairing.leader == "sender", "stream-send", *common)
    sender += ["--duration", str(duration), "--record-interval", str(interval)]
    receiver = peer_args(pairing.receiver, pairing.leader == "receiver", "stream-recv", *common)
    return sender, receiver


async def _start_stream(
    reactor: Any, scene: Scene, pairing: Pairing, ping: float | None, budget: float, **kw: Any
) -> tuple[PeerPair, dict[str, Any] | None]:
    """Start the pair and wait (<= 90 s) until records flow; returns the pair and the
    ``stream-started`` event (``None`` if they never flowed)."""
    sender, receiver = stream_args(pairing, scene, ping, duration=budget + 60, **kw)
    pair = start_pair(reactor, scene, sender, receiver, timeout=budget + 180)
    started = await within(reactor, pair.when("right", "stream-started"), 90)
    return pair, started


async def _finish_stream(reactor: Any, pair: PeerPair, sender_first: bool) -> dict[str, Any]:
    """Stop the stream and get the receiver's report (at once, if the sender cannot)."""
    report = None
    if sender_first:
        pair.send("left", {"command": "finish"})
        report = await within(reactor, pair.when("right", "result"), 30)
    if report is None:
        pair.send("right", {"command": "finish"})
        report = await within(reactor, pair.when("right", "result"), 15)
    return {k: v for k, v in (report or {}).items() if k != "event"}


def _base(case: str, pairing: Pairing, ping: float | None, index: int) -> dict[str, Any]:
    return {
        "case": case,
        "pairing": pairing.key,
        "ping": ping,
        "run": index,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


async def fault_run(
    reactor: Any, case: str, pairing: Pairing, ping: float | None, cap: float, index: int
) -> dict[str, Any]:
    """
    One ``blackhole`` or ``address`` run (see the module docstring). The fault is about the
    direct path: a run whose link started on the relay (a stock Leader takes whichever
    connection completes first, and it dials the relay at once) is started again, up to
    ``START_ATTEMPTS`` times; the record says how many it took.
    """
    attempts = 0
    while True:
        attempts += 1
        record = await _fault_attempt(reactor, case, pairing, ping, cap, index)
        if record.get("path_before") == "direct" or "error" in record:
            break
        if attempts == START_ATTEMPTS:
            break
        log(f"the link started on {record.get('path_before')}: again")
    return record | {"attempts": attempts}


def current_path(pair: PeerPair) -> str:
    """The path of both peers' current links (``direct``, ``relay``, or ``mixed``)."""
    paths = {path_of(connections(p)[-1]["hint_description"]) for p in pair.results}
    return paths.pop() if len(paths) == 1 else "mixed"


def last_path(peers: Sequence[PeerResult], after: float) -> str | None:
    """The path of the last link any of ``peers`` reported after time ``after`` (the last
    one: a stock peer reports its old link again when the generation changes)."""
    found = [e for p in peers for e in connections(p) if e["t"] > after]
    return path_of(max(found, key=lambda e: e["t"])["hint_description"]) if found else None


async def _fault_attempt(
    reactor: Any, case: str, pairing: Pairing, ping: float | None, cap: float, index: int
) -> dict[str, Any]:
    record = _base(case, pairing, ping, index) | {"cap": cap}
    with ExitStack() as stack:
        scene = build_scene(stack)
        pair, started = await _start_stream(reactor, scene, pairing, ping, cap)
        try:
            if started is None:
                return record | {"error": "records never flowed"}
            await sleep(reactor, STEADY)
            record["path_before"] = current_path(pair)
            if record["path_before"] != "direct":
                return record
            if case == "blackhole":
                scene.net.blackhole(scene.a, scene.b)
            else:
                scene.a.change_address()
            fault_at = time.time()  # from now on nothing passes the old path
            pair.send("right", {"command": "fault", "t": fault_at})
            resumed = await within(reactor, pair.when("right", "stream-resumed"), cap)
            if resumed is not None:
                await sleep(reactor, 2.0)
            report = await _finish_stream(reactor, pair, sender_first=resumed is not None)
        finally:
            await settle(pair)
    sender, receiver = pair.results
    return record | {
        "recovered": resumed is not None,
        "gap": report.get("gap_after_fault") if resumed is not None else None,
        "resumed_after": report.get("resumed_after_fault"),
        "exactly_once": report.get("exactly_once_in_order"),
        "records": report.get("records"),
        "duplicates": report.get("duplicates"),
        "missing": report.get("missing"),
        "sender_noticed": _since(noticed_at(sender, fault_at), fault_at),
        "receiver_noticed": _since(noticed_at(receiver, fault_at), fault_at),
        "path_after": last_path([receiver, sender], fault_at) if resumed is not None else None,
    }


def _since(t: float | None, origin: float) -> float | None:
    return None if t is None else round(t - origin, 3)


async def idle_run(
    reactor: Any, pairing: Pairing, ping: float | None, cap: float, index: int
) -> dict[str, Any]:
    """One ``idle`` run: one record, then the direct path black-holed; when each side notices."""
    record = _base("idle", pairing, ping, index) | {"cap": cap}
    with ExitStack() as stack:
        scene = build_scene(stack)
        pair, started = await _start_stream(reactor, scene, pairing, ping, cap, interval=3600.0)
        try:
            if started is None:
                return record | {"error": "the first record never came"}
            await sleep(reactor, STEADY)
            record["path_before"] = current_path(pair)
            scene.net.blackhole(scene.a, scene.b)
            fault_at = time.time()
            ends = fault_at + cap
            while time.time() < ends and not all(noticed_at(p, fault_at) for p in pair.results):
                await sleep(reactor, 0.2)
        finally:
            await settle(pair)
    sender, receiver = pair.results
    leader, follower = (sender, receiver) if pairing.leader == "sender" else (receiver, sender)
    return record | {
        "leader_noticed": _since(noticed_at(leader, fault_at), fault_at),
        "follower_noticed": _since(noticed_at(follower, fault_at), fault_at),
    }


async def slow_run(
    reactor: Any,
    pairing: Pairing,
    index: int,
    watch: float = SLOW_WATCH,
    case: str = "slow",
) -> dict[str, Any]:
    """One ``slow`` run: 2 s of delay on what host ``a`` sends, ``watch`` s of streaming; or,
    ``case="jitter"``, the soak: :data:`SOAK_SHAPE` both ways for ``watch`` s
    (``case="lossy"``: :data:`LOSSY_SHAPE`)."""
    shapes = {"slow": (Shape(SLOW_DELAY), None), "jitter": (SOAK_SHAPE, SOAK_SHAPE)}
    up, down = shapes.get(case, (LOSSY_SHAPE, LOSSY_SHAPE))
    record = _base(case, pairing, None, index) | {
        "delay": up.delay,
        "jitter": up.jitter,
        "loss": up.loss,
        "watch": watch,
    }
    with ExitStack() as stack:
        scene = build_scene(stack)
        pair, started = await _start_stream(reactor, scene, pairing, None, watch + 60)
        try:
            if started is None:
                return record | {"error": "records never flowed"}
            await sleep(reactor, STEADY)
            record["path_before"] = current_path(pair)
            impairment = scene.net.impair(scene.a, up=up, down=down)
            slowed_at = time.time()
            await sleep(reactor, watch)
            counts = [reconnections(p, slowed_at) for p in pair.results]
            moved = [moves(p, slowed_at) for p in pair.results]
            report = await _finish_stream(reactor, pair, sender_first=True)
            record["backend"] = impairment.backend
        finally:
            await settle(pair)
    return record | {
        "sender_reconnections": counts[0],
        "receiver_reconnections": counts[1],
        "sender_moves": moved[0],
        "receiver_moves": moved[1],
        "exactly_once": report.get("exactly_once_in_order"),
        "max_gap": report.get("max_gap"),
        "max_latency": report.get("max_latency"),
    }


async def stall_run(
    reactor: Any, pairing: Pairing, index: int, stall: float = 60.0, size: int = STALL_TOTAL
) -> dict[str, Any]:
    """One ``stall`` run: a receiver that reads nothing for ``stall`` s under a bulk send."""
    record = _base("stall", pairing, None, index) | {"stall": stall, "total": size}
    total = ["--total", str(size), "--chunk", "65536"]
    sender = peer_args(pairing.sender, pairing.leader == "sender", "bulk-send", *total)
    receiver = peer_args(pairing.receiver, pairing.leader == "receiver", "bulk-recv", *total)
    receiver += ["--read-stall", str(stall), "--linger", "0.5"]
    with ExitStack() as stack:
        scene = build_scene(stack)
        pair = start_pair(reactor, scene, sender, receiver, timeout=stall + 120)
        try:
            await within(reactor, pair.when("right", "dilated"), 60)
            await within(reactor, pair.when("left", "dilated"), 10)
            await sleep(reactor, 1.0)  # both report ConnectedPeer first
            started = time.time()
            done = await within(reactor, pair.when("right", "result"), stall + 90)
            await within(reactor, pair.when("left", "result"), 20)
        finally:
            await settle(pair)
    sent, got = pair.results
    return record | {
        "completed": done is not None,
        "same_bytes": bool(got.result) and got.result.get("sha256") == sent.result.get("sha256"),
        "sender_reconnections": _drops(sent, started),
        "receiver_reconnections": _drops(got, started),
    }


def _drops(peer: PeerResult, after: float) -> int:
    """How many times ``peer`` left ``ConnectedPeer`` after ``after``, other than to stop.

    Leaving it for a state that is followed straight by ``StoppedPeer`` is the session's end
    (the link closed a moment before the peer's ``closing`` arrived through the mailbox: no
    new generation was made), not a reconnection."""
    events = [e for e in status_events(peer) if e.get("t", 0.0) > after]
    states = ["ConnectedPeer", *(str(e.get("peer")) for e in events), None]
    return sum(
        1
        for a, b, c in zip(states, states[1:], states[2:], strict=False)
        if a == "ConnectedPeer" and b not in (a, _STOPPED) and c != _STOPPED
    )


def stall_table(records: list[dict[str, Any]]) -> str:
    """The ``stall`` table: needless reconnections while the receiver does not read."""
    rows = []
    for (key, _), runs in _groups(records, "stall").items():
        total = [
            r.get("sender_reconnections", 0) + r.get("receiver_reconnections", 0) for r in runs
        ]
        rows.append(
            [
                PAIRINGS[key].label,
                f"{runs[0].get('stall', 0):g} s",
                str(len(runs)),
                f"{sum(1 for t in total if t)}/{len(runs)}",
                str(sum(total)),
                _count(runs, "same_bytes"),
            ]
        )
    header = ["pairing", "receiver not reading for", "runs", "runs with a reconnection"]
    return markdown_table([*header, "link drops (both sides)", "all bytes, same SHA-256"], rows)


async def flood_run(
    reactor: Any,
    pairing: Pairing,
    count: int,
    spread: float,
    index: int,
    max_unauthenticated: int | None = None,
) -> dict[str, Any]:
    """
    One ``flood`` run. The real peer (``b``, ``--no-listen``, no relay) can only come in
    through ``a``'s listener; its packets to ``a`` are dropped at first. Flood 1 hits the
    listener while the real peer is held back, so nothing else closes connections meanwhile
    (selecting a connection stops the listener and closes the other candidates); then flood 2
    starts and the real peer is let through (it comes back at its next SYN retry).
    """
    record = _base("flood", pairing, None, index) | {"count": count, "within": spread}
    if max_unauthenticated is not None:
        record["max_unauthenticated"] = max_unauthenticated
    with ExitStack() as stack:
        scene = build_scene(stack, hosts=["c"])
        attacker = scene.extra["c"]
        hole = scene.net.blackhole(scene.a, scene.b)
        server = peer_args("txdilation", True, "echo-server", "--listen-port", str(FLOOD_PORT))
        if max_unauthenticated is not None:
            server += ["--max-unauthenticated", str(max_unauthenticated)]
        client = peer_args("txdilation", False, "echo-client", "--no-listen")
        pair = start_pair(reactor, scene, server, client, timeout=150)
        try:
            deadline = time.time() + 60
            while not scene.a.listening(FLOOD_PORT) and time.time() < deadline:
                await sleep(reactor, 0.1)
            probe = [sys.executable, "-m", "tests.support.probe", "flood", scene.a.address]
            probe += [str(FLOOD_PORT), "--count", str(count), "--within", str(spread)]
            alone = await _flood(attacker.popen(probe, stdout=subprocess.PIPE))
            second = attacker.popen(probe, stdout=subprocess.PIPE)
            await sleep(reactor, 0.3)
            hole.remove()
            released_at = time.time()
            dilated = await within(reactor, pair.when("right", "dilated"), 40)
            with_peer = await _flood(second)
            if dilated is not None:
                await within(reactor, pair.when("right", "result"), 30)
        finally:
            await settle(pair)
    return record | {
        "flood": alone,
        "flood_with_peer": with_peer,
        "real_peer_in": dilated is not None,
        "real_peer_after": _since(dilated["t"], released_at) if dilated else None,
    }


async def _flood(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The report of a ``tests.support.probe flood`` process (it ends by itself)."""
    out, _ = await threads.deferToThread(process.communicate, None, 60)
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------------------------------
# tables


def _never(record: dict[str, Any]) -> str:
    return f"no recovery within {record.get('cap', 0):.0f} s"


def _count(records: list[dict[str, Any]], key: str) -> str:
    return f"{sum(1 for r in records if r.get(key))}/{len(records)}"


def _ping_label(ping: float | None) -> str:
    return "30 s (default)" if ping is None else f"{ping:g} s"


def _groups(
    records: list[dict[str, Any]], case: str
) -> dict[tuple[str, Any], list[dict[str, Any]]]:
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in records:
        if r["case"] == case:
            groups.setdefault((r["pairing"], r.get("ping")), []).append(r)
    return groups


def _runs_cell(good: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    """How many runs count, and why the others do not."""
    failed = sum(1 for r in runs if "error" in r)
    relayed = sum(1 for r in runs if "error" not in r and r.get("path_before") != "direct")
    restarts = sum(r.get("attempts", 1) - 1 for r in good)
    notes = [f"{failed} failed"] if failed else []
    if relayed or restarts:
        notes.append(f"{relayed + restarts} started on the relay, run again")
    return f"{len(good)}" + (f" ({'; '.join(notes)})" if notes else "")


def fault_table(records: list[dict[str, Any]], case: str) -> str:
    """The ``blackhole``/``address`` table: gaps, recoveries, exactly-once, who noticed."""
    rows = []
    for (key, ping), runs in _groups(records, case).items():
        good = [r for r in runs if "error" not in r and r.get("path_before") == "direct"]
        median, worst = median_and_worst([r.get("gap") for r in good])
        never = _never(good[0]) if good else "—"
        noticed = [
            seconds_text(median_and_worst([r.get(k) for r in good])[0], "never")
            for k in ("sender_noticed", "receiver_noticed")
        ]
        paths = sorted({str(r.get("path_after")) for r in good if r.get("recovered")})
        rows.append(
            [
                PAIRINGS[key].label,
                _ping_label(ping),
                _runs_cell(good, runs),
                _count(good, "recovered"),
                seconds_text(median, never),
                seconds_text(worst, never),
                " / ".join(noticed),
                ", ".join(paths) or "—",
                _count(good, "exactly_once"),
            ]
        )
    header = ["pairing", "ping interval", "runs", "recovered", "median gap", "worst gap"]
    header += ["noticed (sender / receiver, median)", "path after", "exactly once, in order"]
    return markdown_table(header, rows)


def idle_table(records: list[dict[str, Any]]) -> str:
    """The ``idle`` table: when the Leader and the Follower noticed the dead link."""
    rows = []
    for (key, ping), runs in _groups(records, "idle").items():
        cells = [PAIRINGS[key].label, _ping_label(ping), str(len(runs))]
        for k in ("leader_noticed", "follower_noticed"):
            median, worst = median_and_worst([r.get(k) for r in runs])
            never = f"not within {runs[0].get('cap', 0):.0f} s"
            cells.append(f"{seconds_text(median, never)} / {seconds_text(worst, never)}")
        rows.append(cells)
    header = ["pairing", "ping interval", "runs", "Leader noticed (median / worst)"]
    return markdown_table([*header, "Follower noticed (median / worst)"], rows)


def slow_table(records: list[dict[str, Any]], case: str = "slow") -> str:
    """The ``slow`` (or ``jitter``) table: needless reconnections on a slow, live link."""
    rows = []
    for (key, _), runs in _groups(records, case).items():
        total = [
            r.get("sender_reconnections", 0) + r.get("receiver_reconnections", 0) for r in runs
        ]
        gaps = [r["max_gap"] for r in runs if r.get("max_gap") is not None]
        rows.append(
            [
                PAIRINGS[key].label,
                str(len(runs)),
                f"{sum(1 for t in total if t)}/{len(runs)}",
                str(sum(total)),
                str(sum(r.get("sender_moves", 0) + r.get("receiver_moves", 0) for r in runs)),
                seconds_text(statistics.median(gaps) if gaps else None, ""),
                _count(runs, "exactly_once"),
                ", ".join(sorted({str(r.get("backend")) for r in runs})),
            ]
        )
    header = ["pairing", "runs", "runs with a reconnection", "link drops (both sides)"]
    header += ["link moves (both sides)", "median largest gap", "exactly once, in order"]
    header += ["delay by"]
    return markdown_table(header, rows)


def flood_table(records: list[dict[str, Any]]) -> str:
    """The ``flood`` table, one row per run: the listener alone, then with the real peer."""
    rows = []
    for r in (r for r in records if r["case"] == "flood"):
        alone, second = r["flood"], r["flood_with_peer"]
        rows.append(
            [
                str(r["run"] + 1),
                f"{alone['attempted']}, {r.get('within', 1.0):g} s"
                + (f", cap {r['max_unauthenticated']}" if "max_unauthenticated" in r else ""),
                str(alone["refused"] + alone["errors"]),
                str(alone["never_connected"]),
                str(alone["slow_connects"]),
                f"{alone['garbage']['open_after_watch']}/{alone['garbage']['connected']}",
                f"{alone['idle']['open_after_watch']}/{alone['idle']['connected']}",
                str(second["refused"] + second["errors"] + second["never_connected"]),
                ("yes, " + seconds_text(r["real_peer_after"], "")) if r["real_peer_in"] else "no",
            ]
        )
    header = [
        "run",
        "connections, within",
        "refused",
        "never accepted",
        "accepted after a SYN retry",
    ]
    header += ["garbage ones open after 5 s", "idle ones open after 5 s"]
    header += ["flood 2: refused or never accepted", "real peer got in (after release)"]
    return markdown_table(header, rows)


def report(records: list[dict[str, Any]]) -> str:
    """Every table there are records for (records of other benchmarks are ignored)."""
    records = [r for r in records if "case" in r]
    parts = []
    titles = {
        "blackhole": "Path black-holed while data flows",
        "address": "Sending host changes address",
    }
    for case, title in titles.items():
        if any(r["case"] == case for r in records):
            parts.append(f"### {title}\n\n{fault_table(records, case)}")
    for case, title, table in (
        ("idle", "Idle link dies", idle_table),
        ("slow", f"Slow but alive link ({SLOW_DELAY:g} s delay)", slow_table),
        (
            "jitter",
            f"Jittery link soak ({SOAK_SHAPE.delay * 1000:g} +/- {SOAK_SHAPE.jitter * 1000:g} ms"
            " each way)",
            lambda rs: slow_table(rs, "jitter"),
        ),
        (
            "lossy",
            f"Lossy, jittery link soak ({LOSSY_SHAPE.delay * 1000:g} +/- "
            f"{LOSSY_SHAPE.jitter * 1000:g} ms, {LOSSY_SHAPE.loss:.0%} lost, each way)",
            lambda rs: slow_table(rs, "lossy"),
        ),
        ("stall", "Receiver not reading", stall_table),
        ("flood", "Connection flood at the listener", flood_table),
    ):
        if any(r["case"] == case for r in records):
            parts.append(f"### {title}\n\n{table(records)}")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# main


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__)
    p.add_argument("--cases", default="blackhole,address,idle,slow,flood")
    p.add_argument("--pairings", default="", help="comma-separated keys (default: per case)")
    p.add_argument("--pings", default="30,5", help="ping intervals for blackhole and idle")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cap", type=float, default=None, help="seconds to wait for a recovery")
    p.add_argument("--address-cap", type=float, default=180.0)
    p.add_argument("--stall", type=float, default=60.0, help="stall: seconds not reading")
    p.add_argument("--soak", type=float, default=1800.0, help="jitter: seconds of the soak")
    p.add_argument("--flood-count", type=int, default=500)
    p.add_argument("--flood-within", type=float, default=1.0, help="seconds to open them in")
    p.add_argument(
        "--flood-cap",
        type=int,
        default=None,
        help="the listener's TXDILATION_MAX_UNAUTHENTICATED (default: the library's)",
    )
    p.add_argument("--json", default=None, help="append every run's record to this file")
    p.add_argument("--report", nargs="*", default=None, help="print tables from --json files")
    return p.parse_args(argv)


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the requested cases; the run records."""
    records: list[dict[str, Any]] = []
    pings = [float(p) for p in args.pings.split(",") if p]
    for case in args.cases.split(","):
        keys = args.pairings.split(",") if args.pairings else CASE_PAIRINGS[case]
        for key in keys:
            pairing = PAIRINGS[key]
            for ping in pings if case in ("blackhole", "idle") else [30.0]:
                cap = args.cap or DEFAULT_CAP.get(ping, 120.0)
                for index in range(args.runs):
                    log(f"{case} {key} ping={ping:g} run {index + 1}/{args.runs}")
                    label = None if ping == 30.0 else ping  # None: the default interval
                    if case in ("blackhole", "address"):
                        c = cap if case == "blackhole" else args.address_cap
                        record = await fault_run(reactor, case, pairing, label, c, index)
                    elif case == "idle":
                        record = await idle_run(reactor, pairing, label, cap, index)
                    elif case == "slow":
                        record = await slow_run(reactor, pairing, index)
                    elif case in ("jitter", "lossy"):
                        record = await slow_run(reactor, pairing, index, args.soak, case)
                    elif case == "stall":
                        record = await stall_run(reactor, pairing, index, args.stall)
                    else:
                        record = await flood_run(
                            reactor,
                            pairing,
                            args.flood_count,
                            args.flood_within,
                            index,
                            args.flood_cap,
                        )
                    keep(record, "benchmarks.recovery", args.json, records)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, or with ``--report`` print earlier measurements."""
    return script_main(parse(argv), measure, report)


if __name__ == "__main__":
    sys.exit(main())
