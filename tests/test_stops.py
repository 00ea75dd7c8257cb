"""Stops, failures and mistakes, as a user meets them: real processes on 127.0.0.1 (issue 21).

- ``txdilation run``: SIGINT starts the grace period (one "interrupted" line on stderr), a
  second SIGINT cuts what is still forwarded at once, the exit status is 130 (143 after
  SIGTERM), and the peer's session reports its end of the cut too;
- ``txdilation demo``: SIGTERM stops it with one line saying what was interrupted, exit 143,
  and its two session processes are gone; SIGKILL leaves no orphans either (the sessions
  watch their parent);
- ``twistd web --listen dilation:...``: a bad endpoint string is one line and exit 2; a
  wormhole that fails (the mailbox server unreachable, a wrong code) ends the server with exit
  1 and no traceback; the client (``examples/endpoint_fetch.py``) says why in one line.

The real mailbox server and transit relay run in this process (``RealServersMixin``); every
process is ended by the test (SIGTERM, then SIGKILL), each wait bounded.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory
from twisted.trial.unittest import TestCase

from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK, REPO_ROOT, RealServersMixin
from tests.support.waits import sleep
from txdilation.session.child import SessionProcess, run_command, spawn_session

APPID = "txdilation.test/stops"
FETCH = str(REPO_ROOT / "examples" / "endpoint_fetch.py")
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n"]


def copy(d: Deferred[Any]) -> Deferred[Any]:
    """A Deferred with ``d``'s result, that may time out without cancelling ``d``."""
    other: Deferred[Any] = Deferred()

    def passed(result: object) -> object:
        if not other.called:
            other.callback(result)
        return result

    d.addBoth(passed)
    return other


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class ProcessTestCase(RealServersMixin, TestCase):
    """Spawns processes (each ended by a cleanup) and waits for them, bounded."""

    timeout = 120

    def spawn(self, name: str, argv: list[str], cwd: str | None = None) -> SessionProcess:
        process = spawn_session(self.reactor, name, argv, path=cwd)
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def within(self, d: Deferred[Any], seconds: float, *processes: SessionProcess) -> Any:
        """``await d``, failing after ``seconds`` with the processes' output."""
        d.addTimeout(seconds, self.reactor)
        try:
            return await d
        except Exception:
            tails = "\n".join(p.tail() + "\n".join(p.other_output) for p in processes)
            self.fail(f"nothing within {seconds} s\n{tails}")

    async def line(self, process: SessionProcess, pattern: str, seconds: float = 45) -> str:
        """The first stdout line matching ``pattern`` (waiting up to ``seconds``)."""
        for _ in range(int(seconds / 0.05)):
            for text in process.other_output:
                if re.search(pattern, text):
                    return text
            self.assertTrue(process.running, process.tail() + "\n".join(process.other_output))
            await sleep(0.05, self.reactor)
        self.fail(f"no line {pattern!r}\n{process.tail()}\n" + "\n".join(process.other_output))

    async def ended(self, process: SessionProcess, seconds: float = 30) -> int | None:
        code: int | None = await self.within(copy(process.ended), seconds, process)
        return code


