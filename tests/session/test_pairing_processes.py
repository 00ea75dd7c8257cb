"""Paired sessions as real processes (``txdilation run --pairing``) through the real mailbox
server and transit relay: SIGKILL and restart either side, both sides, crashes inside the
ratchet step; each time the forward works again without a code."""

from __future__ import annotations

import pytest
from twisted.trial.unittest import TestCase

from tests.session.pairing_support import PairedProcessesMixin
from txdilation.pairing.store import PairingStore


@pytest.mark.slow
class PairedRestartSlowTests(PairedProcessesMixin, TestCase):
    """Pair once with a code, then restart without one."""

    timeout = 180

    async def test_sigkill_and_restart_each_side(self) -> None:
        """Pair; SIGKILL A and start it again without a code: the forward works, A says it
        reconnected after its own restart and B says the peer restarted; a connection B's
        forward had open to the dead A is reset with reason ``peer-restarted``; then the same
        with B killed."""
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
        ra, rb = (PairingStore(self.paths[n]).load() for n in "AB")
        self.assertEqual(ra.current, rb.current)
        self.assertGreaterEqual(ra.current.number, 2)
        await self.stop_all(a, b)
