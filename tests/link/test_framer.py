"""Tests for txdilation.link.framer: relay answer, prologues, frames, limits and buffering."""

from __future__ import annotations

import itertools
import tracemalloc

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from wormhole._dilation import connector as stock_connector

from txdilation.link.framer import (
    DEFAULT_MAX_RECORD_SIZE,
    HANDSHAKE_FRAME_LIMIT,
    PROLOGUE_FOLLOWER,
    PROLOGUE_LEADER,
    Frame,
    Framer,
    FramerEvent,
    PrologueReceived,
    RelayAccepted,
    max_frame_size_for_record,
    relay_handshake_line,
)
from txdilation.wire.dilation_errors import FramingError
from txdilation.wire.keys import derive_relay_token
from txdilation.wire.roles import Role

PAYLOADS = [b"", b"x", b"\x00\x01\x02\x03" * 12, b"frame four", bytes(range(48))]


def framed(payload: bytes) -> bytes:
    """The wire bytes of one frame, as Framer.frame lays them out."""
    return b"".join(Framer.frame(payload))


def relay_stream() -> bytes:
    """What a Leader's relayed connection receives: ok, the Follower's prologue, frames."""
    return b"ok\n" + PROLOGUE_FOLLOWER + b"".join(framed(p) for p in PAYLOADS)


EXPECTED_EVENTS: list[FramerEvent] = [
    RelayAccepted(),
    PrologueReceived(),
    *(Frame(p) for p in PAYLOADS),
]


def drain(framer: Framer) -> list[FramerEvent]:
    """Pull events until the framer needs more bytes."""
    events = []
    while (event := framer.next_event()) is not None:
        events.append(event)
    return events


def feed_in_pieces(framer: Framer, stream: bytes, cuts: list[int]) -> list[FramerEvent]:
    """Feed ``stream`` cut at ``cuts``, draining after each piece."""
    events = []
    bounds = [0, *sorted(cuts), len(stream)]
    for start, end in itertools.pairwise(bounds):
        framer.receive_data(stream[start:end])
        events.extend(drain(framer))
    return events


def framing_ready(role: Role = Role.LEADER) -> Framer:
    """A framer that has already received the peer's prologue."""
    framer = Framer(role)
    framer.receive_data(PROLOGUE_FOLLOWER if role is Role.LEADER else PROLOGUE_LEADER)
    assert framer.next_event() == PrologueReceived()
    return framer


class ConstantsTests(SynchronousTestCase):
    def test_prologues_match_stock(self) -> None:
        """Both prologues are byte-identical to stock's."""
        self.assertEqual(PROLOGUE_LEADER, stock_connector.PROLOGUE_LEADER)
        self.assertEqual(PROLOGUE_FOLLOWER, stock_connector.PROLOGUE_FOLLOWER)

    def test_our_prologue(self) -> None:
        """A Leader framer sends the Leader prologue, a Follower framer the Follower one."""
        self.assertEqual(Framer(Role.LEADER).our_prologue, PROLOGUE_LEADER)
        self.assertEqual(Framer(Role.FOLLOWER).our_prologue, PROLOGUE_FOLLOWER)

    def test_relay_line_matches_stock(self) -> None:
        """The relay line equals stock's build_sided_relay_handshake for the same key."""
        key = bytes(range(32))
        side = "0123456789abcdef"
        self.assertEqual(
            relay_handshake_line(derive_relay_token(key), side),
            stock_connector.build_sided_relay_handshake(key, side),
        )

    def test_relay_line_layout(self) -> None:
        """The relay line is 'please relay <hex token> for side <side>' and a newline."""
        line = relay_handshake_line(b"\xab" * 32, "00ff00ff00ff00ff")
        self.assertEqual(line, b"please relay " + b"ab" * 32 + b" for side 00ff00ff00ff00ff\n")

    def test_handshake_limit(self) -> None:
        """Before the handshake a frame may hold one 48-byte Noise handshake message."""
        self.assertEqual(HANDSHAKE_FRAME_LIMIT, 48)

    def test_max_frame_size_for_record(self) -> None:
        """Each 65519-byte piece of plaintext gains a 16-byte tag; empty still has one tag."""
        self.assertEqual(max_frame_size_for_record(0), 16)
        self.assertEqual(max_frame_size_for_record(1), 17)
        self.assertEqual(max_frame_size_for_record(65519), 65535)
        self.assertEqual(max_frame_size_for_record(65520), 65520 + 2 * 16)
        # 64 MiB / 65519 = 1024.26..., so 1025 pieces.
        self.assertEqual(max_frame_size_for_record(DEFAULT_MAX_RECORD_SIZE), 2**26 + 1025 * 16)

    def test_max_frame_size_for_negative_record(self) -> None:
        """A negative record size is a programming error (ValueError)."""
        self.assertRaises(ValueError, max_frame_size_for_record, -1)


