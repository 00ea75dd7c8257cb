"""
fowl, the main application built on Dilation, run on txdilation: its own test suite with
txdilation in every process, and two real ``fowld`` processes forwarding a port.

- ``FowlSuiteTests``: ``python -m pytest -p txdilation.dropin --pyargs fowl.test`` (fowl 26.8,
  including its 1 GiB iperf3 test through a forward): every test passes, none is skipped, nothing
  is logged as an error, and every Python process the suite starts proves (``TXDILATION_DROPIN_
  PROOF``) that it dilated through txdilation.
- ``FowldForwardingTests``: two fowld processes (txdilation/txdilation, txdilation/stock,
  stock/txdilation, and stock/stock for reference; a txdilation fowld is fowld run unchanged
  under ``txdilation exec``, as a user runs it) forward a local port through the real
  mailbox server and transit relay: 64 MiB each way checked with SHA-256 while the dilated link
  is cut once, the far side closes and the near client sees EOF, a second connection works,
  fowld's JSON ``ping`` is answered wherever stock's is, both exit cleanly, no tracebacks; each
  exec'd fowld proves (``--proof``) it ran on txdilation and its telemetry (``--events``)
  names txdilation and its version.

Everything stays on 127.0.0.1: fowl's hard-coded public relay is replaced by the test's
(``tests/support/site``) and stock is confined to loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import fowl._proto
from fowl.messages import WormholeError
from twisted.internet.defer import Deferred, DeferredList, DeferredQueue
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.support import fowl_errors
from tests.support.execs import proof_lines
from tests.support.fowl_errors import PREFIX as FOWLD_ERROR
from tests.support.fowld import SITE_DIR, Fowld, cut_links
from tests.support.harness import REPO_ROOT, RealServersMixin
from tests.support.waits import sleep
from txdilation import __version__

TOTAL = 64 << 20
CHUNK = 1 << 20
SECOND_TOTAL = 1 << 20


def stream_chunks(seed: bytes, total: int) -> list[bytes]:
    """``total`` bytes as 1 MiB chunks, each different (a random block rotated per chunk)."""
    block = hashlib.sha256(seed).digest() * (CHUNK // 32)
    block = bytes(b ^ (i * 131 % 251) for i, b in enumerate(block[:4096])) + block[4096:]
    chunks = []
    for i in range(total // CHUNK):
        shift = (i * 7919) % CHUNK
        chunks.append(block[shift:] + block[:shift])
    return chunks


def digest(chunks: list[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


class Endpoint(Protocol):
    """Sends ``outgoing`` on connect, hashes what arrives, reports EOF; may close when done."""

    def __init__(self, outgoing: list[bytes], expect: int, close_when_done: bool) -> None:
        self.outgoing = outgoing
        self.expect = expect
        self.close_when_done = close_when_done
        self.received = 0
        self.hash = hashlib.sha256()
        self.milestones: dict[int, Deferred[None]] = {}
        self.done: Deferred[None] = Deferred()
        self.eof: Deferred[float] = Deferred()

    def connectionMade(self) -> None:
        for chunk in self.outgoing:
            self.transport.write(chunk)

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)
        self.hash.update(data)
        for size, d in list(self.milestones.items()):
            if self.received >= size:
                del self.milestones[size]
                d.callback(None)
        if self.received >= self.expect and not self.done.called:
            self.done.callback(None)
            if self.close_when_done:
                self.transport.loseConnection()

    def when_received(self, size: int) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if self.received >= size:
            d.callback(None)
        else:
            self.milestones[size] = d
        return d

    def connectionLost(self, reason: Any = None) -> None:
        if not self.eof.called:
            self.eof.callback(self.received)


class _ServerFactory(Factory):
    """The forwarded service: each connection gets the next ``plan`` entry (what to send, how
    much to expect); ``connections`` yields them in order."""

    def __init__(self, plan: list[tuple[list[bytes], int]]) -> None:
        self.plan = list(plan)
        self.connections: DeferredQueue[Endpoint] = DeferredQueue()

    def buildProtocol(self, addr: Any) -> Endpoint:
        outgoing, expect = self.plan.pop(0)
        protocol = Endpoint(outgoing, expect, close_when_done=False)
        self.connections.put(protocol)
        return protocol


@dataclass(frozen=True)
class KnownRace:
    """A test of fowl's own suite that can lose an ordering race of fowl's making; when it
    fails with one of ``signatures`` in the output, it is run again (``RERUNS`` times at
    most)."""

    test: str  # pytest's id, as in its "FAILED ..." line
    signatures: tuple[str, ...]
    module: str  # what to run it again with: ``--pyargs module -k name``


#: how often a test that lost a known race is run again, at most: each race is lost about half
#: the time or more on a fast link (below), so 8 reruns leave 0.2% (p = 0.5) to 3% (p = 0.67)
RERUNS = 8


#: fowl's races, measured on this 2-core machine with fowld pairs and fowl's test_cli:
#:
#: - test_iperf3 expects the invite side's "peer-connected" message before its "listening"
#:   one; the two are independent (the second needs the peer's request over the dilated
#:   link) and the order is not guaranteed: "listening" came first in 1 of 16 runs with stock
#:   magic-wormhole and 1 of 16 with txdilation. Likewise on the accept side: its
#:   "awaiting-connect" (after the peer's answer) can come before its "peer-connected".
#: - test_cli's test_happy_path: both fowl processes issue their command-line commands only
#:   once dilated. The invite side's ``--remote`` asks the peer at once, and the accept side
#:   registers the ``--local`` service that request needs a few reactor turns after its own
#:   ``when_dilated``; when the request arrives first, fowl answers "No service permitted for
#:   name", nothing listens, and the test gives up after 12.5 s. Measured over 20 runs each
#:   (the request's arrival minus the registration, on the accept side): stock failed 1
#:   (-0.8 ms) and had under 3 ms to spare in 10 more; txdilation failed 2 (-1.9, -1.2 ms) and
#:   had under 3 ms to spare in 2 more. Whether the request waits ~40 ms behind Nagle's
#:   algorithm (a small write behind an unacknowledged one, and the peer delaying its ACK)
#:   decides most runs, with either implementation.
#:
#: Both are lost whenever a side's first request over the link overtakes the other side's own
#: reaction to ``when_dilated`` (the Leader is dilated first and its request follows its KCM);
#: Nagle's algorithm used to hold that request ~40 ms. With TCP_NODELAY on every dilated
#: connection (issue 19) nothing holds it, so both races are lost more often: measured
#: alternately, 30 runs each on a machine with 1.7 of its 2 cores busy elsewhere (load 15 to
#: 18), fowl's test_happy_path lost 11 (37%) without TCP_NODELAY and 19 (63%) with it;
#: test_performance lost the "listening" race 8 times and the "awaiting-connect" one 2 times
#: (33%) without, 18 and 2 (67%) with it. A lost run costs 12 to 60 s.
KNOWN_RACES = (
    KnownRace(
        "test_iperf3.py::test_performance",
        (
            "'Listening' object has no attribute 'verifier'",
            "'AwaitingConnect' object has no attribute 'verifier'",
        ),
        "fowl.test.test_iperf3",
    ),
    KnownRace(
        "test_cli.py::test_happy_path",
        ("failed to see both sides set up",),
        "fowl.test.test_cli",
    ),
)


def with_fowld_errors(output: str) -> str:
    """The end of a fowl suite's output, after the text of every error fowld reported in it
    (``tests.support.fowl_errors``): fowl's tests name only the error's class."""
    errors = [line for line in output.splitlines() if line.startswith(FOWLD_ERROR)]
    return "\n".join([*errors, output[-8000:]])


class FowldErrorsShownTests(SynchronousTestCase):
    """The plugin the suite runs with (``tests.support.fowl_errors``) shows fowld's errors."""

    def test_an_error_is_printed_with_its_text_and_leads_the_report(self) -> None:
        """Once the plugin is configured, fowl's parser (as fowl's tests import it) prints an
        ``error`` message's text and returns the message unchanged; other messages print
        nothing; ``with_fowld_errors`` puts the printed lines before the output's end."""
        self.patch(fowl._proto, "parse_fowld_output", fowl._proto.parse_fowld_output)
        fowl_errors.pytest_configure(None)
        parse = fowl._proto.parse_fowld_output
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            error, _ = parse(json.dumps({"kind": "error", "message": 'Service "iperf" failed'}))
            welcome, _ = parse(json.dumps({"kind": "welcome", "url": "ws://x", "welcome": {}}))
        self.assertEqual(error, WormholeError('Service "iperf" failed'))
        self.assertEqual(type(welcome).__name__, "Welcome")
        line = f'{FOWLD_ERROR} Service "iperf" failed'
        self.assertEqual(printed.getvalue(), line + "\n")
        report = with_fowld_errors("x" * 9000 + "\n" + line + "\n" + "y" * 9000)
        self.assertEqual(report.splitlines()[0], line)
        self.assertTrue(report.endswith("y" * 8000))