class RunSignalTests(ProcessTestCase):
    """``txdilation run`` stopped by signals, with a forwarded connection open."""

    async def test_sigint_grace_then_second_sigint_cuts(self) -> None:
        """SIGINT: one line on stderr says the session was interrupted and that one forwarded
        connection gets the 30 s grace period (a ``stopping`` event with open 1, grace_s 30);
        a second SIGINT cuts it at once and the process exits 130. The local client reads a
        reset, not an end of input; the peer's session (B) cuts its end as well, reports it,
        and ends by itself ('peer-closed', exit 0)."""
        echo = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(HalfCloseEcho)
        )
        self.addCleanup(echo.stopListening)
        common = ["--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-"]
        a = self.spawn(
            "A",
            [
                *run_command(),
                *common,
                "--allocate-code",
                "--listen",
                f"svc=tcp:0:interface={LOOPBACK}",
            ],
        )
        code = (await self.within(a.next_event("code"), 30, a))["code"]
        b = self.spawn(
            "B",
            [*run_command(), *common, "--code", code,
             "--connect", f"svc=tcp:{LOOPBACK}:{echo.getHost().port}"],
        )  # fmt: skip
        for process in (a, b):
            await self.within(process.next_event("dilated"), 30, a, b)
        port = int((await a.next_event("listening"))["address"].rsplit(":", 1)[1])
        client = await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client())
        client.transport.write(b"still talking")
        await self.within(b.next_event("subchannel-opened"), 30, a, b)
        while len(client.data) < 13:
            await sleep(0.02, self.reactor)

        # what A printed so far is docs/command.md's example, in its order
        doc = (REPO_ROOT / "docs" / "command.md").read_text()
        sample = doc.split("$ txdilation run --allocate-code", 1)[1].split("```", 1)[0]
        shown = [" ".join(line.split()[:2]) for line in sample.strip().splitlines()[1:-1]]
        printed = [" ".join(line.split()[:2]) for line in a.stderr.splitlines()]
        self.assertEqual(printed[: len(shown)], shown, a.stderr)

        a.signal("INT")
        stopping = await self.within(a.next_event("stopping"), 30, a)
        self.assertEqual(
            (stopping["reason"], stopping["open"], stopping["grace_s"]), ("SIGINT", 1, 30)
        )
        a.signal("INT")
        self.assertEqual(await self.ended(a, 15), 130, a.tail())
        interrupted = [line for line in a.stderr.splitlines() if "interrupted" in line]
        self.assertEqual(
            interrupted,
            [
                "interrupted by SIGINT: stopping: 1 forwarded connection open, waiting up to "
                "30 s for it to end; a second SIGINT cuts it now"
            ],
        )
        [cut] = a.of_kind("subchannel-closed")
        self.assertEqual((cut["reason"], cut["detail"]), ("cut", "the stop was forced (SIGINT)"))
        self.assertEqual((cut["bytes_to_peer"], cut["bytes_from_peer"]), (13, 13))
        self.assertEqual((a.events[-1]["kind"], a.events[-1]["cut"]), ("closed", 1))
        await self.within(client.lost, 15, a)
        self.assertFalse(client.reason.check(ConnectionDone), client.reason)

        self.assertEqual(await self.ended(b, 30), 0, b.tail())
        [peer_cut] = b.of_kind("subchannel-closed")
        self.assertEqual(peer_cut["reason"], "cut")
        self.assertIn("the peer stopped", peer_cut["detail"])
        self.assertEqual((b.events[-1]["reason"], b.events[-1]["cut"]), ("peer-closed", 1))
        self.assertIn("svc #1 cut after 13 B to the peer, 13 B from the peer", b.stderr)

    async def test_sigterm_exits_143(self) -> None:
        """SIGTERM to a session with nothing open stops it at once: one 'interrupted' line,
        a final ``closed`` event, exit 143."""
        a = self.spawn(
            "A",
            [*run_command(), "--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-",
             "--allocate-code"],
        )  # fmt: skip
        await self.within(a.next_event("code"), 30, a)
        a.signal("TERM")
        self.assertEqual(await self.ended(a, 15), 143, a.tail())
        self.assertEqual(a.stderr.count("interrupted by SIGTERM: stopping"), 1, a.stderr)
        self.assertEqual(a.events[-1]["kind"], "closed")


class DemoSignalTests(TestCase):
    """``txdilation demo`` interrupted while it sends."""

    timeout = 120

    async def started(self) -> tuple[SessionProcess, list[int]]:
        """A demo sending far more than it will have time to, and its sessions' pids."""
        from twisted.internet import reactor

        self.reactor: Any = reactor
        demo = spawn_session(
            reactor,
            "demo",
            [sys.executable, "-m", "txdilation.cli", "demo", "--mib", "100000", "--cuts", "0"],
        )
        self.addCleanup(demo.terminate, reactor, 10.0)
        for _ in range(1200):
            if any(line.startswith("sending ") for line in demo.other_output):
                break
            self.assertTrue(demo.running, demo.tail() + "\n".join(demo.other_output))
            await sleep(0.05, reactor)
        pids = [int(p) for line in demo.other_output for p in re.findall(r"\(pid (\d+)\)", line)]
        self.assertEqual(len(pids), 2, demo.other_output)
        self.assertTrue(all(alive(pid) for pid in pids))
        return demo, pids

    async def gone(self, pids: list[int], seconds: float) -> None:
        for _ in range(int(seconds / 0.1)):
            if not any(alive(pid) for pid in pids):
                return
            await sleep(0.1, self.reactor)
        self.fail(f"still running after {seconds} s: {[p for p in pids if alive(p)]}")

    async def test_sigterm(self) -> None:
        """SIGTERM while sending: one line on stderr says what was interrupted (how far it
        got), the demo exits 143 within seconds, and both session processes are gone."""
        demo, pids = await self.started()
        demo.signal("TERM")
        self.assertEqual(await copy(demo.ended).addTimeout(20, self.reactor), 143, demo.tail())
        lines = [line for line in demo.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, demo.stderr)
        self.assertRegex(
            lines[0],
            r"^txdilation demo: interrupted by SIGTERM while sending \(.* arrived, 0 of 0 cuts\): "
            r"stopping the sessions and the servers",
        )
        await self.gone(pids, 5)

    async def test_sigkill_leaves_no_orphans(self) -> None:
        """The demo killed without a chance to clean up: its sessions notice their parent is
        gone and stop by themselves (no orphans running on, as before)."""
        demo, pids = await self.started()
        demo.signal("KILL")
        await demo.ended
        await self.gone(pids, 15)