class OutboundFrameTests(SynchronousTestCase):
    def test_frame_pieces(self) -> None:
        """frame() returns the 4-byte big-endian length and the payload object itself."""
        payload = b"hello world"
        header, body = Framer.frame(payload)
        self.assertEqual(header, b"\x00\x00\x00\x0b")
        self.assertIs(body, payload)

    def test_frame_too_long(self) -> None:
        """A payload of 2**32 bytes or more cannot be framed (FramingError)."""

        class Huge(bytes):
            def __len__(self) -> int:
                return 2**32

        self.assertRaises(FramingError, Framer.frame, Huge(b"x"))

    @given(st.lists(st.binary(max_size=300), max_size=8))
    def test_frame_round_trip(self, payloads: list[bytes]) -> None:
        """Frames written by frame() are parsed back into the same payloads, in order."""
        framer = framing_ready()
        framer.set_max_frame_size(300)
        framer.receive_data(b"".join(framed(p) for p in payloads))
        self.assertEqual(drain(framer), [Frame(p) for p in payloads])


class SplittingTests(SynchronousTestCase):
    def test_one_piece(self) -> None:
        """The whole stream in one receive_data gives every event in order."""
        framer = Framer(Role.LEADER, expect_relay=True)
        self.assertEqual(feed_in_pieces(framer, relay_stream(), []), EXPECTED_EVENTS)

    def test_byte_by_byte(self) -> None:
        """Fed one byte at a time, the framer gives the same events."""
        stream = relay_stream()
        framer = Framer(Role.LEADER, expect_relay=True)
        cuts = list(range(1, len(stream)))
        self.assertEqual(feed_in_pieces(framer, stream, cuts), EXPECTED_EVENTS)

    def test_every_split_point(self) -> None:
        """Cut in two at every possible place, the stream gives the same events."""
        stream = relay_stream()
        for cut in range(len(stream) + 1):
            framer = Framer(Role.LEADER, expect_relay=True)
            self.assertEqual(feed_in_pieces(framer, stream, [cut]), EXPECTED_EVENTS, cut)

    @given(st.data())
    def test_random_chunking(self, data: st.DataObject) -> None:
        """Any chunking of the stream gives the same events."""
        stream = relay_stream()
        cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
        framer = Framer(Role.LEADER, expect_relay=True)
        self.assertEqual(feed_in_pieces(framer, stream, cuts), EXPECTED_EVENTS)

    def test_follower_without_relay(self) -> None:
        """A Follower without relay expects the Leader's prologue first, then frames."""
        framer = Framer(Role.FOLLOWER)
        framer.receive_data(PROLOGUE_LEADER + framed(b"abc"))
        self.assertEqual(drain(framer), [PrologueReceived(), Frame(b"abc")])

    def test_waits_for_more(self) -> None:
        """A partial header or payload gives None until the rest arrives."""
        framer = framing_ready()
        wire = framed(b"0123456789")
        framer.receive_data(wire[:3])
        self.assertIsNone(framer.next_event())
        framer.receive_data(wire[3:8])
        self.assertIsNone(framer.next_event())
        framer.receive_data(wire[8:])
        self.assertEqual(framer.next_event(), Frame(b"0123456789"))
        self.assertIsNone(framer.next_event())


