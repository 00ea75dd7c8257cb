"""Restart to first forwarded byte: paired sessions (``--pairing``) after SIGKILL, side by side
with what an unpaired session needs (a new code, here handed over instantly):
``python -m benchmarks.pairing [--restarts 10] [--squatted 5] [--leak-restarts 100] [--json PATH]``.

Layer: benchmark (not shipped). A real mailbox server and transit relay run in this process on
127.0.0.1; every session is a ``txdilation run`` process (``txdilation.session.child``). Side A
listens (``--listen echo=tcp:0``), side B connects each ``echo`` subchannel to an echo service
in this process. A client connects to A's port, sends 32 bytes and half-closes, again every
20 ms until the bytes come back; the figure is the time from spawning the restarted process
(the second one, when both restarted) to the first echo. Cases:

- ``A``: A killed with SIGKILL and started again (``--restarts`` times);
- ``B``: the same with B;
- ``both B,A`` / ``both A,B``: both killed, the mailbox server's unattended mailboxes pruned
  (as after an hour), one started, ``--gap`` seconds later the other;
- ``squatted A``: as ``A``, with a squatter (``--squatted`` runs) that takes a rendezvous id
  and its sides from the mailbox server's channel database, closes it as those sides and
  crowds it, just before A is killed and again right after it is started;
- ``unpaired``: what a session without a pairing needs after a restart: a new code; both
  sides started with it (no human delay), measured from the second spawn.

``--leak-restarts N`` then restarts A N times and reports B's resident memory and open file
descriptors after the first 10 and after all N (growth per restart). Every run records the
1-minute load average and the other processes' CPU (``benchmarks.run.LoadProbe``): on a
shared machine compare medians of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.session.lobby_attacks import lobby_ids, squat  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.endpoints import (  # noqa: E402
    TCP4ClientEndpoint,
    TCP4ServerEndpoint,
    connectProtocol,
)
from twisted.internet.interfaces import IHalfCloseableProtocol  # noqa: E402
from twisted.internet.protocol import Factory, Protocol  # noqa: E402
from twisted.internet.task import deferLater  # noqa: E402
from zope.interface import implementer  # noqa: E402

from benchmarks.run import LoadProbe, child_environment  # noqa: E402
from txdilation.session.child import SessionProcess, run_command, spawn_session  # noqa: E402

LOOPBACK = "127.0.0.1"
APPID = "txdilation.benchmark/pairing"
PAYLOAD = b"restart-to-first-forwarded-byte!"


@implementer(IHalfCloseableProtocol)
class _Echo(Protocol):
    """Echoes; closes its write side once its input ended (and what it echoed was sent)."""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)

    def readConnectionLost(self) -> None:
        self.transport.loseWriteConnection()

    def writeConnectionLost(self) -> None:
        self.transport.loseConnection()


class _Client(Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.done: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: object = None) -> None:
        if not self.done.called:
            self.done.callback(self.data)


class Bench:
    """The servers, the echo service and the sessions of one benchmark run."""

    def __init__(self, reactor: Any, args: argparse.Namespace) -> None:
        self.reactor = reactor
        self.args = args
        self.directory = Path(tempfile.mkdtemp(prefix="txdilation-pairing-bench-"))
        self.processes: list[SessionProcess] = []
        self.env = child_environment()

    async def start(self) -> None:
        from txdilation.testing.servers import start_mailbox_server, start_transit_relay

        self.mailbox = await start_mailbox_server(self.reactor)
        self.relay = await start_transit_relay(self.reactor)
        factory = Factory.forProtocol(_Echo)
        port = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(factory)
        self.echo_port = port.getHost().port
        self._echo_listener = port

    async def stop(self) -> None:
        for process in self.processes:
            await process.terminate(self.reactor, 10.0)
        await self._echo_listener.stopListening()
        await self.mailbox.stop()
        await self.relay.stop()

    def spawn(self, name: str, *extra: str, pairing: Path | None = None) -> SessionProcess:
        forward = (
            ["--listen", f"echo=tcp:0:interface={LOOPBACK}"]
            if name.startswith("A")
            else ["--connect", f"echo=tcp:{LOOPBACK}:{self.echo_port}"]
        )
        argv = [
            *run_command(), "--mailbox", self.mailbox.url, "--appid", APPID,
            "--relay", self.relay.hint, "--status", "-", *forward, *extra,
        ]  # fmt: skip
        if pairing is not None:
            argv += ["--pairing", str(pairing)]
        process = spawn_session(self.reactor, name, argv, env=self.env)
        self.processes.append(process)
        return process

    async def kill(self, process: SessionProcess) -> None:
        process.signal("KILL")
        await process.ended
        self.processes.remove(process)

    def phases(self, process: SessionProcess, spawned_at: float) -> dict[str, float]:
        """Seconds from the spawn (wall clock) to the process's first events of a few kinds."""
        out: dict[str, float] = {}
        for kind in ("starting", "waiting", "meeting", "reconnected", "dilated"):
            events = process.of_kind(kind)
            if events:
                out[kind] = round(events[0]["ts"] - spawned_at, 3)
        return out

    async def first_echo(self, a: SessionProcess, since: float) -> float:
        """Seconds from ``since`` to the first echo through A's port."""
        listening = await a.next_event("listening", lambda e: e["name"] == "echo")
        port = int(listening["address"].rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            client = _Client()
            try:
                await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), client)
            except Exception:
                await deferLater(self.reactor, 0.02, lambda: None)
                continue
            client.transport.write(PAYLOAD)
            client.transport.loseWriteConnection()
            client.done.addTimeout(10, self.reactor)
            data = await client.done
            if data == PAYLOAD:
                return time.monotonic() - since
            await deferLater(self.reactor, 0.02, lambda: None)
        raise RuntimeError(f"no echo through A within 60 s\n{a.tail()}")

    async def pair(self) -> tuple[SessionProcess, SessionProcess]:
        paths = self.paths = {n: self.directory / f"{n}-{time.time_ns()}.pairing" for n in "AB"}
        a = self.spawn("A", "--allocate-code", pairing=paths["A"])
        code = (await a.next_event("code"))["code"]
        b = self.spawn("B", "--code", code, pairing=paths["B"])
        await a.next_event("paired")
        await b.next_event("paired")
        await self.first_echo(a, time.monotonic())
        return a, b

    async def rendezvous(self) -> tuple[str, list[str]]:
        """A rendezvous of A's current generation with both sides, as the database shows it."""
        for _ in range(200):
            both = [
                (k, v) for k, v in lobby_ids(self.mailbox, self.paths["A"]).items() if len(v) == 2
            ]
            if both:
                return both[0]
            await deferLater(self.reactor, 0.05, lambda: None)
        raise RuntimeError("no rendezvous in the channel database")

    def prune(self) -> None:
        now = time.time()
        self.mailbox.server.prune_all_apps(now=now, old=now + 1)