class FowlSuiteTests(RealServersMixin, TestCase):
    """fowl's own test suite, with txdilation installed in every process it starts."""

    timeout = 1500  # the suite (~5 min here) and up to RERUNS runs of lost races

    async def run_fowl_tests(
        self, scratch: str, target: str, *select: str
    ) -> tuple[int, str, list[Any]]:
        """``pytest -p txdilation.dropin --pyargs TARGET [SELECT...]`` in ``scratch``: exit
        code, output, and the substitution proof of every Python process of the run."""
        proof = os.path.join(scratch, "proof.jsonl")
        if os.path.exists(proof):
            os.remove(proof)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [SITE_DIR, str(REPO_ROOT / "src"), str(REPO_ROOT), env.get("PYTHONPATH", "")]
        )
        env["TXDILATION_TEST_TRANSIT_RELAY"] = f"tcp:127.0.0.1:{self.transit_relay.port}"
        env["TXDILATION_DROPIN_PROOF"] = proof
        env["PYTHONUNBUFFERED"] = "1"
        args = ["-m", "pytest", "-p", "txdilation.dropin", "-p", "tests.support.fowl_errors"]
        args += ["-p", "no:cacheprovider"]
        args += ["-s", "-rA", "--pyargs", target, *select]
        out, err, code = await getProcessOutputAndValue(
            sys.executable, args, env=env, path=scratch, reactor=self.reactor
        )
        with open(proof, encoding="utf-8") as f:
            processes = [json.loads(line) for line in f]
        return code, (out + err).decode("utf-8", "replace"), processes

    def check_clean(self, output: str, processes: list[Any]) -> None:
        """No traceback or unhandled error printed; every process substituted."""
        for marker in ("Traceback", "Unhandled error", "Unhandled Error"):
            self.assertNotIn(marker, output, output[-8000:])
        self.assertTrue(all(p["substituted"] for p in processes), processes)

    async def test_fowl_suite_passes_with_txdilation_everywhere(self) -> None:
        """``pytest -p txdilation.dropin --pyargs fowl.test``: every test passes (none
        skipped, so the 1 GiB iperf3 forward runs too), no traceback or unhandled error is
        printed, and every Python process of the run proves it dilated through txdilation
        (the pytest process and each fowl process it spawned). Only a test that loses one of
        fowl's own ordering races (``KNOWN_RACES``, with that race's failure) is run again."""
        with tempfile.TemporaryDirectory() as scratch:
            code, output, processes = await self.run_fowl_tests(scratch, "fowl.test")
            summary = output.strip().splitlines()[-1]
            print(f"fowl's suite with txdilation: {summary}")
            if code != 0:
                output, summary = await self.run_lost_races_again(scratch, output, summary)
            else:
                self.assertEqual(code, 0, output[-8000:])
        passed = re.search(r"(\d+) passed", summary)
        self.assertIsNotNone(passed, summary)
        self.assertNotRegex(summary, "skipped|failed|error", summary)
        self.assertGreaterEqual(int(passed.group(1)), 17, summary)  # type: ignore[union-attr]
        self.check_clean(output, processes)
        fowl_processes = [p for p in processes if "--mailbox" in p["argv"]]
        self.assertGreaterEqual(len(fowl_processes), 2, processes)

    async def run_lost_races_again(
        self, scratch: str, output: str, summary: str
    ) -> tuple[str, str]:
        """The suite failed: unless every failed test is a ``KNOWN_RACES`` entry failing with
        one of its signatures, fail with the output. Otherwise run each again (``RERUNS`` times
        at most), check that it passes cleanly, and return the first run's output without its
        failure report and its summary with those failures counted as passed."""
        failed = re.findall(r"^FAILED (\S+)", output, re.MULTILINE)
        races = {race.test: race for race in KNOWN_RACES}
        lost = [races.get(test) for test in failed]
        known = bool(failed) and all(
            race is not None and any(s in output for s in race.signatures) for race in lost
        )
        self.assertTrue(known, with_fowld_errors(output))
        self.assertRegex(summary, rf"{len(failed)} failed, (\d+) passed in")
        failures = output.index("= FAILURES =")
        output = output[:failures] + output[output.index("= PASSES =") :]
        for race in lost:
            assert race is not None
            name = race.test.split("::")[1]
            for attempt in range(1, RERUNS + 1):
                print(f"fowl's {race.test} lost its ordering race; run again ({attempt})")
                code, again, more = await self.run_fowl_tests(scratch, race.module, "-k", name)
                if code == 0:
                    break
            self.assertEqual(code, 0, with_fowld_errors(again))
            self.assertRegex(again.strip().splitlines()[-1], r"^=+ 1 passed")
            self.check_clean(again, more)
        passed = int(re.search(r"(\d+) passed", summary).group(1))  # type: ignore[union-attr]
        summary = re.sub(r"\d+ failed, \d+ passed", f"{passed + len(failed)} passed", summary)
        return output, summary


