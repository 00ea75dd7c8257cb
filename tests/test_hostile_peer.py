"""Hostile input from an authenticated peer (one that holds the dilation key).

A real Dilator (real Manager, real TCP on 127.0.0.1) faces a peer played by the test with
txdilation's own Framer and NoiseSession (``tests.support.hostile.RawL2``), as Follower against our
Leader and as Leader against our Follower. After a subchannel carried data both ways, the rogue
sends unknown record tags, truncated records, DATA/CLOSE for unknown subchannels, duplicate
OPENs, OPENs with the wrong scid parity, records over the size limit, a second KCM, bad
ciphertext.

Pinned, per violation: either the record is dropped (logged) and the connection carries on,
or the connection is dropped with a logged reason and a new generation carries on; the
process never crashes (trial fails a test on any logged error); data already accepted is never
lost or delivered twice (the subchannel's protocol keeps what it got, sees no connectionLost,
and receives what follows), and our own unacknowledged data is replayed on the new connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from twisted.internet.defer import ensureDeferred
from twisted.trial.unittest import TestCase

from tests.subchannels.test_multiplexer import RecordingFactory, received
from tests.support.hostile import (
    HIGHEST_SIDE,
    LOWEST_SIDE,
    LogCapture,
    RawL2,
    RogueMailbox,
    record_figures,
    rogue_connection,
    use_environment,
)
from tests.support.waits import wait_until
from txdilation.wire.records import KCM, Ack, Close, Data, Open, Ping, Pong, Record, encode_record
from txdilation.wire.roles import FOLLOWER, LEADER, Role

#: The largest record the attacked peer accepts (TXDILATION_MAX_RECORD_SIZE), small enough to
#: send a real record over it.
LIMIT = 2**20

FROM_US = b"written by the attacked peer"


@dataclass
class Session:
    """One dilated session between a real Dilator and a rogue peer."""

    mailbox: RogueMailbox
    api: Any
    factory: RecordingFactory
    raw: RawL2
    scid: int  # the rogue's subchannel
    next_seqnum: int  # the rogue's next seqnum
    generation: int = 1

    @property
    def protocol(self) -> Any:
        (protocol,) = self.factory.built
        return protocol


def is_data(payload: bytes) -> Callable[[Record], bool]:
    return lambda r: isinstance(r, Data) and r.data == payload


def acked(seqnum: int) -> Callable[[Record], bool]:
    return lambda r: isinstance(r, Ack) and r.resp_seqnum >= seqnum


class RoguePeerMixin:
    """The scenarios, for a rogue of role ``rogue_role`` (set by the concrete classes)."""

    rogue_role: ClassVar[Role]
    timeout = 30

    def setUp(self) -> None:
        use_environment(self, TXDILATION_MAX_RECORD_SIZE=str(LIMIT))
        self.log = LogCapture(self)
        self.dropped = 0  # rogue connections the attacked peer dropped and recovered from

    def tearDown(self) -> None:
        record_figures(self, hostile_connections_handled=self.dropped)

    @property
    def our_scid(self) -> int:
        """A scid the rogue may use (Leader odd, Follower even)."""
        return 1 if self.rogue_role is LEADER else 2

    async def connect(self, mailbox: RogueMailbox) -> RawL2:
        raw = await rogue_connection(mailbox, self.rogue_role)
        await raw.wait_for(lambda r: isinstance(r, KCM))
        if self.rogue_role is LEADER:
            raw.send_record(KCM())  # select this connection
        self.addCleanup(raw.abort)
        return raw

    async def session(self) -> Session:
        """Dilate, open a subchannel from the rogue, carry data both ways."""
        mailbox = RogueMailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        api = mailbox.start(HIGHEST_SIDE if self.rogue_role is LEADER else LOWEST_SIDE)
        await wait_until(mailbox.ports, 10, "the attacked peer's hints")
        raw = await self.connect(mailbox)
        await api.when_dilated()
        factory = RecordingFactory()
        await api.listener_for("x").listen(factory)
        s = Session(mailbox, api, factory, raw, self.our_scid, 0)
        self.send(s, Open(0, s.scid, "x"))
        self.send(s, Data(0, s.scid, b"before"))
        await wait_until(lambda: factory.built and received(s.protocol), 5, "first DATA delivered")
        s.protocol.transport.write(FROM_US)
        await raw.wait_for(is_data(FROM_US))
        await raw.wait_for(acked(1))
        return s

    def send(self, s: Session, record: Open | Data | Close) -> None:
        """Send a sequenced record with the rogue's next seqnum."""
        s.raw.send_record(replace(record, seqnum=s.next_seqnum))
        s.next_seqnum += 1

    async def still_works(self, s: Session, payload: bytes) -> None:
        """The current connection carries DATA on the rogue's subchannel, acknowledged."""
        seqnum = s.next_seqnum
        self.send(s, Data(0, s.scid, payload))
        await wait_until(lambda: payload in received(s.protocol), 5, f"{payload!r} delivered")
        await s.raw.wait_for(acked(seqnum))

    async def survives_drop(self, s: Session, reason: str) -> None:
        """The attacked peer dropped the rogue's connection (logging ``reason``); the next
        generation replays our unacked data, dedups the rogue's replay, carries new data."""
        port = s.raw.local_port
        await s.raw.closed
        await wait_until(lambda: port in self.log.drop_reasons(), 5, "the drop logged")
        self.assertIn(reason, self.log.drop_reasons()[port])
        s.protocol.transport.write(b"while down")
        before = len(s.mailbox.ports())
        if self.rogue_role is FOLLOWER:
            await wait_until(lambda: s.mailbox.count("reconnect") == s.generation, 5, "reconnect")
            s.mailbox.tell(type="reconnecting")
        else:
            s.mailbox.tell(type="reconnect")
            await wait_until(
                lambda: s.mailbox.count("reconnecting") == s.generation, 5, "reconnecting"
            )
        await wait_until(lambda: len(s.mailbox.ports()) > before, 5, "new hints")
        s.generation += 1
        s.raw = await self.connect(s.mailbox)
        # our side replays what the rogue never acknowledged, in order
        await s.raw.wait_for(is_data(b"while down"))
        # the rogue replays everything as a real peer would: nothing is delivered twice
        s.raw.send_record(Open(0, s.scid, "x"))
        s.raw.send_record(Data(1, s.scid, b"before"))
        await self.still_works(s, b"after")
        self.assertEqual(received(s.protocol)[0], b"before")
        self.assertEqual(received(s.protocol).count(b"before"), 1)
        self.assertNotIn("lost", s.protocol.events)
        self.dropped += 1

    # --- violations that cost the connection ---

    async def drop_after(self, send: Callable[[Session], None], reason: str) -> Session:
        s = await self.session()
        send(s)
        await self.survives_drop(s, reason)
        return s

    def test_unknown_record_tag(self) -> Any:
        """A record with tag 0x07 is a protocol violation: the connection is dropped."""
        return ensureDeferred(
            self.drop_after(lambda s: s.raw.send_plaintext(b"\x07abcd"), "unknown record tag")
        )

    def test_truncated_records(self) -> Any:
        """A DATA record too short for its header, a 6-byte CLOSE, a 3-byte ACK, an empty
        plaintext: each drops the connection (RecordError) and the next generation goes on."""

        async def run() -> None:
            s = await self.session()
            for plaintext, reason in [
                (encode_record(Data(s.next_seqnum, s.scid, b""))[:5], "truncated DATA"),
                (encode_record(Close(s.next_seqnum, s.scid))[:6], "CLOSE record must be"),
                (encode_record(Ack(0))[:3], "ACK record must be"),
                (b"", "empty record"),
                (b"\x03\x00\x00\x00\x02\x00\x00\x00\x09\xff\xfe", "not UTF-8"),
            ]:
                s.raw.send_plaintext(plaintext)
                await self.survives_drop(s, reason)

        return ensureDeferred(run())

    def test_record_over_the_size_limit(self) -> Any:
        """A record of exactly the limit is delivered; a record 9 bytes over it, and a frame
        announcing 4 GiB, drop the connection as soon as the frame's length is read."""

        async def run() -> None:
            s = await self.session()
            at_limit = b"L" * (LIMIT - 9)
            self.send(s, Data(0, s.scid, at_limit))
            await wait_until(lambda: at_limit in received(s.protocol), 5, "record at the limit")
            self.send(s, Data(0, s.scid, b"O" * LIMIT))
            await self.survives_drop(s, "exceeds the limit")
            s.raw.transport.write(b"\xff\xff\xff\xff")  # type: ignore[union-attr]
            await self.survives_drop(s, "exceeds the limit")

        return ensureDeferred(run())

    def test_second_kcm(self) -> Any:
        """A KCM on the selected connection is a protocol violation: it is dropped."""
        return ensureDeferred(
            self.drop_after(lambda s: s.raw.send_record(KCM()), "KCM on an already selected")
        )

    def test_bad_ciphertext(self) -> Any:
        """A frame that does not authenticate (a flipped bit) drops the connection."""

        def flipped(s: Session) -> None:
            ciphertext = bytearray(s.raw.noise.encrypt(encode_record(Ping(b"abcd"))))
            ciphertext[0] ^= 1
            s.raw.send_frame(bytes(ciphertext))

        return ensureDeferred(self.drop_after(flipped, "NoiseError"))

    # --- violations that cost only the record ---

    def test_records_for_unknown_subchannels_are_dropped(self) -> Any:
        """DATA and CLOSE for a subchannel that does not exist are logged and ignored (still
        acknowledged); the connection and the real subchannel carry on."""

        async def run() -> None:
            s = await self.session()
            self.send(s, Data(0, 40, b"nobody"))
            self.send(s, Close(0, 42))
            await s.raw.wait_for(acked(s.next_seqnum - 1))
            await self.still_works(s, b"next")
            texts = " ".join(self.log.texts())
            self.assertIn("DATA for unknown subchannel 40", texts)
            self.assertIn("CLOSE for unknown subchannel 42", texts)
            self.assertEqual(received(s.protocol), [b"before", b"next"])

        return ensureDeferred(run())

    def test_duplicate_open_is_dropped(self) -> Any:
        """A second OPEN for an open subchannel (new seqnum) is logged and ignored: no second
        protocol is built, the first one keeps working."""

        async def run() -> None:
            s = await self.session()
            self.send(s, Open(0, s.scid, "x"))
            await self.still_works(s, b"next")
            self.assertEqual(len(s.factory.built), 1)
            self.assertIn(f"duplicate OPEN for subchannel {s.scid}", " ".join(self.log.texts()))

        return ensureDeferred(run())

    def test_wrong_scid_parity_and_scid_zero_are_refused(self) -> Any:
        """An OPEN with a scid of the attacked peer's own parity, or scid 0, is answered with
        CLOSE and builds no protocol; DATA on it is ignored; the session carries on."""

        async def run() -> None:
            s = await self.session()
            wrong = s.scid + 1
            for scid in (wrong, 0):
                self.send(s, Open(0, scid, "x"))
                self.send(s, Data(0, scid, b"smuggled"))
                await s.raw.wait_for(lambda r, scid=scid: isinstance(r, Close) and r.scid == scid)
            await self.still_works(s, b"next")
            self.assertEqual(len(s.factory.built), 1)
            self.assertNotIn(b"smuggled", received(s.protocol))
            self.assertIn("a scid the peer may not use", " ".join(self.log.texts()))

        return ensureDeferred(run())

    def test_harmless_records_are_ignored(self) -> Any:
        """An ACK for something never sent, a PONG nobody asked for, a PING (answered), and a
        replayed old seqnum (acknowledged, not delivered again) leave the session intact."""

        async def run() -> None:
            s = await self.session()
            s.raw.send_record(Ack(10**6))
            s.raw.send_record(Pong(b"zzzz"))
            s.raw.send_record(Ping(b"ping"))
            s.raw.send_record(Data(1, s.scid, b"before"))
            await s.raw.wait_for(lambda r: isinstance(r, Pong) and r.ping_id == b"ping")
            await self.still_works(s, b"next")
            self.assertEqual(received(s.protocol), [b"before", b"next"])

        return ensureDeferred(run())


class RogueFollowerTests(RoguePeerMixin, TestCase):
    """Our Leader against an authenticated, hostile Follower."""

    rogue_role = FOLLOWER


class RogueLeaderTests(RoguePeerMixin, TestCase):
    """Our Follower against an authenticated, hostile Leader."""

    rogue_role = LEADER
