"""Sessions as processes: two ``twistd -n dilation`` processes through the real mailbox server,
a plugin session against a STOCK magic-wormhole peer, and the ``txdilation demo`` command.

Each process runs on 127.0.0.1 only (they inherit ``TXDILATION_LISTEN_INTERFACE`` /
``TXDILATION_HINT_ADDRESSES`` from ``RealServersMixin``; the stock peer is confined by
``tests.support.peer``) and every test ends its processes by itself (SIGTERM, then SIGKILL after 10
s).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred, DeferredList, gatherResults
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.session.test_service import HalfCloseEcho
from tests.support.harness import LOOPBACK, REPO_ROOT, RealServersMixin, _spawn_peer
from tests.support.peer_scenarios import HalfCloseEchoClient, payload
from tests.support.waits import sleep
from txdilation.demo.exchange import Exchange, ExchangeFactory
from txdilation.session.child import SessionProcess, spawn_session, twistd_command

MiB = 2**20
APPID = "txdilation.test/processes"
STOP_WITHIN = 10.0


def tracebacks_in(log: str) -> str:
    """Each traceback in a twistd log with the lines before it, for a failure's message."""
    lines = log.splitlines()
    found = [i for i, line in enumerate(lines) if "Traceback" in line]
    return "\n---\n".join("\n".join(lines[max(0, i - 3) : i + 40]) for i in found)


class ProcessesMixin(RealServersMixin):
    """Starts session processes and local services; every process is ended by a cleanup."""

    reactor: Any

    def twistd(self, name: str, *args: str) -> SessionProcess:
        """``twistd -n --pidfile NAME.pid --logfile NAME.log dilation --mailbox ... ARGS``."""
        directory = Path(self.mktemp()).resolve()  # type: ignore[attr-defined]
        directory.mkdir(parents=True)
        self.files = getattr(self, "files", {})
        self.files[name] = directory
        twistd_options = ["--pidfile", str(directory / "twistd.pid")]
        twistd_options += ["--logfile", str(directory / "twistd.log")]
        argv = [*twistd_command(twistd_options), "--mailbox", self.mailbox.url, "--appid", APPID]
        process = spawn_session(self.reactor, name, [*argv, *args], path=str(directory))
        self.processes = [*getattr(self, "processes", []), process]
        self.addCleanup(process.terminate, self.reactor, STOP_WITHIN)  # type: ignore[attr-defined]
        return process

    async def service(self, factory: Factory) -> int:
        endpoint = TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK)
        port = await endpoint.listen(factory)
        self.addCleanup(port.stopListening)  # type: ignore[attr-defined]
        return int(port.getHost().port)

    async def connect(self, process: SessionProcess, name: str, protocol: Any) -> Any:
        listening = await process.next_event("listening", lambda e: e["name"] == name)
        port = int(listening["address"].rsplit(":", 1)[1])
        return await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), protocol)

    async def within(self, d: Deferred[Any], what: str, seconds: float = 30.0) -> Any:
        """``await d``, failing after ``seconds`` with every session process's tail (so a
        stuck step says where it stuck, long before the test's own timeout)."""
        timer = self.reactor.callLater(seconds, d.cancel)
        try:
            return await d
        except CancelledError:
            tails = "\n".join(p.tail() for p in self.processes)
            self.fail(f"{what}: nothing after {seconds} s\n{tails}")  # type: ignore[attr-defined]
        finally:
            if timer.active():
                timer.cancel()

    async def stop_all(self, *processes: SessionProcess) -> list[int | None]:
        """SIGTERM to all at once; every one must stop cleanly within STOP_WITHIN seconds
        (exit 0, or 143 for ``txdilation run``: SIGTERM's status), with a final ``closed``
        event that is not a failure."""
        started = self.reactor.seconds()
        stops = [Deferred.fromCoroutine(p.terminate(self.reactor, 30.0)) for p in processes]
        codes = await gatherResults(stops)
        took = self.reactor.seconds() - started
        for process in processes:
            self.assertTrue(process.stopped_cleanly, process.tail())  # type: ignore[attr-defined]
        self.assertLess(took, STOP_WITHIN)  # type: ignore[attr-defined]
        return codes


