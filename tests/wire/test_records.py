"""Tests for the L3 record codec in txdilation.wire.records (encode_record / parse_record)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from wormhole._dilation import connection as stock

from txdilation.wire.dilation_errors import RecordError
from txdilation.wire.records import (
    KCM,
    Ack,
    Close,
    Data,
    Open,
    Ping,
    Pong,
    Record,
    encode_record,
    encode_record_parts,
    parse_record,
    parse_record_pieces,
    parse_record_view,
)

u32 = st.integers(min_value=0, max_value=2**32 - 1)
ping_ids = st.binary(min_size=4, max_size=4)

kcms = st.just(KCM())
pings = st.builds(Ping, ping_id=ping_ids)
pongs = st.builds(Pong, ping_id=ping_ids)
opens = st.builds(Open, seqnum=u32, scid=u32, subprotocol=st.text())
datas = st.builds(Data, seqnum=u32, scid=u32, data=st.binary())
closes = st.builds(Close, seqnum=u32, scid=u32)
acks = st.builds(Ack, resp_seqnum=u32)
records = st.one_of(kcms, pings, pongs, opens, datas, closes, acks)


def to_stock(record: Record) -> Any:
    """The stock namedtuple with the same meaning as ``record``."""
    match record:
        case KCM():
            return stock.KCM()
        case Ping(ping_id):
            return stock.Ping(ping_id=ping_id)
        case Pong(ping_id):
            return stock.Pong(ping_id=ping_id)
        case Open(seqnum, scid, subprotocol):
            return stock.Open(seqnum=seqnum, scid=scid, subprotocol=subprotocol)
        case Data(seqnum, scid, data):
            return stock.Data(seqnum=seqnum, scid=scid, data=data)
        case Close(seqnum, scid):
            return stock.Close(seqnum=seqnum, scid=scid)
        case Ack(resp_seqnum):
            return stock.Ack(resp_seqnum=resp_seqnum)
    raise AssertionError(record)


class VectorTests(SynchronousTestCase):
    """Hand-written encodings of every record type (spec section 2.6)."""

    vectors: tuple[tuple[Record, str], ...] = (
        (Open(scid=65536, seqnum=16, subprotocol="proto"), "03 00010000 00000010 70726f746f"),
        (KCM(), "00"),
        (Ping(ping_id=b"\x01\x02\x03\x04"), "01 01020304"),
        (Pong(ping_id=b"\xff\x00\xfe\x01"), "02 ff00fe01"),
        (Data(seqnum=2, scid=1, data=b"hi"), "04 00000001 00000002 6869"),
        (Data(seqnum=0, scid=4, data=b""), "04 00000004 00000000"),
        (Close(seqnum=7, scid=3), "05 00000003 00000007"),
        (Ack(resp_seqnum=258), "06 00000102"),
        (Open(scid=2, seqnum=2**32 - 1, subprotocol="é"), "03 00000002 ffffffff c3a9"),
    )

    def test_encode(self) -> None:
        """encode_record produces exactly the spec's bytes for each record type."""
        for record, hexbytes in self.vectors:
            with self.subTest(record=record):
                self.assertEqual(encode_record(record), bytes.fromhex(hexbytes.replace(" ", "")))

    def test_parse(self) -> None:
        """parse_record turns the spec's bytes back into the same record."""
        for record, hexbytes in self.vectors:
            with self.subTest(record=record):
                self.assertEqual(parse_record(bytes.fromhex(hexbytes.replace(" ", ""))), record)


class RoundTripTests(SynchronousTestCase):
    @given(st.data())
    def test_every_type(self, data: st.DataObject) -> None:
        """A record of every type (any field values) survives encode then parse.

        Each example draws one record of each of the seven types.
        """
        for strategy in (kcms, pings, pongs, opens, datas, closes, acks):
            record = data.draw(strategy)
            self.assertEqual(parse_record(encode_record(record)), record)