class RelayAnswerTests(SynchronousTestCase):
    def test_bad_answer(self) -> None:
        """Anything but 'ok\\n' from the relay raises FramingError."""
        for answer in [b"no\n", b"OK\n", b"ok\r\n", b"\n", b"ok ok\n"]:
            with self.subTest(answer=answer):
                framer = Framer(Role.FOLLOWER, expect_relay=True)
                framer.receive_data(answer)
                self.assertRaises(FramingError, drain, framer)

    def test_refused_at_first_wrong_byte(self) -> None:
        """'ok' followed by a wrong byte is refused as that byte arrives, without a newline."""
        framer = Framer(Role.FOLLOWER, expect_relay=True)
        framer.receive_data(b"ok")
        self.assertIsNone(framer.next_event())
        framer.receive_data(b"a")
        error = self.assertRaises(FramingError, framer.next_event)
        self.assertIn(repr(b"oka"), str(error))

    def test_prologue_without_ok(self) -> None:
        """A relayed connection receiving the prologue instead of 'ok\\n' fails."""
        framer = Framer(Role.LEADER, expect_relay=True)
        framer.receive_data(PROLOGUE_FOLLOWER)
        self.assertRaises(FramingError, framer.next_event)

    def test_ok_without_relay(self) -> None:
        """A direct connection receiving 'ok\\n' fails: a prologue was expected."""
        framer = Framer(Role.LEADER)
        framer.receive_data(b"ok\n")
        self.assertRaises(FramingError, framer.next_event)

    def test_long_garbage_excerpt_bounded(self) -> None:
        """The error message quotes at most 64 bytes of a long bad relay answer."""
        framer = Framer(Role.LEADER, expect_relay=True)
        framer.receive_data(b"A" * 64 + b"MARKER" + b"B" * 10_000)
        error = self.assertRaises(FramingError, framer.next_event)
        self.assertNotIn("MARKER", str(error))
        self.assertIn("A" * 64, str(error))
        self.assertLess(len(str(error)), 300)


class PrologueTests(SynchronousTestCase):
    def check_refused(self, role: Role, received: bytes) -> str:
        """Feed ``received`` and return the FramingError message, checking it is bounded."""
        framer = Framer(role)
        framer.receive_data(received)
        error = self.assertRaises(FramingError, framer.next_event)
        message = str(error)
        self.assertIn(repr(received[:16])[:-1], message)  # the excerpt starts the same
        self.assertLess(len(message), 400)  # 64 bytes at up to 4 characters each
        return message

    def test_wrong_role(self) -> None:
        """Each role refuses its own prologue (the peer must have the other role)."""
        self.check_refused(Role.LEADER, PROLOGUE_LEADER)
        self.check_refused(Role.FOLLOWER, PROLOGUE_FOLLOWER)

    def test_refused_at_first_wrong_byte(self) -> None:
        """The wrong role's prologue is refused at its first differing byte, not later."""
        common = len(b"Magic-Wormhole Dilation Handshake v1 ")
        framer = Framer(Role.LEADER)
        framer.receive_data(PROLOGUE_LEADER[:common])
        self.assertIsNone(framer.next_event())
        framer.receive_data(PROLOGUE_LEADER[common : common + 1])
        self.assertRaises(FramingError, framer.next_event)

    def test_http_request(self) -> None:
        """An HTTP request is refused with a bounded excerpt of it in the message."""
        request = (
            b"GET / HTTP/1.1\r\nHost: example.org\r\nUser-Agent: test/1.0\r\n"
            b"Accept: */*\r\nX-Far-Away-Marker: yes\r\n\r\n"
        )
        message = self.check_refused(Role.LEADER, request)
        self.assertIn("GET / HTTP/1.1", message)
        self.assertNotIn("Marker", message)

    def test_tls_client_hello(self) -> None:
        """A TLS ClientHello is refused at its first byte, with a bounded excerpt."""
        body = b"\x03\x03" + bytes(range(32)) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
        body += b"\x00\x00" * 200
        handshake = b"\x01" + len(body).to_bytes(3, "big") + body
        hello = b"\x16\x03\x01" + len(handshake).to_bytes(2, "big") + handshake
        message = self.check_refused(Role.FOLLOWER, hello)
        self.assertIn("\\x16\\x03\\x01", message)

    def test_prologue_then_frames_same_read(self) -> None:
        """Frames that arrive in the same read as the prologue are kept."""
        framer = Framer(Role.FOLLOWER)
        framer.receive_data(PROLOGUE_LEADER + framed(b"a") + framed(b"b"))
        self.assertEqual(drain(framer), [PrologueReceived(), Frame(b"a"), Frame(b"b")])


