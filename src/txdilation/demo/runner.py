"""``txdilation demo``'s run: the servers, two sessions forwarding a local service, cuts, report.

Layer: application. Everything runs on 127.0.0.1: a real mailbox server and transit relay
(:mod:`txdilation.loopback_servers`), a local TCP service, and two ``txdilation run`` processes:
A allocates a code and listens (``--listen demo=...``), B joins and forwards subchannels named
``demo`` to the service. ``mib`` MiB go through the forward while the L2 link is cut ``cuts``
times (SIGUSR2 to A or B in turn); the service hashes what arrives, both sessions are stopped
with SIGTERM and a summary is printed. Exit status 0: every byte arrived once, in order, and
both sessions stopped cleanly (a final ``closed`` event).

SIGINT or SIGTERM: one line says what was interrupted, the sessions and servers are stopped,
exit 130 or 143; a second signal kills the sessions at once. The sessions watch their parent, so
they stop by themselves if the demo dies without a word. The traffic protocol is in
:mod:`.exchange`.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from txdilation import _early_signals
from txdilation.demo.exchange import Exchange, ExchangeFactory
from txdilation.reporting.status_log import format_bytes

__all__ = ["APPID", "run_demo"]

APPID = "txdilation.example/demo"
_KEY_WIDTH = 22
_PATHS_SHOWN = 3


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / total) if total else width
    percent = 100 * done / total if total else 100.0
    return "[" + "#" * filled + "." * (width - filled) + f"] {percent:5.1f}%"


def run_demo(
    *, mib: int = 64, cuts: int = 3, relay_only: bool = False, timeout: float = 120.0
) -> int:
    """Run the demo (on the global reactor, which it runs); returns the exit status (1, with
    what to install, when the mailbox server or transit relay package is missing)."""
    import importlib.util

    missing = [
        name
        for name, module in (
            ("magic-wormhole-mailbox-server", "wormhole_mailbox_server"),
            ("magic-wormhole-transit-relay", "wormhole_transit_relay"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        print(
            f"txdilation demo: needs {' and '.join(missing)} (it runs the real servers on "
            "127.0.0.1): pip install -e '.[demo]' in a checkout",
            file=sys.stderr,
        )
        return 1
    os.environ.setdefault("TXDILATION_LISTEN_INTERFACE", "127.0.0.1")
    os.environ.setdefault("TXDILATION_HINT_ADDRESSES", "127.0.0.1")
    from twisted.internet import reactor

    result: list[int] = []
    interrupted: list[int] = []

    def go() -> None:
        demo = _Demo(reactor, sys.stdout)
        d = Deferred.fromCoroutine(demo.run(mib * 2**20, cuts, relay_only))
        timed_out: list[str] = []

        def give_up() -> None:
            timed_out.append(demo.where())
            d.cancel()

        timer = reactor.callLater(timeout, give_up)  # type: ignore[attr-defined]

        def finish(outcome: object) -> None:
            if timer.active():
                timer.cancel()
            if interrupted:
                result.append(128 + interrupted[0])
            elif isinstance(outcome, Failure):
                why = (
                    f"gave up after {timeout:g} s (--timeout) {timed_out[0]}"
                    if timed_out
                    else f"failed: {outcome.getErrorMessage() or outcome.value!r}"
                )
                print(f"txdilation demo: {why}; the sessions' last events:", file=sys.stderr)
                for session in demo.sessions:
                    print(session.tail(), file=sys.stderr)
                result.append(1)
            else:
                result.append(int(outcome))  # type: ignore[call-overload]
            reactor.stop()  # type: ignore[attr-defined]

        d.addBoth(finish)

        def on_signal(signum: int, frame: object) -> None:
            interrupted.append(signum)
            name = signal.Signals(signum).name
            if len(interrupted) > 1:  # the second one: no more waiting
                for session in demo.sessions:
                    session.signal("KILL")
                sys.stderr.write(f"txdilation demo: {name} again: sessions killed, exiting\n")
                sys.stderr.flush()
                os._exit(128 + interrupted[0])
            sys.stderr.write(
                f"txdilation demo: interrupted by {name} {demo.where()}: stopping the sessions "
                f"and the servers ({name} again to kill them at once)\n"
            )
            sys.stderr.flush()
            reactor.callFromThread(d.cancel)  # type: ignore[attr-defined]

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_signal)

    _early_signals.keep_through_startup(reactor)  # until go() installs on_signal
    reactor.callWhenRunning(go)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    if not result:  # (nothing else stops the reactor: said all the same, never silently)
        print("txdilation demo: the reactor stopped before the demo ended", file=sys.stderr)
    return result[0] if result else 1


class _Demo:
    """One run of the demo (see the module docstring)."""

    def __init__(self, reactor: Any, out: IO[str]) -> None:
        self.reactor = reactor
        self.out = out
        self.tty = out.isatty()
        self.sessions: list[Any] = []
        self.phase = "while starting the servers"
        self.where: Callable[[], str] = lambda: self.phase
        self.traffic: list[Any] = []  # the client's and the service's connections
        self.stop_progress: Callable[[], None] | None = None

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def run(self, total: int, cuts: int, relay_only: bool) -> int:
        from txdilation.loopback_servers import start_mailbox_server, start_transit_relay

        mailbox = await start_mailbox_server(self.reactor)
        relay = await start_transit_relay(self.reactor)
        self.phase = "while starting the sessions"
        try:
            self.say(f"mailbox server {mailbox.url}, transit relay {relay.hint} (loopback only)")
            return await self._run(total, cuts, relay_only, mailbox.url, relay.hint)
        finally:
            self.phase = "while stopping the sessions"
            self.where = lambda: self.phase
            self._end_traffic()
            for session in self.sessions:
                await session.terminate(self.reactor, timeout=10.0)
            await mailbox.stop()
            await relay.stop()

    async def _run(self, total: int, cuts: int, relay_only: bool, url: str, relay: str) -> int:
        from twisted.internet.endpoints import (
            TCP4ClientEndpoint,
            TCP4ServerEndpoint,
            connectProtocol,
        )

        from txdilation.session.child import run_command, spawn_session

        reactor = self.reactor
        service = ExchangeFactory(reactor, b"service", 0, on_built=self.traffic.append)
        server = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")  # type: ignore[no-untyped-call]
        port = await server.listen(service)  # type: ignore[no-untyped-call]
        service_port = port.getHost().port
        common = ["--mailbox", url, "--appid", APPID, "--relay", relay, "--status", "-"]
        if relay_only:
            common.append("--no-listen")
        t0 = time.perf_counter()
        a = spawn_session(
            reactor,
            "A",
            [
                *run_command(),
                *common,
                "--allocate-code",
                "--listen",
                "demo=tcp:0:interface=127.0.0.1",
            ],
        )
        self.sessions.append(a)
        code = (await a.next_event("code"))["code"]
        listening = (await a.next_event("listening"))["address"]
        self.say(f"session A (pid {a.pid}): code {code}, listening on {listening}")
        b = spawn_session(
            reactor,
            "B",
            [
                *run_command(),
                *common,
                "--code",
                code,
                "--connect",
                f"demo=tcp:127.0.0.1:{service_port}",
            ],
        )
        self.sessions.append(b)
        self.say(f"session B (pid {b.pid}): forwards 'demo' to 127.0.0.1:{service_port}")
        self.phase = "while the sessions dilate"
        selected = await a.next_event("connection-selected")
        await a.next_event("dilated")
        await b.next_event("dilated")
        self.say(
            f"dilated in {time.perf_counter() - t0:.2f} s (both processes started), "
            f"{selected['path']} connection {selected['hint']}"
        )

        client = Exchange(reactor, b"client", total)
        self.traffic.append(client)
        cut_log: list[str] = []
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", int(listening.rsplit(":", 1)[1]))
        self.say(f"sending {total / 2**20:.0f} MiB through the forward, cutting the link {cuts}x")
        self.stop_progress = self._progress(service, total, cuts, cut_log)
        points = [total * (i + 1) // (cuts + 1) for i in range(cuts)]
        held = client.hold_at(points[0]) if points else None
        await connectProtocol(endpoint, client)  # type: ignore[no-untyped-call]
        for number, point in enumerate(points):
            await (held if held is not None and number == 0 else client.hold_at(point))
            victim = (a, b)[number % 2]
            await victim.cut_link(reactor)
            cut_log.append(victim.name)
            client.release()
        await client.done
        while not (service.built and service.built[0].done.called):
            await _sleep(reactor, 0.01)
        self._end_traffic()
        finished = time.perf_counter()
        received = service.built[0]

        self.phase = "while stopping the sessions"
        self.where = lambda: self.phase
        codes = [await s.terminate(reactor, timeout=10.0) for s in (a, b)]
        ended = [s.events[-1]["reason"] if s.of_kind("closed") else "?" for s in (a, b)]
        verified = (
            received.received == total
            and received.received_digest.digest() == client.sent_digest.digest()
        )
        ok = verified and all(s.stopped_cleanly for s in (a, b))
        self._summary(a, b, client, received, total, finished, cut_log, verified)
        outcome = f"A {ended[0]} (exit {codes[0]}), B {ended[1]} (exit {codes[1]})"
        self.say(f"  {'sessions ended':<{_KEY_WIDTH}}  {outcome}")
        self.say(f"  {'telemetry':<{_KEY_WIDTH}}  {_telemetry()}")
        return 0 if ok else 1

    def _end_traffic(self) -> None:
        """Interrupted (or done): no more progress lines; reset the connections still open
        (nothing is left forwarded, so the sessions stop at once)."""
        if self.stop_progress is not None:
            stop, self.stop_progress = self.stop_progress, None
            stop()
        for protocol in self.traffic:  # (their done may be cancelled: ask the transport)
            transport = getattr(protocol, "transport", None)
            if transport is not None and getattr(transport, "connected", False):
                transport.abortConnection()

    def _progress(
        self, service: ExchangeFactory, total: int, cuts: int, cut_log: list[str]
    ) -> Callable[[], None]:
        """Redraw (terminal) or print (every 2 s) the progress bar; returns the function that
        stops it (printing the final state)."""
        from twisted.internet.task import LoopingCall

        lead, end = ("\r", "") if self.tty else ("", "\n")
        out = self.out

        def draw() -> None:
            arrived = service.built[0].received if service.built else 0
            line = f"  {_bar(arrived, total)}  cuts {len(cut_log)}/{cuts}"
            print(f"{lead}{line}", end=end, file=out, flush=True)

        def where() -> str:
            arrived = service.built[0].received if service.built else 0
            return (
                f"while sending ({format_bytes(arrived)} of {format_bytes(total)} arrived, "
                f"{len(cut_log)} of {cuts} cuts)"
            )

        self.where = where
        loop = LoopingCall(draw)
        loop.clock = self.reactor
        loop.start(0.25 if self.tty else 2.0, now=True)

        def stop() -> None:
            loop.stop()
            draw()
            if lead:
                print(file=out, flush=True)

        return stop

    def _summary(
        self,
        a: Any,
        b: Any,
        client: Exchange,
        received: Exchange,
        total: int,
        finished: float,
        cut_log: list[str],
        verified: bool,
    ) -> None:
        elapsed = max(finished - client.started, 1e-9)
        reconnect_ms = [ms for s in (a, b) for ms in _reconnect_times(s.events)]
        selected = a.of_kind("connection-selected")
        paths = list(dict.fromkeys(f"{e['path']} {e['hint']}" for e in selected))
        if len(paths) > _PATHS_SHOWN:  # (one line, however many cuts)
            paths = [*paths[:_PATHS_SHOWN], f"... ({len(paths)} in all)"]
        rows = [
            ("bytes sent / received", f"{client.sent:,} / {received.received:,} of {total:,}"),
            ("SHA-256 verified", "yes" if verified else "NO"),
            ("throughput (with cuts)", f"{total / elapsed / 1e6:.0f} MB/s over {elapsed:.2f} s"),
            ("link cuts (SIGUSR2)", f"{len(cut_log)} ({', '.join(cut_log) or '-'})"),
            ("reconnects seen by A", str(max(0, len(selected) - 1))),
            ("generations", str(max((e["generation"] for e in selected), default=0))),
            (
                "reconnect time",
                f"median {statistics.median(reconnect_ms):.0f} ms" if reconnect_ms else "-",
            ),
            ("connections used by A", "; ".join(paths) or "-"),
        ]
        self.say("\nsummary")
        for key, value in rows:
            self.say(f"  {key.ljust(_KEY_WIDTH)}  {value}")


def _telemetry() -> str:
    """Where the sessions' telemetry records went: the ``TXDILATION_EVENTS`` file both session
    processes inherit (appended to), and the command that reports on it; or how to keep it."""
    path = os.environ.get("TXDILATION_EVENTS", "")
    if not path:
        return "not kept (run with TXDILATION_EVENTS=FILE to append it to FILE)"
    return (
        f"appended to {path} (TXDILATION_EVENTS); report: "
        f"txdilation-analytics analyze --events {path} --output DIR"
    )


def _reconnect_times(events: list[dict[str, Any]]) -> list[float]:
    """Milliseconds from each ``reconnecting`` to the next ``connection-selected``."""
    times: list[float] = []
    lost_at: float | None = None
    for event in events:
        if event["kind"] == "reconnecting" and lost_at is None:
            lost_at = event["ts"]
        elif event["kind"] == "connection-selected" and lost_at is not None:
            times.append(1000 * (event["ts"] - lost_at))
            lost_at = None
    return times


def _sleep(reactor: Any, seconds: float) -> Deferred[None]:
    from twisted.internet.task import deferLater

    return deferLater(reactor, seconds, lambda: None)