class ParseGarbageTests(SynchronousTestCase):
    @given(st.binary(max_size=64))
    def test_arbitrary_bytes(self, plaintext: bytes) -> None:
        """parse_record on any bytes returns a record or raises RecordError, nothing else.

        A record it returns re-encodes to exactly the input (the encoding is canonical).
        """
        try:
            record = parse_record(plaintext)
        except RecordError:
            return
        self.assertEqual(encode_record(record), plaintext)

    @given(st.integers(min_value=7, max_value=255), st.binary(max_size=16))
    def test_unknown_tag(self, tag: int, rest: bytes) -> None:
        """Tags 0x07..0xff raise RecordError whatever follows."""
        self.assertRaises(RecordError, parse_record, bytes([tag]) + rest)

    def test_empty(self) -> None:
        """An empty plaintext raises RecordError."""
        self.assertRaises(RecordError, parse_record, b"")

    def test_truncated(self) -> None:
        """Every proper prefix of a fixed-size record, and of an OPEN/DATA header, is refused."""
        samples = [
            Ping(b"abcd"),
            Pong(b"abcd"),
            Close(seqnum=1, scid=2),
            Ack(resp_seqnum=3),
            Open(seqnum=1, scid=2, subprotocol=""),
            Data(seqnum=1, scid=2, data=b""),
        ]
        for record in samples:
            encoded = encode_record(record)
            for cut in range(1, len(encoded)):
                with self.subTest(record=record, cut=cut):
                    self.assertRaises(RecordError, parse_record, encoded[:cut])

    def test_trailing_bytes(self) -> None:
        """Fixed-size records with extra bytes (KCM, PING, PONG, CLOSE, ACK) are refused."""
        for record in [KCM(), Ping(b"abcd"), Pong(b"abcd"), Close(1, 2), Ack(3)]:
            with self.subTest(record=record):
                self.assertRaises(RecordError, parse_record, encode_record(record) + b"\x00")

    def test_bad_utf8_subprotocol(self) -> None:
        """An OPEN whose subprotocol is not UTF-8 raises RecordError."""
        plaintext = bytes.fromhex("03 00000001 00000001 ff".replace(" ", ""))
        self.assertRaises(RecordError, parse_record, plaintext)


class EncodeErrorTests(SynchronousTestCase):
    def test_out_of_range_integers(self) -> None:
        """A seqnum, scid or resp_seqnum outside 0..2**32-1 raises RecordError."""
        for record in [
            Data(seqnum=2**32, scid=1, data=b""),
            Data(seqnum=1, scid=-1, data=b""),
            Open(seqnum=-1, scid=1, subprotocol="x"),
            Close(seqnum=1, scid=2**32),
            Ack(resp_seqnum=2**32),
        ]:
            with self.subTest(record=record):
                self.assertRaises(RecordError, encode_record, record)

    def test_bad_ping_id(self) -> None:
        """A ping_id that is not exactly 4 bytes raises RecordError."""
        for record in [Ping(b"abc"), Pong(b"abcde")]:
            with self.subTest(record=record):
                self.assertRaises(RecordError, encode_record, record)

    def test_not_a_record(self) -> None:
        """Encoding something that is not a record raises TypeError."""
        self.assertRaises(TypeError, encode_record, stock.KCM())


class StockDifferentialTests(SynchronousTestCase):
    """Differential tests against stock wormhole._dilation.connection's codec."""

    @given(records)
    def test_same_bytes(self, record: Record) -> None:
        """Our encoding of a record is byte-identical to stock's encoding of its namedtuple."""
        self.assertEqual(encode_record(record), stock.encode_record(to_stock(record)))

    @given(records)
    def test_stock_parses_ours(self, record: Record) -> None:
        """Stock parse_record reads our encoding as the equivalent namedtuple."""
        self.assertEqual(stock.parse_record(encode_record(record)), to_stock(record))

    @given(records)
    def test_we_parse_stock(self, record: Record) -> None:
        """Our parse_record reads stock's encoding as the original record."""
        self.assertEqual(parse_record(stock.encode_record(to_stock(record))), record)