class FrameLimitTests(SynchronousTestCase):
    def test_handshake_limit_accepts_48(self) -> None:
        """Before the limit is raised a 48-byte frame is accepted."""
        framer = framing_ready()
        framer.receive_data(framed(b"h" * 48))
        self.assertEqual(framer.next_event(), Frame(b"h" * 48))

    def test_handshake_limit_refuses_49(self) -> None:
        """A 49-byte frame is refused as soon as its header arrives, before its payload."""
        framer = framing_ready()
        framer.receive_data(framed(b"h" * 49)[:4])
        self.assertRaises(FramingError, framer.next_event)

    def test_four_gib_prefix(self) -> None:
        """A length prefix of 2**32-1 is refused at once without allocating for the payload."""
        framer = framing_ready(Role.FOLLOWER)
        framer.set_max_frame_size(max_frame_size_for_record(DEFAULT_MAX_RECORD_SIZE))
        framer.receive_data(b"\xff\xff\xff\xff" + b"z" * 100)
        self.assertLess(framer.buffered, 200)
        tracemalloc.start()
        try:
            self.assertRaises(FramingError, framer.next_event)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 1_000_000)
        self.assertEqual(framer.buffered, 0)

    def test_raised_limit(self) -> None:
        """After set_max_frame_size(n) a frame of n bytes passes and one of n+1 does not."""
        framer = framing_ready()
        framer.set_max_frame_size(1000)
        framer.receive_data(framed(b"p" * 1000))
        self.assertEqual(framer.next_event(), Frame(b"p" * 1000))
        framer.receive_data(framed(b"p" * 1001)[:4])
        self.assertRaises(FramingError, framer.next_event)

    def test_limit_raised_between_buffered_frames(self) -> None:
        """A limit raised after the first of two buffered frames applies to the second."""
        framer = framing_ready()
        framer.receive_data(framed(b"h" * 48) + framed(b"r" * 500))
        self.assertEqual(framer.next_event(), Frame(b"h" * 48))
        framer.set_max_frame_size(500)
        self.assertEqual(framer.next_event(), Frame(b"r" * 500))

    def test_limit_lowered_between_buffered_frames(self) -> None:
        """The limit is read when a frame is parsed, so lowering it refuses a buffered frame."""
        framer = framing_ready()
        framer.receive_data(framed(b"a" * 40) + framed(b"b" * 40))
        self.assertEqual(framer.next_event(), Frame(b"a" * 40))
        framer.set_max_frame_size(39)
        self.assertRaises(FramingError, framer.next_event)

    def test_negative_limit(self) -> None:
        """A negative frame size limit is a programming error (ValueError)."""
        self.assertRaises(ValueError, Framer, Role.LEADER, max_frame_size=-1)
        self.assertRaises(ValueError, framing_ready().set_max_frame_size, -1)


class DeadFramerTests(SynchronousTestCase):
    def test_dead_after_error(self) -> None:
        """After a FramingError, next_event and receive_data keep raising FramingError."""
        framer = Framer(Role.LEADER)
        framer.receive_data(b"junk")
        self.assertRaises(FramingError, framer.next_event)
        self.assertRaises(FramingError, framer.next_event)
        self.assertRaises(FramingError, framer.receive_data, PROLOGUE_FOLLOWER)
        self.assertRaises(FramingError, framer.next_event)

    def test_dead_after_oversize_frame(self) -> None:
        """A framer that refused a frame does not recover, even given valid frames."""
        framer = framing_ready()
        framer.receive_data(framed(b"x" * 49)[:4])
        self.assertRaises(FramingError, framer.next_event)
        self.assertRaises(FramingError, framer.receive_data, framed(b"ok"))
        self.assertRaises(FramingError, framer.next_event)


