"""Paired sessions as real processes (``txdilation run --pairing``) through the real mailbox
server and transit relay: SIGKILL and restart either side, both sides, crashes inside the
ratchet step; each time the forward works again without a code."""

from __future__ import annotations

import shutil
import signal
import time
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.session.pairing_support import APPID, PairedProcessesMixin
from tests.session.test_processes import STOP_WITHIN
from tests.support.harness import LOOPBACK, _spawn_peer
from tests.support.waits import sleep
from txdilation.pairing.store import PairingStore
from txdilation.session.child import SessionProcess, run_command, spawn_session
from txdilation.session.paired_session import FAULT_VARIABLE


@pytest.mark.slow
class PairedRestartSlowTests(PairedProcessesMixin, TestCase):
    """Pair once with a code, then restart without one."""

    timeout = 180

    async def test_both_down_restarted_in_both_orders(self) -> None:
        """Pair; kill both; the mailbox server forgets everything nobody listens to (as an
        hour apart would); start B, then A: the forward works; kill both again, forget again,
        start A, then B: it works again; both files end at the same generation."""
        await self.start_pairing_services()
        a, b = await self.pair()
        for first, second in (("B", "A"), ("A", "B")):
            await self.kill(a)
            await self.kill(b)
            self.forget_unattended_mailboxes()
            started = {first: self.side(first)}
            await self.within(started[first].next_event("waiting"), f"{first} waiting")
            started[second] = self.side(second)
            a, b = started["A"], started["B"]
            payload = f"{first} first, then {second}".encode()
            self.assertEqual(await self.echo(a, payload), payload)
            await self.reconnected(started[second])
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertEqual(ra.current, rb.current)
        await self.stop_all(a, b)

    async def test_crash_inside_the_ratchet_step(self) -> None:
        """B restarted with a crash right after it commits the next generation, A restarted
        with a crash right after it stages one (before telling B): each dies there (SIGKILL,
        by itself), and started again without the fault it meets the peer and forwards."""
        await self.start_pairing_services()
        a, b = await self.pair()
        await self.kill(b)
        crashing = self.side("B", env={FAULT_VARIABLE: "committed"})
        await self.within(crashing.ended, "B crashing after its commit")
        self.assertEqual(crashing.exit_signal, signal.SIGKILL, crashing.tail())
        self.assertIsNone(PairingStore(self.paths["B"]).load().pending)
        b = self.side("B")
        self.assertEqual(await self.echo(a, b"B crashed in its step"), b"B crashed in its step")

        await self.kill(a)
        seen = len(b.events)
        crashing = self.side("A", env={FAULT_VARIABLE: "pending-stored"})
        await self.within(crashing.ended, "A crashing after staging")
        self.assertEqual(crashing.exit_signal, signal.SIGKILL, crashing.tail())
        self.assertIsNotNone(PairingStore(self.paths["A"]).load().pending)
        a = self.side("A")
        self.assertEqual(await self.echo(a, b"A crashed in its step"), b"A crashed in its step")
        await self.within(a.next_event("ratchet"), "A's next step")
        await self.within(b.next_event("ratchet", after=seen), "B's next step")
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertEqual(ra.current, rb.current)
        await self.stop_all(a, b)

    async def test_sigkill_and_restart_twenty_times(self) -> None:
        """Pair; SIGKILL A and start it again without a code: the forward works, A says it
        reconnected after its own restart and B says the peer restarted; a connection B's
        forward had open to the dead A is reset with reason ``peer-restarted``; then the same
        with B killed; then eighteen more SIGKILLs and restarts, A and B in turn: each time the
        forward works again, the secret moves on, and both files stay in step."""
        await self.start_pairing_services()
        a, b = await self.pair()
        self.assertEqual(await self.echo(a, b"paired"), b"paired")

        await self.kill(a)
        seen = len(b.events)
        a = self.side("A")
        self.assertEqual(await self.echo(a, b"after A restarted"), b"after A restarted")
        self.assertEqual((await self.reconnected(a))["restarted"], "self")
        self.assertEqual((await self.reconnected(b, seen))["restarted"], "peer")
        self.assertTrue(b.of_kind("peer-restarted"), b.tail())

        held = await self.within(self.held_open(a), "a connection held open")
        await self.within(
            b.next_event("subchannel-opened", after=seen), "B forwards the held connection"
        )
        await self.kill(b)
        seen = len(a.events)
        b = self.side("B")
        self.assertEqual(await self.echo(a, b"after B restarted"), b"after B restarted")
        await self.within(held.lost, "the held connection ended")
        closed = await self.within(
            a.next_event(
                "subchannel-closed", lambda e: e["reason"] == "peer-restarted", after=seen
            ),
            "A closes the held forward",
        )
        self.assertEqual(closed["name"], "echo")
        self.assertEqual((await self.reconnected(a, seen))["restarted"], "peer")

        for number in range(2, 20):
            name = "AB"[number % 2]
            await self.kill(a if name == "A" else b)
            restarted = self.side(name)
            a, b = (restarted, b) if name == "A" else (a, restarted)
            payload = f"restart {number + 1} of {name}".encode()
            self.assertEqual(await self.echo(a, payload), payload)
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertEqual(ra.current, rb.current)
        self.assertGreaterEqual(ra.current.number, 19)
        self.assertEqual(ra.counter + rb.counter, 2 + 20)
        await self.stop_all(a, b)

    def forget_unattended_mailboxes(self) -> None:
        """What the mailbox server does to mailboxes nobody listened to for 11 minutes."""
        now = time.time()
        self.mailbox.server.prune_all_apps(now=now, old=now + 1)


