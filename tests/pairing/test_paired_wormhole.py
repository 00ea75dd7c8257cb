"""PairedWormhole in-process, two sides through the real mailbox server and transit relay on
127.0.0.1: the code meeting writes both files; a side that stops and starts again from its file
meets the peer without a code; sides holding different generations meet on the newest they
share, and never when they share none; a half-stepped side is never pulled back by an older
copy; an unreachable mailbox server is reported."""

from __future__ import annotations

import collections
import gc
import os
from pathlib import Path
from typing import Any

from twisted.internet.protocol import Factory
from twisted.logger import globalLogBeginner
from twisted.trial.unittest import TestCase

import txdilation
from tests.pairing.support import records
from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import RealServersMixin
from tests.support.waits import sleep, wait_until
from txdilation.pairing import ratchet
from txdilation.pairing.pairing_options import PairingOptions
from txdilation.pairing.record import PairingRecord
from txdilation.pairing.store import PairingStore

APPID = "txdilation.test/pairing"
CODE = "7-pairing-test"


class Side:
    """One PairedWormhole and what it reported."""

    def __init__(self, test: Any, path: Path, *, cleanup: bool = True, **options: Any) -> None:
        from txdilation.pairing.paired_wormhole import PairedWormhole

        self.events: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[Any] = []
        opts = PairingOptions(
            path=str(path),
            appid=APPID,
            mailbox=test.mailbox.url,
            relay=(test.transit_relay.hint,),
            **options,
        )
        self.paired = PairedWormhole(
            test.reactor,
            opts,
            on_event=lambda kind, fields: self.events.append((kind, fields)),
            on_failed=self.failures.append,
        )
        if cleanup:
            test.addCleanup(self.paired.close)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