@pytest.mark.slow
class TwistdSessionsSlowTests(ProcessesMixin, TestCase):
    """Two ``twistd -n dilation`` processes forwarding local TCP services to each other."""

    timeout = 120

    async def test_forwarding_with_cuts_and_clean_stop(self) -> None:
        """A carries connections to its --listen ports to B's --connect services: one
        connection moves 64 MiB each way and three more run at the same time (1 MiB up, 4 MiB
        down: the service keeps sending after the client's end of input, so half-close
        passes); every stream's SHA-256 matches; the link is cut (SIGUSR2) on A and then on B
        mid-transfer and Dilation reconnects; SIGTERM stops both within 10 s, exit 0, each
        with a final ``closed`` event; twistd's pidfile and logfile options work."""
        big_service = ExchangeFactory(self.reactor, b"service-big", 64 * MiB)
        small_service = ExchangeFactory(self.reactor, b"service-small", 4 * MiB)
        big_port = await self.service(big_service)
        small_port = await self.service(small_service)
        relay = ["--relay", self.transit_relay.hint, "--status", "-"]
        a = self.twistd(
            "A", "--allocate-code", *relay,
            "--listen", f"big=tcp:0:interface={LOOPBACK}",
            "--listen", f"small=tcp:0:interface={LOOPBACK}",
        )  # fmt: skip
        code = (await self.within(a.next_event("code"), "A's code"))["code"]
        b = self.twistd(
            "B", "--code", code, *relay,
            "--connect", f"big=tcp:{LOOPBACK}:{big_port}",
            "--connect", f"small=tcp:{LOOPBACK}:{small_port}",
        )  # fmt: skip
        await self.within(a.next_event("dilated"), "A dilated")
        await self.within(b.next_event("dilated"), "B dilated")
        self.assertTrue((self.files["A"] / "twistd.pid").exists())

        big = Exchange(self.reactor, b"client-big", 64 * MiB)
        held = big.hold_at(64 * MiB // 3)
        await self.connect(a, "big", big)
        smalls = [
            await self.connect(a, "small", Exchange(self.reactor, b"client-small", MiB))
            for _ in range(3)
        ]
        # cut A's link with a third of the upload in flight (the download keeps streaming),
        # then B's at two thirds; go on once each has reconnected
        await self.within(held, "a third of the upload")
        await a.cut_link(self.reactor)
        big.release()
        await self.within(big.hold_at(2 * 64 * MiB // 3), "two thirds of the upload")
        await b.cut_link(self.reactor)
        big.release()
        clients = DeferredList([p.done for p in [big, *smalls]])
        await self.within(clients, "the clients' streams", 60)
        servers = DeferredList([p.done for p in big_service.built + small_service.built])
        await self.within(servers, "the services' streams")

        pairs = [(big, big_service.built[0]), *zip(smalls, small_service.built, strict=True)]
        for client, server in pairs:
            self.assertEqual(server.received, client.send_total)
            self.assertEqual(client.received, server.send_total)
            self.assertEqual(server.received_digest.digest(), client.sent_digest.digest())
            self.assertEqual(client.received_digest.digest(), server.sent_digest.digest())

        for process in (a, b):
            self.assertEqual(len(process.of_kind("link-cut")), 1, process.tail())
            generations = [e["generation"] for e in process.of_kind("connection-selected")]
            self.assertGreaterEqual(max(generations), 3, process.tail())
            closed = await process.next_event(
                "subchannel-closed", lambda e: e["name"] == "big", after=0
            )
            self.assertEqual(closed["reason"], "closed")
        closed_big = a.of_kind("subchannel-closed")
        moved = {(e["name"], e["bytes_to_peer"], e["bytes_from_peer"]) for e in closed_big}
        self.assertEqual(moved, {("big", 64 * MiB, 64 * MiB), ("small", MiB, 4 * MiB)})

        await self.stop_all(a, b)
        for name in ("A", "B"):
            self.assertFalse((self.files[name] / "twistd.pid").exists())
            log = (self.files[name] / "twistd.log").read_text()
            self.assertIn("txdilation", log)
            self.assertNotIn("Traceback", log, tracebacks_in(log))

    async def test_config_file_status_file_and_sigint(self) -> None:
        """Settings from --config (TOML), --status to a file: SIGINT stops a session whose
        peer never came; the file holds the run's events, ending with ``closed``; exit 0."""
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        status = directory / "status.jsonl"
        config = directory / "session.toml"
        config.write_text(
            f'mailbox = "{self.mailbox.url}"\nappid = "{APPID}"\nallocate-code = true\n'
            f'status = "{status}"\n[listen]\nweb = "tcp:0:interface={LOOPBACK}"\n'
        )
        argv = [*twistd_command(["--pidfile", "", "--logfile", str(directory / "log")])]
        process = spawn_session(self.reactor, "C", [*argv, "--config", str(config)])
        self.addCleanup(process.terminate, self.reactor, STOP_WITHIN)
        while not status.exists() or b'"code"' not in status.read_bytes():
            await sleep(0.05, self.reactor)
            self.assertTrue(process.running, process.tail())
        process.signal("INT")
        self.assertEqual(await process.ended, 0, process.tail())
        events = [json.loads(line) for line in status.read_text().splitlines()]
        kinds = [e["kind"] for e in events]
        self.assertEqual(kinds[0], "starting")
        self.assertIn("listening", kinds)
        self.assertEqual(events[-1]["kind"], "closed")
        self.assertEqual(events[-1]["mood"], "lonely")
        self.assertEqual(events[kinds.index("stopping")]["reason"], "SIGINT")

    async def test_fatal_error_exits_1(self) -> None:
        """A session that cannot start (its --listen port is taken) reports a fatal error and
        twistd exits with status 1 (and removes its pidfile)."""
        blocker = await self.service(Factory())
        taken = f"x=tcp:{blocker}:interface={LOOPBACK}"
        process = self.twistd("D", "--allocate-code", "--status", "-", "--listen", taken)
        self.assertEqual(await process.ended, 1, process.tail())
        self.assertEqual(process.events[-1]["reason"], "failed")
        self.assertTrue(process.of_kind("error")[0]["fatal"])
        self.assertFalse((self.files["D"] / "twistd.pid").exists())

    async def test_usage_error(self) -> None:
        """A bad option of twistd dilation is ONE line on stderr, as for txdilation run (not
        twistd's whole usage text), exit status 2; nothing starts."""
        out, err, code = await getProcessOutputAndValue(
            sys.executable,
            [*twistd_command()[1:], "--listen", "web", "--code", "1-a"],
            env=dict(os.environ),
            reactor=self.reactor,
        )
        self.assertEqual((code, out), (2, b""))
        self.assertEqual(
            err.decode().splitlines(),
            [
                "twistd dilation: error: --listen: 'web': expected NAME=ENDPOINT, e.g. "
                "web=tcp:8080; see 'twistd dilation --help'"
            ],
        )


@pytest.mark.slow
class StockPeerSlowTests(ProcessesMixin, TestCase):
    """A plugin session against a STOCK magic-wormhole peer (tests.support.peer --impl stock)."""

    timeout = 90

    async def test_plugin_session_against_stock_peer(self) -> None:
        """The stock peer runs 'echo-both' on subprotocol 'echo' with half-close: it opens 3
        subchannels (forwarded by the session to a local echo service) and serves 3 (the
        session carries 3 local connections to it); every message is echoed intact and every
        subchannel half-closes in both directions; then both end cleanly."""
        echo_port = await self.service(Factory.forProtocol(HalfCloseEcho))
        sizes = [1, 1000, 65520, MiB]
        got_code: Deferred[str] = Deferred()

        def on_event(proc: Any, event: dict[str, Any]) -> None:
            if event.get("event") == "code" and not got_code.called:
                got_code.callback(event["code"])

        stock = _spawn_peer(
            self.reactor,
            "stock",
            ["--mailbox", self.mailbox.url, "--appid", APPID, "--allocate", "--impl", "stock",
             "--scenario", "echo-both", "--count", "3", "--half-close", "--subprotocols", "echo",
             "--sizes", ",".join(map(str, sizes)), "--timeout", "60"],
            on_event,
        )  # fmt: skip
        self.addCleanup(stock.kill)
        code = await self.within(got_code, "the stock peer's code")
        session = self.twistd(
            "S", "--code", code, "--status", "-",
            "--connect", f"echo=tcp:{LOOPBACK}:{echo_port}",
            "--listen", f"echo=tcp:0:interface={LOOPBACK}",
        )  # fmt: skip
        await self.within(session.next_event("dilated"), "the session dilated")

        async def client(index: int) -> int:
            protocol = await self.connect(session, "echo", HalfCloseEchoClient())
            for number, size in enumerate(sizes):
                await protocol.exchange(payload("local", index * 1000 + number, size))
            await protocol.close()
            return sum(sizes)

        clients = gatherResults([Deferred.fromCoroutine(client(i)) for i in range(3)])
        moved = await self.within(clients, "echo through the session")
        self.assertEqual(moved, [sum(sizes)] * 3)
        await self.within(stock.ended, f"the stock peer's end\n{stock.result.tail()}")
        result = stock.result
        self.assertEqual(result.exit_code, 0, result.tail())
        self.assertEqual(result.result["client"]["opened"], 3)
        self.assertEqual(result.result["server"]["served"], 3)
        directions = sorted(e["direction"] for e in session.of_kind("subchannel-opened"))
        self.assertEqual(directions, ["inbound"] * 3 + ["outbound"] * 3)
        await self.stop_all(session)


@pytest.mark.slow
class DemoCommandSlowTests(TestCase):
    """``txdilation demo``, the README's main job, as a command."""

    timeout = 90

    async def test_demo_exits_0(self) -> None:
        """The demo (two session processes, a forwarded service, link cuts) verifies the data
        and exits 0 with its summary table."""
        from twisted.internet import reactor

        out, err, code = await getProcessOutputAndValue(
            sys.executable,
            ["-m", "txdilation.cli", "demo", "--mib", "16", "--cuts", "2", "--timeout", "60"],
            env=dict(os.environ),
            path=str(REPO_ROOT),
            reactor=reactor,
        )
        text = out.decode()
        self.assertEqual(code, 0, text + err.decode())
        self.assertIn("SHA-256 verified        yes", text)
        self.assertIn("link cuts (SIGUSR2)     2", text)
        self.assertIn("sessions ended", text)