def _memory(pid: int | None) -> tuple[int, int]:
    """(resident KiB, open file descriptors) of ``pid``."""
    if pid is None:
        return (0, 0)
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def measure(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    bench = Bench(reactor, args)
    await bench.start()
    records: list[dict[str, Any]] = []

    def keep(case: str, seconds: float, probe: LoadProbe, **extra: Any) -> None:
        record = {"case": case, "seconds": round(seconds, 3), **probe.as_dict(), **extra}
        records.append(record)
        print(json.dumps(record), file=sys.stderr, flush=True)

    try:
        a, b = await bench.pair()
        for number in range(args.restarts):
            for name in "AB":
                victim = a if name == "A" else b
                with LoadProbe([]) as probe:
                    await bench.kill(victim)
                    started, wall = time.monotonic(), time.time()
                    restarted = bench.spawn(name, pairing=bench.paths[name])
                    if name == "A":
                        a = restarted
                    else:
                        b = restarted
                    seconds = await bench.first_echo(a, started)
                keep(name, seconds, probe, run=number, phases=bench.phases(restarted, wall))
        for number in range(args.squatted):
            with LoadProbe([]) as probe:
                lobby, sides = await bench.rendezvous()
                await squat(reactor, bench.mailbox, APPID, lobby, sides)
                await bench.kill(a)
                started, wall = time.monotonic(), time.time()
                a = bench.spawn("A", pairing=bench.paths["A"])
                await squat(reactor, bench.mailbox, APPID, lobby, sides)
                seconds = await bench.first_echo(a, started)
            keep("squatted A", seconds, probe, run=number, phases=bench.phases(a, wall))
        for order in (("B", "A"), ("A", "B")):
            for number in range(max(1, args.restarts // 2)):
                with LoadProbe([]) as probe:
                    await bench.kill(a)
                    await bench.kill(b)
                    bench.prune()
                    started_at = {order[0]: bench.spawn(order[0], pairing=bench.paths[order[0]])}
                    await deferLater(reactor, args.gap, lambda: None)
                    started, wall = time.monotonic(), time.time()
                    second = started_at[order[1]] = bench.spawn(
                        order[1], pairing=bench.paths[order[1]]
                    )
                    a, b = started_at["A"], started_at["B"]
                    seconds = await bench.first_echo(a, started)
                keep(
                    f"both {','.join(order)}",
                    seconds,
                    probe,
                    run=number,
                    gap_s=args.gap,
                    phases=bench.phases(second, wall),
                )
        await bench.kill(a)
        await bench.kill(b)
        for number in range(max(1, args.restarts // 2)):
            with LoadProbe([]) as probe:
                code = f"{number + 10}-bench-unpaired"
                b = bench.spawn("B-unpaired", "--code", code)
                await b.next_event("mailbox", lambda e: e["state"] == "connected")
                started, wall = time.monotonic(), time.time()
                a = bench.spawn("A-unpaired", "--code", code)
                seconds = await bench.first_echo(a, started)
            keep("unpaired", seconds, probe, run=number, phases=bench.phases(a, wall))
            await bench.kill(a)
            await bench.kill(b)
        if args.leak_restarts:
            records.append(await leak_check(bench, args.leak_restarts))
    finally:
        await bench.stop()
    return records


async def leak_check(bench: Bench, restarts: int) -> dict[str, Any]:
    """Restart A ``restarts`` times; B's memory and descriptors after 10 and after all."""
    a, b = await bench.pair()
    samples: dict[int, tuple[int, int]] = {}
    with LoadProbe([]) as probe:
        for number in range(1, restarts + 1):
            await bench.kill(a)
            a = bench.spawn("A", pairing=bench.paths["A"])
            await bench.first_echo(a, time.monotonic())
            if number in (10, restarts):
                await deferLater(bench.reactor, 2.0, lambda: None)  # old meetings closed
                samples[number] = _memory(b.pid)
    (rss10, fds10), (rss, fds) = samples[10], samples[restarts]
    record = {
        "case": "leak",
        "restarts": restarts,
        "rss_kib_at_10": rss10,
        "rss_kib_at_end": rss,
        "fds_at_10": fds10,
        "fds_at_end": fds,
        "rss_kib_per_restart": round((rss - rss10) / max(1, restarts - 10), 1),
        **probe.as_dict(),
    }
    print(json.dumps(record), file=sys.stderr, flush=True)
    return record


def report(records: list[dict[str, Any]]) -> str:
    lines = [
        "restart to first forwarded byte (seconds; txdilation run, loopback, real mailbox "
        "server and relay); 'after start': from the session's 'starting' event (Python's "
        "imports done) to that byte",
        f"{'case':<12} {'runs':>4} {'median':>8} {'worst':>8} {'after start':>12} "
        f"{'(worst)':>8}   load (1-min avg, other cores)",
    ]
    cases: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["case"] != "leak":
            cases.setdefault(record["case"], []).append(record)
    for case, runs in cases.items():
        seconds = [r["seconds"] for r in runs]
        after = [
            r["seconds"] - r["phases"]["starting"]
            for r in runs
            if "starting" in r.get("phases", {})
        ]
        loads = [r["loadavg1"] for r in runs]
        cores = [r["other_cores"] for r in runs]
        started = f"{statistics.median(after):>12.3f} {max(after):>8.3f}" if after else f"{'':>21}"
        lines.append(
            f"{case:<12} {len(runs):>4} {statistics.median(seconds):>8.3f} {max(seconds):>8.3f} "
            f"{started}   {statistics.median(loads):.1f}, {statistics.median(cores):.2f}"
        )
    for record in records:
        if record["case"] == "leak":
            lines.append(
                f"leak check: {record['restarts']} restarts of A; B's RSS "
                f"{record['rss_kib_at_10']} KiB after 10, {record['rss_kib_at_end']} KiB after "
                f"all ({record['rss_kib_per_restart']} KiB per restart); open fds "
                f"{record['fds_at_10']} -> {record['fds_at_end']}"
            )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pairing", description=__doc__)
    parser.add_argument("--restarts", type=int, default=10, help="restarts of each side")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between both starting")
    parser.add_argument("--squatted", type=int, default=5, help="restarts of A with a squatter")
    parser.add_argument("--leak-restarts", type=int, default=0, help="restarts for the leak check")
    parser.add_argument("--json", default=None, help="write the records to this file")
    parser.add_argument("--report", default=None, help="print the table of a --json file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.report is not None:
        lines = Path(args.report).read_text().splitlines()
        print(report([json.loads(line) for line in lines if line.strip()]))
        return 0
    from twisted.internet import reactor

    outcome: list[Any] = []

    def run() -> None:
        d = Deferred.fromCoroutine(measure(reactor, args))
        d.addBoth(lambda result: (outcome.append(result), reactor.stop()))  # type: ignore[attr-defined]

    reactor.callWhenRunning(run)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    result = outcome[0] if outcome else None
    if not isinstance(result, list):
        if result is not None:
            result.printTraceback()
        return 1
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in result))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