class LinearBufferTests(SynchronousTestCase):
    count = 10_000

    def test_frames_within_a_read_are_views(self) -> None:
        """10,000 frames of one read come out of next_frame as views of that very read.

        Nothing is copied for them (each payload's ``obj`` is the received ``bytes``); the
        partial frame at the end stays where it is until the rest arrives, and next_event
        returns ``bytes``.
        """
        framer = framing_ready()
        payloads = [i.to_bytes(4, "big") * 3 for i in range(self.count)]
        tail = framed(b"partial")[:6]
        chunk = b"".join(framed(p) for p in payloads) + tail
        framer.receive_data(chunk)
        for payload in payloads:
            view = framer.next_frame()
            assert view is not None
            self.assertIs(view.obj, chunk)
            self.assertTrue(view.readonly)
            self.assertEqual(view, payload)
        self.assertIsNone(framer.next_frame())
        self.assertEqual(framer.buffered, 6)
        framer.receive_data(framed(b"partial")[6:])
        event = framer.next_event()
        self.assertEqual(event, Frame(b"partial"))
        assert isinstance(event, Frame)
        self.assertIs(type(event.payload), bytes)

    def test_spanning_frame_assembled_once(self) -> None:
        """A frame cut across three reads is assembled (each byte copied once) and returned as a
        view of that private copy; the frame after it in the last read is a view of the read."""
        framer = framing_ready()
        framer.set_max_frame_size(10_000)
        big = bytes(range(256)) * 30
        wire = framed(big) + framed(b"next")
        first, second, third = wire[:3], wire[3:5000], wire[5000:]
        framer.receive_data(first)
        self.assertIsNone(framer.next_frame())
        framer.receive_data(second)
        self.assertIsNone(framer.next_frame())
        self.assertEqual(len(framer._partial), len(first) + len(second))
        framer.receive_data(third)
        view = framer.next_frame()
        assert view is not None
        self.assertEqual(view, big)
        self.assertIsInstance(view.obj, bytearray)
        self.assertTrue(view.readonly)
        after = framer.next_frame()
        assert after is not None
        self.assertIs(after.obj, third)
        self.assertEqual(after, b"next")
        self.assertEqual(framer.buffered, 0)

    def test_views_stay_valid(self) -> None:
        """Views returned earlier keep their contents while later reads are parsed."""
        framer = framing_ready()
        framer.set_max_frame_size(1000)
        kept = []
        wire = b"".join(framed(bytes([i]) * (100 + i)) for i in range(40))
        for start in range(0, len(wire), 333):  # frames both inside and across reads
            framer.receive_data(wire[start : start + 333])
            while (view := framer.next_frame()) is not None:
                kept.append(view)
        self.assertEqual([bytes(v) for v in kept], [bytes([i]) * (100 + i) for i in range(40)])

    def test_small_reads_of_a_large_frame(self) -> None:
        """A 1 MiB frame fed in 1000-byte reads is moved into one assembly buffer read by read
        (the first read stays in place until a second one arrives)."""
        framer = framing_ready()
        framer.set_max_frame_size(2**20)
        wire = framed(b"L" * 2**20)
        starts = range(0, len(wire), 1000)
        for start in starts[:-1]:
            framer.receive_data(wire[start : start + 1000])
            self.assertIsNone(framer.next_frame())
            self.assertEqual(len(framer._partial), start + 1000 if start else 0)
            self.assertEqual(framer.buffered, start + 1000)
        framer.receive_data(wire[starts[-1] :])
        view = framer.next_frame()
        assert view is not None
        self.assertEqual(len(view), 2**20)
        self.assertEqual(framer.buffered, 0)

    def test_next_frame_before_prologue(self) -> None:
        """next_frame gives None until the prologue was received; framing says when."""
        framer = Framer(Role.LEADER)
        framer.receive_data(PROLOGUE_FOLLOWER + framed(b"a"))
        self.assertFalse(framer.framing)
        self.assertIsNone(framer.next_frame())
        self.assertEqual(framer.next_event(), PrologueReceived())
        self.assertTrue(framer.framing)
        self.assertEqual(framer.next_frame(), b"a")

    def test_frame_pieces(self) -> None:
        """frame_pieces gives the length of the pieces together, then the pieces themselves."""
        pieces = [b"abc", b"de"]
        framed_pieces = Framer.frame_pieces(pieces)
        self.assertEqual(framed_pieces[0], b"\x00\x00\x00\x05")
        self.assertIs(framed_pieces[1], pieces[0])
        self.assertEqual(b"".join(framed_pieces), framed(b"abcde"))