@pytest.mark.slow
class PairingRefusalSlowTests(PairedProcessesMixin, TestCase):
    """What must never connect: an old copy of a pairing file, the original code, a stale
    file; and a stock peer is refused up front."""

    timeout = 180

    async def test_stolen_stale_and_original_code(self) -> None:
        """A copy of A's file taken before a meeting, used by a third process after it, never
        meets B; a third process with the original code never meets anyone; B restarted from a
        stale copy of its file (from before the meeting) waits and never meets A (its meeting
        attempts find nobody: the files hold different generations), and with its own file
        back it meets A again. All the while the pairing forwards."""
        await self.start_pairing_services()
        a = self.side("A", "--allocate-code")
        code = (await self.within(a.next_event("code"), "A's code"))["code"]
        b = self.side("B", "--code", code)
        for process in (a, b):
            await self.within(process.next_event("dilated"), f"{process.name} dilated")
        stolen = self.directory / "stolen.pairing"
        stale_b = self.directory / "stale-b.pairing"
        shutil.copy2(self.paths["A"], stolen)
        shutil.copy2(self.paths["B"], stale_b)
        await self.kill(a)
        seen = len(b.events)
        a = self.side("A")
        await self.within(b.next_event("ratchet", after=seen), "the meeting's ratchet step")

        thief = self.stranger("thief", "--pairing", str(stolen))
        coder = self.stranger("coder", "--code", code)
        await self.within(thief.next_event("waiting"), "the thief waiting")
        self.assertEqual(await self.echo(a, b"while the thief waits"), b"while the thief waits")
        await sleep(1.5, self.reactor)
        for stranger in (thief, coder):
            for kind in ("peer-connected", "reconnected", "dilated"):
                self.assertEqual(stranger.of_kind(kind), [], stranger.tail())
        await self.stop_all(thief, coder)

        good_b = self.directory / "good-b.pairing"
        await self.kill(b)
        shutil.copy2(self.paths["B"], good_b)
        shutil.copy2(stale_b, self.paths["B"])
        b = self.side("B")
        await self.within(b.next_event("waiting"), "B waiting with its stale file")
        await sleep(1.5, self.reactor)
        self.assertEqual(b.of_kind("reconnected") + b.of_kind("dilated"), [], b.tail())
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertGreater(ra.current.number, rb.current.number)
        await self.kill(b)
        shutil.copy2(good_b, self.paths["B"])
        b = self.side("B")
        self.assertEqual(await self.echo(a, b"good file back"), b"good file back")
        await self.stop_all(a, b)

    def stranger(self, name: str, *args: str) -> SessionProcess:
        """A third session (``--connect`` to the echo service) with ``args``."""
        argv = [
            *run_command(),
            "--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-",
            "--connect", f"echo=tcp:{LOOPBACK}:{self.echo_port}", *args,
        ]  # fmt: skip
        process = spawn_session(self.reactor, name, argv)
        self.processes = [*getattr(self, "processes", []), process]
        self.addCleanup(process.terminate, self.reactor, STOP_WITHIN)
        return process

    async def test_stock_peer_refused(self) -> None:
        """A stock magic-wormhole peer (allocating the code) and a session with --pairing: the
        session fails at once with one fatal error saying the peer does not pair, exits 1, and
        writes no pairing file; the stock peer never gets a pairing message (it only ever sees
        the wormhole close)."""
        await self.start_pairing_services()
        got_code: Deferred[str] = Deferred()

        def on_event(proc: Any, event: dict[str, Any]) -> None:
            if event.get("event") == "code" and not got_code.called:
                got_code.callback(event["code"])

        stock = _spawn_peer(
            self.reactor,
            "stock",
            ["--mailbox", self.mailbox.url, "--appid", APPID, "--allocate", "--impl", "stock",
             "--scenario", "echo-server", "--subprotocols", "echo", "--timeout", "30"],
            on_event,
        )  # fmt: skip
        self.addCleanup(lambda: stock.ended)
        self.addCleanup(stock.kill)
        code = await self.within(got_code, "the stock peer's code")
        session = self.side("A", "--code", code)
        self.assertEqual(await self.within(session.ended, "the session's end"), 1)
        errors = session.of_kind("error")
        self.assertEqual(len(errors), 1, session.tail())
        self.assertIn("the peer does not pair", errors[0]["message"])
        self.assertEqual(errors[0]["where"], "pairing")
        self.assertEqual(session.of_kind("dilated"), [])
        self.assertFalse(self.paths["A"].exists())