class PartsAndPiecesTests(SynchronousTestCase):
    """The byte path's forms of the codec equal the plain one."""

    @given(records)
    def test_parts_join_to_the_encoding(self, record: Record) -> None:
        """head + body of encode_record_parts is encode_record's plaintext; a DATA record's
        body is its payload object itself, every other record's body is empty."""
        head, body = encode_record_parts(record)
        self.assertEqual(head + body, encode_record(record))
        if isinstance(record, Data):
            self.assertIs(body, record.data)
        else:
            self.assertEqual(body, b"")

    def test_parts_out_of_range(self) -> None:
        """encode_record_parts refuses what encode_record refuses, with RecordError."""
        for record in [Data(seqnum=2**32, scid=1, data=b""), Data(seqnum=1, scid=-1, data=b"")]:
            with self.subTest(record=record):
                self.assertRaises(RecordError, encode_record_parts, record)
        self.assertRaises(TypeError, encode_record_parts, stock.KCM())

    @given(records, st.data())
    def test_pieces_parse_like_the_whole(self, record: Record, data: st.DataObject) -> None:
        """parse_record_pieces of the plaintext cut anywhere (as Noise pieces would cut it, or
        elsewhere) gives the record parse_record gives for the whole plaintext."""
        plaintext = encode_record(record)
        cuts = sorted(data.draw(st.lists(st.integers(1, max(1, len(plaintext))), max_size=3)))
        bounds = [0, *cuts, len(plaintext)]
        pieces = [plaintext[a:b] for a, b in itertools.pairwise(bounds) if a < b]
        self.assertEqual(parse_record_pieces(pieces or [plaintext]), record)

    def test_data_in_noise_pieces(self) -> None:
        """A DATA record cut at 65519 bytes (Noise pieces) parses to its payload as bytes."""
        record = Data(seqnum=7, scid=3, data=bytes(range(256)) * 600)
        plaintext = encode_record(record)
        pieces = [plaintext[i : i + 65519] for i in range(0, len(plaintext), 65519)]
        self.assertEqual(len(pieces), 3)
        parsed = parse_record_pieces(pieces)
        self.assertEqual(parsed, record)
        assert isinstance(parsed, Data)
        self.assertIs(type(parsed.data), bytes)

    def test_pieces_garbage(self) -> None:
        """Malformed plaintexts in pieces raise RecordError as whole ones do."""
        self.assertRaises(RecordError, parse_record_pieces, [b"\x09", b"abc"])
        self.assertRaises(RecordError, parse_record_pieces, [b"\x05\x00", b"\x00"])


class ViewTests(SynchronousTestCase):
    """parse_record_view: the byte path's parse of a view of a buffer that is reused."""

    @given(records)
    def test_view_parses_like_bytes(self, record: Record) -> None:
        """parse_record_view of a memoryview of the plaintext (inside a larger, reused buffer)
        gives the record parse_record gives; the record keeps nothing of the buffer: a DATA
        payload is its own bytes, unchanged when the buffer is overwritten."""
        plaintext = encode_record(record)
        buffer = bytearray(b"\xee" * 3 + plaintext + b"\xee" * 5)
        parsed = parse_record_view(memoryview(buffer)[3 : 3 + len(plaintext)])
        self.assertEqual(parsed, record)
        buffer[:] = bytes(len(buffer))
        self.assertEqual(parsed, record)
        if isinstance(parsed, Data):
            self.assertIs(type(parsed.data), bytes)

    @given(st.binary(max_size=64))
    def test_view_garbage(self, plaintext: bytes) -> None:
        """On any bytes, parse_record_view of a view returns what parse_record returns, or
        raises RecordError exactly when parse_record does."""
        try:
            expected: Record | None = parse_record(plaintext)
        except RecordError:
            expected = None
        if expected is None:
            self.assertRaises(RecordError, parse_record_view, memoryview(plaintext))
        else:
            self.assertEqual(parse_record_view(memoryview(plaintext)), expected)
