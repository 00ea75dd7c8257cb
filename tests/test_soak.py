"""Soak: many short pairs of ``txdilation run`` processes, link cuts at random moments, every
byte counted and hashed.

Each pair is the setup of ``txdilation demo`` (docs/command.md) with both directions in use:
session A allocates a code and listens (``--listen soak=...``), session B joins and forwards
subchannels named ``soak`` to a local service; the test connects a client to A and the client
and the service each send a random amount derived from their own seed (half-close passes the
end of each stream through). While the bytes flow the link is cut (SIGUSR2) in A or B at random
moments: some when the client reached a random byte count (so its earlier bytes are in flight),
some on timers, two sometimes in a row without waiting for the reconnection; some pairs are
relay-only. Every stream must arrive exactly: the receiver's byte count equals the sender's
total and its SHA-256 equals the sender's. Both sessions must then stop with exit status 0.
The starved variant runs the same soak while two busy-looping processes compete for the CPU
(issue 14: no stall under starvation).

The random choices come from ``TXDILATION_SOAK_SEED`` when set (else a fresh seed, printed in
every failure message) so a failing run can be repeated; ``TXDILATION_SOAK_PAIRS`` (default 20)
sets the number of pairs, e.g. 500 for a long soak by hand.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest
from twisted.internet.defer import Deferred, DeferredSemaphore, gatherResults
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.trial.unittest import TestCase

from tests.support.harness import LOOPBACK, RealServersMixin
from tests.support.hogs import start_hogs
from tests.support.waits import sleep
from txdilation.demo.exchange import Exchange, ExchangeFactory
from txdilation.session.child import SessionProcess, run_command, spawn_session

MiB = 2**20
APPID = "txdilation.test/soak"
#: pairs per run; ``TXDILATION_SOAK_PAIRS`` raises it for a long soak outside CI
PAIRS = int(os.environ.get("TXDILATION_SOAK_PAIRS") or 20)
AT_ONCE = 3  # pairs running at the same time (2 cores: each pair is two processes)
PAIR_WITHIN = 45.0  # seconds one pair may take, start to stop


@dataclass
class Plan:
    """What one pair does (drawn from the seeded generator)."""

    number: int
    up: int  # bytes the client sends (through A, the wormhole, B, to the service)
    down: int  # bytes the service sends back
    relay_only: bool
    held_cuts: list[tuple[float, int]]  # (fraction of ``up`` reached, victim 0=A 1=B)
    timed_cuts: list[tuple[float, int]]  # (seconds after the client connected, victim)
    double: bool  # the first held cut is followed at once by a cut of the other side

    @classmethod
    def draw(cls, rng: random.Random, number: int) -> Plan:
        held = sorted((rng.uniform(0.05, 0.95), rng.randrange(2)) for _ in range(rng.randint(1, 2)))
        timed = [(rng.uniform(0.0, 0.5), rng.randrange(2)) for _ in range(rng.randint(0, 2))]
        return cls(
            number=number,
            up=rng.randint(1, 6 * MiB),
            down=rng.choice([0, rng.randint(1, 3 * MiB)]),
            relay_only=rng.random() < 0.25,
            held_cuts=held,
            timed_cuts=timed,
            double=rng.random() < 0.3,
        )


@dataclass
class Outcome:
    plan: Plan
    cuts: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


@pytest.mark.slow
class SoakSlowTests(RealServersMixin, TestCase):
    """PAIRS short session pairs, AT_ONCE at a time, with random link cuts."""

    timeout = 120 + 6 * PAIRS  # about 3 s per pair on 2 idle cores; the bound is generous

    async def test_random_cuts_exact_bytes(self) -> None:
        """Every pair's two streams arrive with exactly the sender's byte count and SHA-256
        despite its link cuts (held at a random byte count, on random timers, twice in a row),
        direct and relay-only; both sessions of every pair exit 0."""
        seed = int(os.environ.get("TXDILATION_SOAK_SEED") or random.randrange(2**32))
        rng = random.Random(seed)
        plans = [Plan.draw(rng, n) for n in range(PAIRS)]
        limit = DeferredSemaphore(AT_ONCE)
        runs = [limit.run(lambda p=p: Deferred.fromCoroutine(self.pair(p))) for p in plans]
        outcomes: list[Outcome] = await gatherResults(runs, consumeErrors=True)
        problems = [f"pair {o.plan}: {p}" for o in outcomes for p in o.problems]
        cuts = sum(o.cuts for o in outcomes)
        moved = sum(o.plan.up + o.plan.down for o in outcomes)
        slowest = max(outcomes, key=lambda o: o.seconds)
        print(
            f"\nsoak seed {seed}: {PAIRS} pairs, {cuts} link cuts, {moved / MiB:.1f} MiB verified;"
            f" slowest pair {slowest.plan.number} took {slowest.seconds:.1f} s"
        )
        if problems:
            self.fail(f"TXDILATION_SOAK_SEED={seed}\n" + "\n\n".join(problems))
        self.assertGreaterEqual(cuts, PAIRS)

    async def pair(self, plan: Plan) -> Outcome:
        """Run one pair (see the module docstring); problems are collected, not raised."""
        outcome = Outcome(plan)
        sessions: list[SessionProcess] = []
        started = self.reactor.seconds()

        def kill() -> None:
            tails = "\n".join(s.tail() for s in sessions)
            outcome.problems.append(f"still running after {PAIR_WITHIN:g} s: killed\n{tails}")
            for s in sessions:
                s.signal("KILL")

        timer = self.reactor.callLater(PAIR_WITHIN, kill)
        try:
            await self._pair(plan, outcome, sessions)
        except Exception as e:
            tails = "\n".join(s.tail() for s in sessions)
            outcome.problems.append(f"{type(e).__name__}: {e}\n{tails}")
        finally:
            outcome.seconds = self.reactor.seconds() - started
            if outcome.problems:
                outcome.problems.append(f"(pair ran {outcome.seconds:.1f} s)")
            if timer.active():
                timer.cancel()
            for session in sessions:
                await session.terminate(self.reactor, timeout=10.0)
        return outcome

    async def _pair(self, plan: Plan, outcome: Outcome, sessions: list[SessionProcess]) -> None:
        reactor = self.reactor
        service = ExchangeFactory(reactor, b"service %d" % plan.number, plan.down)
        port = await TCP4ServerEndpoint(reactor, 0, interface=LOOPBACK).listen(service)
        self.addCleanup(port.stopListening)
        common = ["--mailbox", self.mailbox.url, "--appid", f"{APPID}/{plan.number}"]
        common += ["--relay", self.transit_relay.hint, "--status", "-"]
        if plan.relay_only:
            common.append("--no-listen")
        a = spawn_session(reactor, f"A{plan.number}", [
            *run_command(), *common, "--allocate-code",
            "--listen", f"soak=tcp:0:interface={LOOPBACK}",
        ])  # fmt: skip
        sessions.append(a)
        code = (await a.next_event("code"))["code"]
        listening = (await a.next_event("listening"))["address"]
        b = spawn_session(reactor, f"B{plan.number}", [
            *run_command(), *common, "--code", code,
            "--connect", f"soak=tcp:{LOOPBACK}:{port.getHost().port}",
        ])  # fmt: skip
        sessions.append(b)
        await a.next_event("dilated")
        await b.next_event("dilated")

        def cut(victim: int) -> None:
            if sessions[victim].signal("USR2"):
                outcome.cuts += 1

        client = Exchange(reactor, b"client %d" % plan.number, plan.up)
        endpoint = TCP4ClientEndpoint(reactor, LOOPBACK, int(listening.rsplit(":", 1)[1]))
        held = client.hold_at(int(plan.up * plan.held_cuts[0][0]))
        await connectProtocol(endpoint, client)
        timers = [reactor.callLater(delay, cut, victim) for delay, victim in plan.timed_cuts]
        for number, (fraction, victim) in enumerate(plan.held_cuts):
            await (held if number == 0 else client.hold_at(int(plan.up * fraction)))
            cut(victim)
            if number == 0 and plan.double:
                cut(1 - victim)
            client.release()
        await client.done
        give_up = reactor.seconds() + PAIR_WITHIN
        while not (service.built and service.built[0].done.called):
            if reactor.seconds() > give_up:
                raise AssertionError("the service's stream never ended")
            await sleep(0.01, reactor)
        for t in timers:
            if t.active():
                t.cancel()
        server = service.built[0]
        for what, sender, receiver in (("up", client, server), ("down", server, client)):
            if receiver.received != sender.send_total or sender.sent != sender.send_total:
                outcome.problems.append(
                    f"{what}: sent {sender.sent} of {sender.send_total}, "
                    f"received {receiver.received} ({receiver.received - sender.sent:+d})"
                )
            elif receiver.received_digest.digest() != sender.sent_digest.digest():
                outcome.problems.append(f"{what}: {receiver.received} bytes, SHA-256 differs")
        codes = [await s.terminate(reactor, timeout=10.0) for s in sessions]
        if not all(s.stopped_cleanly for s in sessions):  # 0, or 143 after our SIGTERM
            outcome.problems.append(f"exit codes {codes}\n" + "\n".join(s.tail() for s in sessions))
        for s in sessions:
            if "Traceback" in s.stderr:
                outcome.problems.append(f"{s.name} logged a traceback:\n{s.tail()}")


@pytest.mark.slow
class StarvedSoakSlowTests(SoakSlowTests):
    """The same soak while two CPU hogs (started and stopped by the test) compete with every
    pair's processes for the machine's cores."""

    HOGS = 2
    timeout = 120 + 12 * PAIRS  # twice the unstarved bound per pair

    def setUp(self) -> Deferred[None]:
        started = super().setUp()
        self.addCleanup(start_hogs(self.HOGS, lifetime=self.timeout + 30))
        return started