class FowldForwardingTests(RealServersMixin, TestCase):
    """Two fowld processes forward a port through the real servers (see module docstring)."""

    timeout = 300

    async def _forward(self, impl_a: str, impl_b: str) -> dict[str, Any]:
        reactor = self.reactor
        started = reactor.seconds()
        relay = f"tcp:127.0.0.1:{self.transit_relay.port}"
        mailbox_port = int(self.mailbox.url.rsplit(":", 1)[1].split("/")[0])
        far_out = stream_chunks(b"far", TOTAL)
        near_out = stream_chunks(b"near", TOTAL)
        server = _ServerFactory(
            [(far_out, TOTAL), (stream_chunks(b"far2", SECOND_TOTAL), SECOND_TOTAL)]
        )
        service = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server)
        self.addCleanup(service.stopListening)
        service_port = service.getHost().port

        scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, scratch)
        a = Fowld.start(reactor, "a", impl_a, self.mailbox.url, relay, scratch)
        b = Fowld.start(reactor, "b", impl_b, self.mailbox.url, relay, scratch)
        procs = [a, b]
        self.addCleanup(lambda: DeferredList([p.ended for p in procs]))
        for p in procs:
            self.addCleanup(p.stop)

        try:
            await a.next_message("welcome")
            a.send(kind="allocate-code")
            code = (await a.next_message("code-allocated"))["code"]
            await b.next_message("welcome")
            b.send(kind="set-code", code=code)
            await a.next_message("peer-connected")
            await b.next_message("peer-connected")
            a.send(kind="local", name="svc", remote_connect_port=service_port)
            b.send(kind="remote", name="svc")
            listening = await a.next_message("listening")
            near_port = int(listening["listening_port"])
            # b takes connections for "svc" only once it has read its command: a connection
            # that gets there first is refused ("against local policy"), and a loaded machine
            # can read b's stdin later than the link delivers a's first subchannel
            await b.next_message("awaiting-connect")

            # first connection: 64 MiB each way, the link cut once on the way
            near = Endpoint(near_out, TOTAL, close_when_done=False)
            await TCP4ClientEndpoint(reactor, "127.0.0.1", near_port).connect(
                Factory.forProtocol(lambda: near)
            )
            far = await server.connections.get()
            await far.when_received(TOTAL // 4)
            keep = {mailbox_port, near_port, service_port}
            cut = cut_links(a.pid or 0, keep)
            await DeferredList([near.done, far.done])
            self.assertEqual(far.hash.hexdigest(), digest(near_out), "near -> far corrupted")
            self.assertEqual(near.hash.hexdigest(), digest(far_out), "far -> near corrupted")
            far.transport.loseConnection()  # the far side closes ...
            eof_at = await near.eof.addTimeout(30, reactor)  # ... and the near client sees EOF
            self.assertEqual(eof_at, TOTAL)

            # second connection: the near side closes this time
            second_out = stream_chunks(b"near2", SECOND_TOTAL)
            near2 = Endpoint(second_out, SECOND_TOTAL, close_when_done=False)
            await TCP4ClientEndpoint(reactor, "127.0.0.1", near_port).connect(
                Factory.forProtocol(lambda: near2)
            )
            far2 = await server.connections.get()
            await DeferredList([near2.done, far2.done])
            self.assertEqual(far2.hash.hexdigest(), digest(second_out))
            near2.transport.loseConnection()
            await far2.eof.addTimeout(30, reactor)

            transfer_s = reactor.seconds() - started

            # fowld's JSON ping: its first answer, whatever it is
            seen = len(a.messages)
            a.send(kind="ping", ping_id=7)
            ping_reply = await self._first_reply(a, seen, ("pong", "error"))

            # clean exit
            for p in procs:
                p.send(kind="session-close")
            exits = await DeferredList([p.ended.addTimeout(30, reactor) for p in procs])
        except BaseException:
            for p in procs:
                print(p.tail(), file=sys.stderr)
            raise
        codes = [result for ok, result in exits]
        for p in procs:
            errors = p.stderr.decode("utf-8", "replace")
            self.assertNotIn("Traceback", errors, p.tail())
            self.assertNotIn("Unhandled", errors, p.tail())
        self.assertEqual(codes, [0, 0], [p.tail() for p in procs])
        for p in procs:
            if p.impl == "txdilation":
                self.check_exec_proof(p)
        reply = None if ping_reply is None else (ping_reply.get("kind"), ping_reply.get("message"))
        print(
            f"fowld {impl_a}/{impl_b}: 64 MiB each way, 1 link cut, EOF, second connection: "
            f"{transfer_s:.1f} s from start; ping answered with {reply}; exits {codes}"
        )
        return {"cut": cut, "ping": reply, "errors": {p.name: p.errors() for p in procs}}

    def check_exec_proof(self, proc: Fowld) -> None:
        """fowld under ``txdilation exec``: its one Python process proves it dilated through
        txdilation, and its first telemetry record names txdilation and its version."""
        assert proc.proof is not None and proc.events is not None
        [line] = proof_lines(proc.proof)
        self.assertEqual((line["pid"], line["took_effect"]), (proc.pid, True), line)
        self.assertEqual(line["implementation"], "txdilation")
        records = proof_lines(proc.events)
        self.assertEqual(records[0]["event"], "dilation_requested", records[:1])
        named = (records[0]["implementation"], records[0]["implementation_version"])
        self.assertEqual(named, ("txdilation", __version__))

    async def _first_reply(
        self, proc: Fowld, after: int, kinds: tuple[str, ...], timeout: float = 5.0
    ) -> dict[str, Any] | None:
        deadline = self.reactor.seconds() + timeout
        while self.reactor.seconds() < deadline:
            for message in proc.messages[after:]:
                if message.get("kind") in kinds:
                    return message
            await sleep(0.05, self.reactor)
        return None

    _stock_reference: dict[str, Any] | None = None

    async def stock_reference(self) -> dict[str, Any]:
        """The stock/stock run (once per test run): what stock shows fowld."""
        cls = type(self)
        if cls._stock_reference is None:
            cls._stock_reference = await self._forward("stock", "stock")
        return cls._stock_reference

    async def compare_with_stock(self, outcome: dict[str, Any]) -> None:
        """fowld reports no error stock does not report too, and answers ping as stock's."""
        reference = await self.stock_reference()
        self.assertTrue(outcome["cut"], "no dilated connection was found to cut")
        self.assertEqual(outcome["ping"], reference["ping"])
        for side, errors in outcome["errors"].items():
            extra = set(errors) - set(reference["errors"][side])
            self.assertEqual(extra, set(), f"fowld {side} reported errors stock does not")

    async def test_stock_both_sides(self) -> None:
        """stock/stock, the reference: forwarding works, a dilated connection was cut."""
        outcome = await self.stock_reference()
        self.assertTrue(outcome["cut"])

    async def test_txdilation_both_sides(self) -> None:
        """txdilation/txdilation: all of it, and fowld's ping is answered as stock answers it."""
        await self.compare_with_stock(await self._forward("txdilation", "txdilation"))

    async def test_txdilation_allocates_stock_joins(self) -> None:
        """txdilation (code, ``local``) with stock (``remote``)."""
        await self.compare_with_stock(await self._forward("txdilation", "stock"))

    async def test_stock_allocates_txdilation_joins(self) -> None:
        """stock (code, ``local``) with txdilation (``remote``)."""
        await self.compare_with_stock(await self._forward("stock", "txdilation"))