class EndpointStopTests(ProcessTestCase):
    """``twistd web --listen dilation:...`` and the example client, failing."""

    def twistd_web(self, listen: str) -> SessionProcess:
        site = Path(self.mktemp()).resolve()
        site.mkdir()
        (site / "index.html").write_text("served\n")
        return self.spawn(
            "twistd-web",
            [*TWISTD, "--pidfile=", "web", "--path", str(site), "--listen", listen],
            cwd=str(site),
        )

    def mailbox_key(self) -> str:
        return "mailbox=" + self.mailbox.url.replace(":", "\\:") + f":appid={APPID}"

    async def test_bad_endpoint_string_is_one_line(self) -> None:
        """A misspelt key: one line naming it (and the likely one), exit 2, no traceback."""
        web = self.twistd_web("dilation:subprotocol=http:codefile=code.txt")
        self.assertEqual(await self.ended(web), 2, web.tail())
        self.assertEqual(
            web.stderr.strip().splitlines(),
            [
                "twistd: error: dilation: unknown server endpoint argument(s) codefile (did you "
                "mean code-file?); known: appid, code, code-file, exit-on-failure, mailbox, "
                "no-listen, pairing, ping-interval, relay, status, subprotocol; "
                "docs/endpoints.md lists the keys"
            ],
        )

    async def test_unreachable_mailbox_ends_the_server(self) -> None:
        """The mailbox server cannot be reached: the fatal error is logged in words and the
        twistd server exits 1 (systemd's Restart=on-failure then fires), without a traceback."""
        web = self.twistd_web("dilation:subprotocol=http:mailbox=ws\\://127.0.0.1\\:1/v1")
        self.assertEqual(await self.ended(web), 1, web.tail())
        log = "\n".join(web.other_output)
        self.assertIn("fatal error (wormhole): cannot reach the mailbox server", log)
        self.assertIn("stopping the process (exit status 1", log)
        self.assertNotIn("Traceback", log + web.stderr)
        self.assertNotIn("Unhandled Error", log)

    async def test_wrong_code_ends_both(self) -> None:
        """A client with a wrong code: it fails within seconds with one line saying the code
        is wrong (exit 1), and the server, whose wormhole that code ruined, exits 1."""
        code_file = Path(self.mktemp()).resolve()
        web = self.twistd_web(
            f"dilation:subprotocol=http:{self.mailbox_key()}:code-file={code_file}"
        )
        await self.line(web, r"serving subprotocol http on the wormhole with code")
        nameplate = code_file.read_text().split("-")[0]
        fetch = self.spawn(
            "fetch",
            [sys.executable, FETCH,
             f"dilation:subprotocol=http:{self.mailbox_key()}:code={nameplate}-wrong-words", "/"],
        )  # fmt: skip
        self.assertEqual(await self.ended(fetch, 30), 1, fetch.tail())
        self.assertRegex(
            fetch.stderr.strip(),
            r"^endpoint_fetch\.py: GET /: wrong wormhole code: the two sides did not use the "
            r"same code; check the code on both sides",
        )
        self.assertNotIn("\n", fetch.stderr.strip())
        self.assertEqual(await self.ended(web, 30), 1, web.tail())