class PairedTests(RealServersMixin, TestCase):
    timeout = 60

    def setUp(self) -> Any:
        # a PairedWormhole installs txdilation for the process; the tests that follow in this
        # process must find stock's Dilation as they left it
        if not txdilation.is_installed():
            self.addCleanup(lambda: txdilation.uninstall() if txdilation.is_installed() else None)
        return super().setUp()

    def path(self, name: str) -> Path:
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        return directory / f"{name}.pairing"

    async def exchange(self, listening: Side, connecting: Side, payload: bytes) -> bytes:
        client = Client()
        await connecting.paired.connector_for("echo").connect(Factory.forProtocol(lambda: client))
        client.transport.write(payload)
        client.transport.loseWriteConnection()
        await client.eof
        return bytes(client.data)

    async def test_pair_then_meet_again(self) -> None:
        """Pair with a code: both files hold the same generation, each names the other, mode
        0600; one side closed and started again from its file meets the peer without a code
        and the forward works."""
        a_path, b_path = self.path("a"), self.path("b")
        a = Side(self, a_path, code=CODE)
        b = Side(self, b_path, code=CODE)
        await a.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        b.paired.start()
        await a.paired.when_dilated()
        await b.paired.when_dilated()
        self.assertEqual(await self.exchange(a, b, b"first"), b"first")
        ra, rb = PairingStore(a_path).load(), PairingStore(b_path).load()
        self.assertEqual(ra.current, rb.current)
        self.assertEqual(ra.peer.id, rb.me.id)
        self.assertEqual(os.stat(a_path).st_mode & 0o777, 0o600)

        await a.paired.close()
        a2 = Side(self, a_path)
        await a2.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a2.paired.start()
        await a2.paired.when_dilated()
        self.assertEqual(await self.exchange(a2, b, b"second"), b"second")

    def files(self, a: PairingRecord, b: PairingRecord) -> tuple[Path, Path]:
        paths = self.path("a"), self.path("b")
        for path, record in zip(paths, (a, b), strict=True):
            PairingStore(path).save(record)
        return paths

    async def test_one_generation_apart_meet_on_the_newer(self) -> None:
        """A holds generation 0 and a pending 1, B holds only 1 (B committed, A crashed before
        hearing it): they meet on 1, both commit it, then the next step takes both to 2."""
        a0, b0 = records(self.mailbox.url)
        a1 = ratchet.stage(a0, b"n" * 32)
        assert a1.pending is not None
        b1 = ratchet.commit(ratchet.stage(b0, b"n" * 32), a1.pending.fingerprint)
        a_path, b_path = self.files(a1, b1)
        a, b = Side(self, a_path), Side(self, b_path)
        await a.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        b.paired.start()
        await a.paired.when_dilated()
        self.assertEqual(await self.exchange(a, b, b"one apart"), b"one apart")
        meetings = [f["generation"] for k, f in a.events if k == "meeting"]
        self.assertEqual(set(meetings), {1})
        while "ratchet" not in a.kinds() or "ratchet" not in b.kinds():
            await sleep(0.05, self.reactor)
        ra, rb = PairingStore(a_path).load(), PairingStore(b_path).load()
        self.assertEqual((ra.current, rb.current), (rb.current, ra.current))
        self.assertEqual(ra.current.number, 2)

    async def test_no_generation_in_common_never_meets(self) -> None:
        """A still at generation 0 (a file from before), B at 1 only: they never meet, and B's
        file is left as it was. Not a wait of a fixed time: B, started first, stays unmet for as
        long as a copy of B's old file (generation 0, started after it) takes to meet A, so a
        meeting on no common generation would have had the time to happen."""
        a0, b0 = records(self.mailbox.url)
        staged = ratchet.stage(b0, b"n" * 32)
        assert staged.pending is not None
        b1 = ratchet.commit(staged, staged.pending.fingerprint)
        a_path, b_path = self.files(a0, b1)
        a, b = Side(self, a_path), Side(self, b_path)
        await a.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        b.paired.start()
        old_b = Side(self, self.files(b0, b0)[0])
        old_b.paired.start()
        await a.paired.when_dilated()
        self.assertEqual(await self.exchange(a, old_b, b"on generation 0"), b"on generation 0")
        self.assertEqual({f["generation"] for k, f in a.events if k == "meeting"}, {0})
        self.assertNotIn("meeting", b.kinds())
        self.assertNotIn("reconnected", b.kinds())
        self.assertEqual(b.failures, [])
        self.assertEqual(PairingStore(b_path).load().current, b1.current)

    async def test_rollback_refused(self) -> None:
        """A holds generation G and a pending G+1 (B committed G+1, A crashed before hearing
        it). A copy of B's file from before that meeting (G only) never meets A: A reports it
        (it proves no receipt of the last meeting) and still holds G+1; the real B then meets A
        on G+1, and A's meetings, from the start to then, were all on G+1 (none with the
        copy)."""
        a0, b0 = records(self.mailbox.url)
        receipt, secret = os.urandom(32), b"n" * 32
        fp = a0.current.fingerprint
        a1 = ratchet.stage(ratchet.confirm(ratchet.met(a0, fp, receipt, 2.0)), secret)
        assert a1.pending is not None
        b1 = ratchet.stage(ratchet.confirm(ratchet.met(b0, fp, receipt, 2.0)), secret)
        b1 = ratchet.commit(b1, a1.pending.fingerprint)
        a_path, stolen_path = self.files(a1, b0)
        a, thief = Side(self, a_path), Side(self, stolen_path)
        await a.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        thief.paired.start()
        await wait_until(
            lambda: any(f.get("cause") == "impostor" for k, f in a.events),
            10.0,
            "A to report the old copy",
        )
        reported = [f for k, f in a.events if f.get("cause") == "impostor"]
        self.assertTrue(reported, a.events)
        self.assertIn("receipt", reported[0]["message"])
        self.assertEqual(PairingStore(a_path).load().pending, a1.pending)
        await thief.paired.close()
        b_path = self.files(b1, b1)[0]
        b = Side(self, b_path)
        b.paired.start()
        await a.paired.when_dilated()
        self.assertEqual(await self.exchange(a, b, b"no rollback"), b"no rollback")
        # A went to meetings on G+1 only, all along: never to the copy's, whose only generation
        # is G (the copy may go to one, A never comes)
        self.assertEqual({f["generation"] for k, f in a.events if k == "meeting"}, {1})
        self.assertNotIn("reconnected", thief.kinds())

    async def test_unreachable_mailbox_is_reported(self) -> None:
        """A pairing whose mailbox server cannot be reached: one warning saying so (it keeps
        trying), no failure."""
        a0, _ = records("ws://127.0.0.1:1/v1")
        a_path = self.path("a")
        PairingStore(a_path).save(a0)
        a = Side(self, a_path)
        a.paired.start()
        while "warning" not in a.kinds():
            await sleep(0.05, self.reactor)
        warning = dict(a.events)["warning"]
        self.assertIn("cannot reach the mailbox server", warning["message"])
        self.assertEqual(a.failures, [])

    async def test_nothing_accumulates_over_restarts(self) -> None:
        """One side closed and started again twelve times: the live meetings, wormholes,
        Managers, conductors and lobbies of the process are as many after twelve as after
        four (each ended meeting is let go)."""
        a_path, b_path = self.path("a"), self.path("b")
        a, b = Side(self, a_path, cleanup=False, code=CODE), Side(self, b_path, code=CODE)
        current = [a]
        self.addCleanup(lambda: current[0].paired.close())
        await b.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        b.paired.start()
        await a.paired.when_dilated()
        counts: dict[int, collections.Counter[str]] = {}
        for number in range(1, 13):
            await a.paired.close()
            a = current[0] = Side(self, a_path, cleanup=False)
            a.paired.start()
            await a.paired.when_dilated()
            self.assertEqual(await self.exchange(b, a, b"x"), b"x")
            if number in (4, 12):
                await sleep(1.0, self.reactor)  # closes finish
                _forget_buffered_log_events()
                gc.collect()
                counts[number] = collections.Counter(
                    type(o).__name__ for o in gc.get_objects() if type(o).__name__ in _TRACKED
                )
        for name in _TRACKED:
            self.assertLessEqual(counts[12][name], counts[4][name] + 2, (name, counts))


def _forget_buffered_log_events() -> None:
    """Until logging begins (trial begins it, pytest does not), Twisted keeps the last 65,536
    log events, and every object an event names: a factory's "Starting factory" event keeps the
    factory and, through it, a whole ended wormhole. A real process begins logging at once (see
    ``txdilation.session.foreground``), so the count drops that history (Twisted's private
    buffer: nothing public empties it) to see what the code itself keeps."""
    observer = getattr(globalLogBeginner, "_initialBuffer", None)
    buffer = getattr(observer, "_buffer", None)
    if buffer is not None:
        buffer.clear()


_TRACKED = ("Meeting", "Boss", "Manager", "Conductor", "Lobby", "Multiplexer")
