"""
How a relayed link moves to a direct path, measured in Linux network namespaces (issue 19):
``python -m benchmarks.upgrade [--pairings ...] [--runs N] [--json PATH]`` (root).

Layer: benchmark infrastructure; prints figures, asserts nothing (``tests/test_upgrade.py``
asserts on the same runs). Every run builds its own topology (``benchmarks.namespaced``: hosts
``a`` and ``b`` routed to each other, the real mailbox server and transit relay on a third
network) and removes it afterwards. The direct path between ``a`` and ``b`` is black-holed
before the peers start, so the link starts on the relay; the sender (host ``a``) streams a
1 KiB record every 10 ms to the receiver (host ``b``, ``tests.support.peer_stream``). After
``--steady`` seconds of records over the relay the black hole is removed, and the run waits
until both peers report a direct link (at most ``--cap`` seconds), streams 2 s more and
stops. Each run reports:

- ``path_before``: both peers' path before the unblock (``relay`` expected);
- ``moved_after``: seconds from the unblock to the later of the two peers' direct
  ``ConnectedPeer`` (``None``: not within the cap);
- ``gap``: the largest delivery gap at the receiver from the unblock to the end (records are
  written every 10 ms, so about 10 ms means no gap at all);
- ``exactly_once``, ``duplicates``, ``missing``: every record arrived once, in order;
- ``generations``: how many new generations the move took (0 for a move within the
  generation, as two txdilation peers do; 1 with a stock peer, which cannot move a link:
  the txdilation Leader starts a new generation once a direct path proved to work).

``--report FILE...`` prints the tables of earlier ``--json`` files instead of running.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from tests.support.harness import PeerPair
from tests.support.peers import connections, path_of

from benchmarks.namespaced import (
    build_scene,
    keep,
    log,
    markdown_table,
    median_and_worst,
    script_main,
    seconds_text,
    settle,
    sleep,
)
from benchmarks.recovery import (
    PAIRINGS,
    Pairing,
    _base,
    _finish_stream,
    _start_stream,
    current_path,
)

STEADY = 3.0
DEFAULT_CAP = 30.0
DEFAULT_PAIRINGS = (
    "tx-tx-sender-leads",
    "tx-tx-receiver-leads",
    "tx-leads-stock-receiver",
    "tx-leads-stock-sender",
)


def _direct_since(pair: PeerPair, t: float) -> float | None:
    """When both peers' latest links (reported after ``t``) became direct, or None."""
    times = []
    for peer in pair.results:
        events = [e for e in connections(peer) if e["t"] > t]
        if not events or path_of(events[-1]["hint_description"]) != "direct":
            return None
        times.append(events[-1]["t"])
    return max(times)


async def upgrade_run(
    reactor: Any, pairing: Pairing, index: int, *, steady: float = STEADY, cap: float = DEFAULT_CAP
) -> dict[str, Any]:
    """One run (see the module docstring); its record."""
    record = _base("upgrade", pairing, None, index) | {"cap": cap}
    with ExitStack() as stack:
        scene = build_scene(stack)
        hole = scene.net.blackhole(scene.a, scene.b)
        pair, started = await _start_stream(reactor, scene, pairing, None, cap + steady)
        try:
            if started is None:
                return record | {"error": "records never flowed"}
            await sleep(reactor, steady)
            record["path_before"] = current_path(pair)
            generations_before = _generations(pair)
            unblocked_at = time.time()  # from about now on, packets pass again
            hole.remove()
            pair.send("right", {"command": "fault", "t": unblocked_at})
            moved_at = None
            ends = unblocked_at + cap
            while time.time() < ends:
                moved_at = _direct_since(pair, unblocked_at - steady)
                if moved_at is not None:
                    break
                await sleep(reactor, 0.1)
            await sleep(reactor, 2.0)
            report = await _finish_stream(reactor, pair, sender_first=True)
            generations = min(
                after - before
                for after, before in zip(_generations(pair), generations_before, strict=True)
            )
        finally:
            await settle(pair)
    return record | {
        "moved_after": None if moved_at is None else round(moved_at - unblocked_at, 3),
        "path_after": current_path(pair) if moved_at is not None else None,
        "gap": report.get("gap_after_fault"),
        "exactly_once": report.get("exactly_once_in_order"),
        "records": report.get("records"),
        "duplicates": report.get("duplicates"),
        "missing": report.get("missing"),
        "generations": generations,
    }


def _generations(pair: PeerPair) -> list[int]:
    """The highest generation each peer reported so far. (The move's count is the smaller
    increase: stock's status numbers its generations its own way, 0 then 5 for one new
    generation of the txdilation peer's 1 then 2.)"""
    return [max((e.get("generation", 0) for e in connections(p)), default=0) for p in pair.results]


async def measure(reactor: Any, args: Any) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for key in args.pairings:
        for index in range(args.runs):
            log(f"upgrade {key} run {index + 1}/{args.runs}")
            record = await upgrade_run(reactor, PAIRINGS[key], index, cap=args.cap)
            keep(record, "benchmarks.upgrade", args.json, records)
    return records


def render(records: list[dict[str, Any]]) -> str:
    """The table: pairing -> runs, moved, median/worst time to move, worst gap, exactly once."""
    rows = []
    for key in dict.fromkeys(r["pairing"] for r in records):
        runs = [r for r in records if r["pairing"] == key and "error" not in r]
        moved = [r["moved_after"] for r in runs]
        median, worst = median_and_worst(moved)
        gaps = [r["gap"] for r in runs if r.get("gap") is not None]
        rows.append(
            [
                PAIRINGS[key].label,
                str(len(runs)),
                str(sum(1 for m in moved if m is not None)),
                seconds_text(median, "never"),
                seconds_text(worst, "never"),
                f"{1000 * max(gaps):.0f} ms" if gaps else "-",
                str(sum(1 for r in runs if r.get("exactly_once"))),
                str(max((r.get("generations", 0) for r in runs), default=0)),
            ]
        )
    header = [
        "pairing",
        "runs",
        "moved",
        "median unblock -> direct",
        "worst",
        "worst gap",
        "exactly once",
        "new generations",
    ]
    return markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.upgrade", description=__doc__)
    p.add_argument("--pairings", type=lambda s: s.split(","), default=list(DEFAULT_PAIRINGS))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cap", type=float, default=DEFAULT_CAP)
    p.add_argument("--json", default=None)
    p.add_argument("--report", nargs="+", default=None)
    args = p.parse_args(argv)
    return script_main(args, measure, render)


if __name__ == "__main__":
    raise SystemExit(main())
