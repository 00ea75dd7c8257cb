"""The listener's flood defences (txdilation.selection.listener): the cap on unauthenticated
connections as a policy, and on a real Connector's listener over loopback TCP; the backlog; the
setting."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor as _reactor
from twisted.internet.defer import DeferredList, ensureDeferred
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.support.hostile import Attacker, connect_raw
from tests.support.waits import sleep, wait_until
from txdilation.link.framer import PROLOGUE_FOLLOWER
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.listener import LISTEN_BACKLOG, OldestFirstCap, listen
from txdilation.settings import Limits, NetworkSettings
from txdilation.wire.limits import DEFAULT_MAX_UNAUTHENTICATED
from txdilation.wire.roles import LEADER

from .test_connector import RecordingOwner

reactor: Any = _reactor


class OldestFirstCapTests(SynchronousTestCase):
    """The policy alone: which held items to close when one more arrives."""

    def test_oldest_out_first(self) -> None:
        """Beyond the limit, each new item pushes out the oldest one."""
        cap: OldestFirstCap[int] = OldestFirstCap(3, lambda i: False)
        self.assertEqual([cap.admit(i) for i in range(5)], [[], [], [], [0], [1]])
        self.assertEqual(len(cap), 3)
        self.assertEqual(cap.evicted, 2)
        self.assertEqual([i in cap for i in range(5)], [False, False, True, True, True])

    def test_progressed_ones_go_last(self) -> None:
        """Items that sent a correct prologue are pushed out only when no other item besides
        the newest is left, then oldest first."""
        progressed = {0, 2}
        cap: OldestFirstCap[int] = OldestFirstCap(3, progressed.__contains__)
        for i in range(3):
            cap.admit(i)
        self.assertEqual(cap.admit(3), [1])
        self.assertEqual(cap.admit(4), [3])
        self.assertEqual(cap.admit(5), [4])
        progressed.add(5)
        self.assertEqual(cap.admit(6), [0])

    def test_never_the_newest(self) -> None:
        """Even when every older item progressed, the admitted one stays (a real peer that
        connects during a flood of correct prologues gets its turn)."""
        cap: OldestFirstCap[int] = OldestFirstCap(1, lambda i: i != 9)
        cap.admit(1)
        self.assertEqual(cap.admit(9), [1])
        self.assertIn(9, cap)

    def test_discard_and_clear(self) -> None:
        """Authenticated or closed items leave the cap (discarding one not held is a no-op);
        clear empties it; admitting a held item again makes it the newest."""
        cap: OldestFirstCap[str] = OldestFirstCap(2, lambda i: False)
        cap.admit("a")
        cap.admit("b")
        cap.discard("a")
        cap.discard("zz")
        self.assertEqual(cap.admit("c"), [])
        self.assertEqual(cap.admit("b"), [])  # already held: now the newest
        self.assertEqual(cap.admit("d"), ["c"])
        cap.clear()
        self.assertEqual(len(cap), 0)

    def test_bad_limits(self) -> None:
        """OldestFirstCap refuses a limit that is not a positive int."""
        for bad in (0, -1, 1.5, True):
            self.assertRaises(ValueError, OldestFirstCap, bad, lambda i: False)

    @given(
        st.integers(1, 8),
        st.lists(st.tuples(st.integers(0, 20), st.booleans(), st.booleans()), max_size=60),
    )
    def test_bounded(self, limit: int, steps: list[tuple[int, bool, bool]]) -> None:
        """Whatever happens: at most ``limit`` held, the admitted one held, the closed ones
        no longer held, every item held at most once."""
        progressed: set[int] = set()
        cap: OldestFirstCap[int] = OldestFirstCap(limit, progressed.__contains__)
        for item, discard, progress in steps:
            if progress:
                progressed.add(item)
            if discard:
                cap.discard(item)
                self.assertNotIn(item, cap)
                continue
            out = cap.admit(item)
            self.assertLessEqual(len(cap), limit)
            self.assertIn(item, cap)
            self.assertNotIn(item, out)
            self.assertEqual(len(set(out)), len(out))
            self.assertFalse(any(o in cap for o in out))


class SettingTests(SynchronousTestCase):
    def test_max_unauthenticated_setting(self) -> None:
        """TXDILATION_MAX_UNAUTHENTICATED is read (default 256, above what one real peer and
        a listen backlog's worth of one accept batch need); junk and 0 are refused."""
        self.assertEqual(Limits().max_unauthenticated, DEFAULT_MAX_UNAUTHENTICATED)
        self.assertEqual(DEFAULT_MAX_UNAUTHENTICATED, 256)
        env = {"TXDILATION_MAX_UNAUTHENTICATED": " 12 "}
        self.assertEqual(Limits.from_environ(env).max_unauthenticated, 12)
        for bad in ("many", "0", "-3"):
            with self.assertRaises(ValueError) as caught:
                Limits.from_environ({"TXDILATION_MAX_UNAUTHENTICATED": bad})
            self.assertIn("max_unauthenticated", str(caught.exception).lower())


class ListenTests(TestCase):
    """The real listening socket."""

    timeout = 20

    async def _backlog(self) -> None:
        port = await listen(reactor, 0, "127.0.0.1", ServerFactory.forProtocol(Protocol))
        self.addCleanup(port.stopListening)
        self.assertEqual(port.backlog, LISTEN_BACKLOG)  # type: ignore[attr-defined]
        self.assertGreaterEqual(LISTEN_BACKLOG, 1024)

    def test_backlog(self) -> Any:
        """The listener asks for a backlog of LISTEN_BACKLOG (Twisted's default is 50)."""
        return ensureDeferred(self._backlog())

    def connector(self, cap: int) -> tuple[Connector, RecordingOwner]:
        network = NetworkSettings("127.0.0.1", ("127.0.0.1",))
        settings = ConnectorSettings(
            role=LEADER,
            dilation_key=b"k" * 32,
            side="a" * 16,
            network=network,
            max_unauthenticated=cap,
        )
        owner = RecordingOwner()
        c = Connector(settings, owner=owner, reactor=reactor)
        self.addCleanup(c.events.stop)
        return c, owner

    async def _cap(self) -> None:
        c, owner = self.connector(cap=4)
        c.start()
        await wait_until(lambda: bool(owner.hint_messages), 10, "the listener's hints")
        port = owner.hint_messages[0][0]["port"]
        attackers: list[Attacker] = []
        self.addCleanup(lambda: DeferredList([a.closed for a in attackers]))
        self.addCleanup(lambda: [a.transport.loseConnection() for a in attackers if a.open])

        async def attack(payload: bytes = b"") -> Attacker:
            a = Attacker(payload)
            attackers.append(a)
            await connect_raw(port, a)
            return a

        real = await attack(PROLOGUE_FOLLOWER)  # sends a correct prologue, then nothing
        await wait_until(
            lambda: any(x.prologue_received for x in c._core.candidates), 5, "the prologue read"
        )
        idle = [await attack() for _ in range(6)]
        await wait_until(lambda: sum(a.open for a in idle) == 3, 5, "the oldest idle ones closed")
        await sleep(0.2)
        self.assertEqual([a.open for a in idle], [False] * 3 + [True] * 3)
        self.assertTrue(real.open, "the connection with a prologue was closed first")
        self.assertEqual(len(c._advertiser.unauthenticated), 4)
        garbage = await attack(b"GET / HTTP/1.1\r\n\r\n")  # admitted (closing idle[3]) ...
        # ... then closed, long before the 30 s handshake timeout (5 s: the bound of every
        # wait here; a tighter one raced a loaded machine's scheduling, not the listener)
        await wait_until(lambda: not garbage.open, 5, "bad bytes closed at once")
        more = [await attack() for _ in range(4)]
        await wait_until(lambda: not any(a.open for a in idle), 5, "all earlier idle ones closed")
        await wait_until(lambda: not more[0].open, 5, "then the oldest idle one")
        await sleep(0.2)
        self.assertEqual([a.open for a in more], [False, True, True, True])
        self.assertTrue(real.open, "the connection with a prologue was closed before idle ones")
        self.assertEqual(len(c._advertiser.unauthenticated), 4)

    def test_cap_closes_oldest_keeps_prologue_longest(self) -> Any:
        """With a cap of 4: each connection beyond it closes the oldest idle one, a
        connection that sent a correct prologue outlives idle ones, bad bytes close at once,
        and the listener never holds more than 4."""
        return ensureDeferred(self._cap())
