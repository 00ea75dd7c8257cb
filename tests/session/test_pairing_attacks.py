"""Attacks on a pairing, with real ``txdilation run`` processes through the real mailbox server
and transit relay on 127.0.0.1 (docs/security.md section 6 names each test):

- a squatter who read a rendezvous id and its sides from the server's channel database closes
  it as those sides and crowds it, before and during restarts: the pair meets again;
- a thief runs a copy of B's current file next to A and B: both report it, step the secret on,
  and across restarts of A the copy never meets A and no forwarded byte reaches it;
- a 10 MB message and 10,000 messages posted in a rendezvous: one line each side, the pair
  meets again, memory bounded;
- after ``pairing forget`` the original code pairs this side with nobody unless
  ``--pair-again``;
- two processes started on one pairing file at once: one refuses in one line, and the file is
  not written back stale.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory
from twisted.trial.unittest import TestCase

from tests.session.lobby_attacks import flood, lobby_ids, squat
from tests.session.pairing_support import APPID, PairedProcessesMixin
from tests.session.test_processes import STOP_WITHIN
from tests.session.test_service import HalfCloseEcho
from tests.support.harness import LOOPBACK
from tests.support.waits import sleep
from txdilation.pairing.hello import BODY_LENGTH
from txdilation.pairing.store import PairingStore
from txdilation.session.child import SessionProcess, run_command, spawn_session


def warnings_of(process: SessionProcess, cause: str) -> list[dict[str, Any]]:
    return [e for e in process.of_kind("warning") if e.get("cause") == cause]


def peak_rss_kib(process: SessionProcess) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    with open(f"/proc/{process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


class CountingEcho(HalfCloseEcho):
    connections = 0

    def connectionMade(self) -> None:
        CountingEcho.connections += 1
        super().connectionMade()


@pytest.mark.slow
class PairingAttackSlowTests(PairedProcessesMixin, TestCase):
    """See the module docstring."""

    timeout = 240

    async def restart_a(self, a: SessionProcess) -> SessionProcess:
        await self.kill(a)
        return self.side("A")

    async def a_rendezvous(self) -> tuple[str, list[str]]:
        """A rendezvous of the current generation, with both sides, as the channel database
        shows it (waiting until both sides opened it)."""
        for _ in range(200):
            lobbies = lobby_ids(self.mailbox, self.paths["A"])
            both = [(k, v) for k, v in lobbies.items() if len(v) == 2]
            if both:
                return both[0]
            await sleep(0.05, self.reactor)
        self.fail(f"no rendezvous with two sides in the channel database: {lobbies}")

    async def test_squatter_cannot_lock_the_pair_out(self) -> None:
        """Five times: the squatter takes a rendezvous id and its sides from the channel
        database, closes it as those sides and opens it as two others (crowded), A is killed
        and started again, and the squatter does it all again while A starts: each time A
        meets B again and the forward works; the restarted A says what happened to the
        rendezvous (one warning naming the cause, no advice about a leaked secret)."""
        await self.start_pairing_services()
        a, b = await self.pair()
        for number in range(5):
            lobby, sides = await self.a_rendezvous()
            await squat(self.reactor, self.mailbox, APPID, lobby, sides)
            a = await self.restart_a(a)
            await squat(self.reactor, self.mailbox, APPID, lobby, sides)
            payload = f"squatted {number}".encode()
            self.assertEqual(await self.echo(a, payload), payload)
            await self.reconnected(a)
        for warning in warnings_of(a, "rendezvous"):
            self.assertNotIn("secret", warning["message"])
        await self.stop_all(a, b)

    async def test_thief_with_a_copy_of_b_meets_nobody(self) -> None:
        """A copy of B's current file runs (as B, forwarding to a service of its own) while A
        and B run: A checks with B through their meeting, both report the impostor (status
        and log), and they step the secret on; then A is killed and started again three
        times: it meets B each time, the copy never meets anyone, and no connection ever
        reaches the copy's service."""
        await self.start_pairing_services()
        a, b = await self.pair()
        self.assertEqual(await self.echo(a, b"before"), b"before")
        CountingEcho.connections = 0
        thief_port = await self.service(Factory.forProtocol(CountingEcho))
        stolen = self.directory / "stolen.pairing"
        shutil.copy2(self.paths["B"], stolen)
        seen_a, seen_b = len(a.events), len(b.events)
        thief = spawn_session(self.reactor, "thief", [
            *run_command(), "--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-",
            "--relay", self.transit_relay.hint, "--pairing", str(stolen),
            "--connect", f"echo=tcp:{LOOPBACK}:{thief_port}",
        ])  # fmt: skip
        self.processes = [*self.processes, thief]
        self.addCleanup(thief.terminate, self.reactor, STOP_WITHIN)
        for side, seen in ((a, seen_a), (b, seen_b)):

            def impostor(event: dict[str, Any]) -> bool:
                return event.get("cause") == "impostor"

            warning = await self.within(
                side.next_event("warning", impostor, after=seen), f"{side.name} reports it"
            )
            self.assertIn("copy", warning["message"] + warning["advice"])
            await self.within(side.next_event("ratchet", after=seen), f"{side.name} steps on")
        first_a = a
        for number in range(3):
            a = await self.restart_a(a)
            payload = f"restart {number} with a thief".encode()
            self.assertEqual(await self.echo(a, payload), payload)
        for kind in ("reconnected", "dilated", "paired"):
            self.assertEqual(thief.of_kind(kind), [], thief.tail())
        self.assertEqual(CountingEcho.connections, 0)
        self.assertIn("impostor", b.stderr + "".join(str(e) for e in b.events))
        self.assertIn("copy of", b.stderr)
        self.assertIn("claiming to be the paired peer", first_a.stderr)
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertEqual(ra.current, rb.current)
        self.assertNotIn(ra.current, PairingStore(stolen).load().held())
        await self.stop_all(a, b, thief)

    async def test_flooded_rendezvous(self) -> None:
        """Someone bound as a side it saw posts a 10 MB message and 10,000 messages in each
        rendezvous of the current generation: each side moves on with one warning per
        rendezvous (not one per message), A killed and started again meets B, and the
        restarted A's peak memory stays bounded."""
        await self.start_pairing_services()
        a, b = await self.pair()
        bodies = [os.urandom(BODY_LENGTH // 2).hex() for _ in range(10_000)]
        await self.a_rendezvous()
        for lobby, sides in lobby_ids(self.mailbox, self.paths["A"]).items():
            await flood(self.reactor, self.mailbox, APPID, lobby, sides[0], ["ab" * 5_000_000])
            await flood(self.reactor, self.mailbox, APPID, lobby, sides[0], bodies)
        a = await self.restart_a(a)
        self.assertEqual(await self.echo(a, b"after the flood"), b"after the flood")
        await sleep(1.0, self.reactor)
        for side in (a, b):
            self.assertLessEqual(len(warnings_of(side, "rendezvous")), 8, side.tail())
        self.assertLess(peak_rss_kib(a), 200 * 1024)
        self.assertLess(peak_rss_kib(b), 200 * 1024)
        await self.stop_all(a, b)

    async def test_forgotten_pairing_and_the_original_code(self) -> None:
        """After ``pairing forget`` on B, B started again with its original code (on the
        command line) is refused in one line before anything is sent, so a stranger waiting
        with that code meets nobody; with ``--pair-again`` it pairs on purpose."""
        await self.start_pairing_services()
        a = self.side("A", "--allocate-code")
        code = (await self.within(a.next_event("code"), "A's code"))["code"]
        b = self.side("B", "--code", code)
        await self.within(b.next_event("paired"), "B paired")
        await self.stop_all(a, b)
        command = [*run_command()[:-1], "pairing", "forget", str(self.paths["B"])]
        forget = spawn_session(self.reactor, "forget", command)
        await self.within(forget.ended, "forget")
        self.assertFalse(self.paths["B"].exists())
        stranger = spawn_session(self.reactor, "stranger", [
            *run_command(), "--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-",
            "--pairing", str(self.directory / "stranger.pairing"), "--code", code,
            "--listen", f"echo=tcp:0:interface={LOOPBACK}",
        ])  # fmt: skip
        self.processes = [*self.processes, stranger]
        self.addCleanup(stranger.terminate, self.reactor, STOP_WITHIN)
        again = self.side("B", "--code", code)
        self.assertEqual(await self.within(again.ended, "B refused"), 2)
        lines = again.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, again.stderr)
        self.assertIn("already paired from the code", lines[0])
        self.assertEqual(stranger.of_kind("peer-connected"), [])
        again = self.side("B", "--code", code, "--pair-again")
        await self.within(again.next_event("paired"), "B paired again on purpose")
        await self.within(stranger.next_event("paired"), "the stranger paired with it")
        await self.stop_all(again, stranger)

    async def test_two_processes_on_one_file(self) -> None:
        """Two processes started at once on A's pairing file: one refuses in one line (the file
        is in use), the other meets B; the file counts exactly one more start, and the
        refused one wrote nothing."""
        await self.start_pairing_services()
        a, b = await self.pair()
        await self.kill(a)
        before = PairingStore(self.paths["A"]).load()
        first, second = self.side("A"), self.side("A")
        done = await self.within(
            Deferred.fromCoroutine(_first_ended(self.reactor, first, second)),
            "one of the two refused",
        )
        refused, running = (first, second) if done is first else (second, first)
        self.assertEqual(refused.exit_code, 1, refused.tail())
        errors = refused.of_kind("error")
        self.assertEqual(len(errors), 1, refused.tail())
        self.assertIn("in use by another process", errors[0]["message"])
        self.assertEqual(await self.echo(running, b"one of two"), b"one of two")
        after = PairingStore(self.paths["A"]).load()
        self.assertEqual(after.counter, before.counter + 1)
        await self.stop_all(running, b)


async def _first_ended(reactor: Any, *processes: SessionProcess) -> SessionProcess:
    while True:
        for process in processes:
            if not process.running:
                return process
        await sleep(0.05, reactor)
