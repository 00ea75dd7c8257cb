"""Shared: the records, the plaintexts carried inside Noise transport messages.

Each record is a frozen, slotted dataclass with stock magic-wormhole's field names; a tag byte
(KCM 0, PING 1, PONG 2, OPEN 3, DATA 4, CLOSE 5, ACK 6), then 4-byte big-endian integers (the
layout: docs/module-notes.md). :func:`encode_record_parts`, :func:`parse_record_view` and
:func:`parse_record_pieces` are the byte path's codec, which keeps a DATA payload apart from
its 9-byte header (no concatenation out, one copy in).

Invariants: :func:`encode_record` and :func:`parse_record` are pure and exact inverses on
valid input (``parse_record(encode_record(r)) == r``); any malformed plaintext (empty, unknown
tag, wrong length, bad UTF-8) raises :class:`~txdilation.wire.dilation_errors.RecordError`, never
``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from txdilation.wire.dilation_errors import RecordError

T_KCM = b"\x00"
T_PING = b"\x01"
T_PONG = b"\x02"
T_OPEN = b"\x03"
T_DATA = b"\x04"
T_CLOSE = b"\x05"
T_ACK = b"\x06"

_U32_MAX = 2**32 - 1
_HEAD = struct.Struct(">BLL")  # tag, scid, seqnum
_ACK = struct.Struct(">BL")


@dataclass(frozen=True, slots=True)
class KCM:
    """Key Confirmation Message: a candidate (from the Follower) or the selection (Leader)."""


@dataclass(frozen=True, slots=True)
class Ping:
    """Keepalive probe; ``ping_id`` is 4 opaque bytes echoed by the Pong."""

    ping_id: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    """Answer to a Ping, carrying the same ``ping_id``."""

    ping_id: bytes


@dataclass(frozen=True, slots=True)
class Open:
    """Open subchannel ``scid`` for the named subprotocol."""

    seqnum: int
    scid: int
    subprotocol: str


@dataclass(frozen=True, slots=True)
class Data:
    """One application write() on subchannel ``scid``."""

    seqnum: int
    scid: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close (one direction of) subchannel ``scid``."""

    seqnum: int
    scid: int


@dataclass(frozen=True, slots=True)
class Ack:
    """Cumulative acknowledgement of every OPEN/DATA/CLOSE with ``seqnum <= resp_seqnum``."""

    resp_seqnum: int


Record = KCM | Ping | Pong | Open | Data | Close | Ack
SequencedRecord = Open | Data | Close

_KCM_BYTES = T_KCM


def _check_u32(name: str, value: int) -> None:
    if not isinstance(value, int) or not 0 <= value <= _U32_MAX:
        raise RecordError(f"{name} {value!r} does not fit in 4 unsigned bytes")


def _check_ping_id(value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != 4:
        raise RecordError(f"ping_id must be 4 bytes, got {value!r}")


def encode_record(record: Record) -> bytes:
    """Return the plaintext bytes of ``record``.

    :raises RecordError: when a field is out of range (e.g. a seqnum >= 2**32).
    :raises TypeError: when ``record`` is not a record.
    """
    match record:
        case Data(seqnum, scid, data):
            _check_u32("scid", scid)
            _check_u32("seqnum", seqnum)
            return _HEAD.pack(4, scid, seqnum) + data
        case Ack(resp_seqnum):
            _check_u32("resp_seqnum", resp_seqnum)
            return _ACK.pack(6, resp_seqnum)
        case Open(seqnum, scid, subprotocol):
            _check_u32("scid", scid)
            _check_u32("seqnum", seqnum)
            return _HEAD.pack(3, scid, seqnum) + subprotocol.encode("utf-8")
        case Close(seqnum, scid):
            _check_u32("scid", scid)
            _check_u32("seqnum", seqnum)
            return _HEAD.pack(5, scid, seqnum)
        case Ping(ping_id):
            _check_ping_id(ping_id)
            return T_PING + ping_id
        case Pong(ping_id):
            _check_ping_id(ping_id)
            return T_PONG + ping_id
        case KCM():
            return _KCM_BYTES
    raise TypeError(f"not a record: {record!r}")


def encode_record_parts(record: Record) -> tuple[bytes, bytes]:
    """Return the plaintext of ``record`` as ``(head, body)``: ``head + body`` is
    ``encode_record(record)``; ``body`` is a DATA record's payload (the same object, not a
    copy) and empty for every other record.

    :raises RecordError: when a field is out of range (e.g. a seqnum >= 2**32).
    :raises TypeError: when ``record`` is not a record.
    """
    if type(record) is Data:
        scid, seqnum = record.scid, record.seqnum
        if not (type(scid) is int and type(seqnum) is int and 0 <= scid <= _U32_MAX >= seqnum >= 0):
            _check_u32("scid", scid)
            _check_u32("seqnum", seqnum)
        return _HEAD.pack(4, scid, seqnum), record.data
    return encode_record(record), b""


def _parse_data(plaintext: bytes) -> Record:
    if len(plaintext) < 9:
        raise RecordError(f"truncated DATA record ({len(plaintext)} bytes)")
    _, scid, seqnum = _HEAD.unpack_from(plaintext)
    return Data(seqnum, scid, plaintext[9:])


def _parse_open(plaintext: bytes) -> Record:
    if len(plaintext) < 9:
        raise RecordError(f"truncated OPEN record ({len(plaintext)} bytes)")
    _, scid, seqnum = _HEAD.unpack_from(plaintext)
    try:
        subprotocol = plaintext[9:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"OPEN subprotocol is not UTF-8: {e}") from None
    return Open(seqnum, scid, subprotocol)


def _parse_close(plaintext: bytes) -> Record:
    if len(plaintext) != 9:
        raise RecordError(f"CLOSE record must be 9 bytes, got {len(plaintext)}")
    _, scid, seqnum = _HEAD.unpack_from(plaintext)
    return Close(seqnum, scid)


def _parse_ack(plaintext: bytes) -> Record:
    if len(plaintext) != 5:
        raise RecordError(f"ACK record must be 5 bytes, got {len(plaintext)}")
    return Ack(_ACK.unpack_from(plaintext)[1])


def _parse_ping(plaintext: bytes) -> Record:
    if len(plaintext) != 5:
        raise RecordError(f"PING record must be 5 bytes, got {len(plaintext)}")
    return Ping(plaintext[1:5])


def _parse_pong(plaintext: bytes) -> Record:
    if len(plaintext) != 5:
        raise RecordError(f"PONG record must be 5 bytes, got {len(plaintext)}")
    return Pong(plaintext[1:5])


def _parse_kcm(plaintext: bytes) -> Record:
    if len(plaintext) != 1:
        raise RecordError(f"KCM record must be 1 byte, got {len(plaintext)}")
    return KCM()


_PARSERS = {
    0: _parse_kcm,
    1: _parse_ping,
    2: _parse_pong,
    3: _parse_open,
    4: _parse_data,
    5: _parse_close,
    6: _parse_ack,
}


def parse_record(plaintext: bytes) -> Record:
    """Parse one decrypted record.

    :raises RecordError: for an empty plaintext, an unknown tag, a wrong length or bad UTF-8.
    """
    if not plaintext:
        raise RecordError("empty record")
    parser = _PARSERS.get(plaintext[0])
    if parser is None:
        raise RecordError(f"unknown record tag 0x{plaintext[0]:02x}")
    return parser(bytes(plaintext))


def parse_record_view(plaintext: bytes | memoryview) -> Record:
    """Parse one decrypted record given as any bytes-like object (e.g. a view of a buffer
    that is reused afterwards): the record owns no part of ``plaintext``.

    Equal to ``parse_record(bytes(plaintext))``, but a DATA record's payload is copied once,
    straight out of ``plaintext``.

    :raises RecordError: as :func:`parse_record`.
    """
    if len(plaintext) >= 9 and plaintext[0] == 4:
        _, scid, seqnum = _HEAD.unpack_from(plaintext)
        return Data(seqnum, scid, bytes(plaintext[9:]))
    return parse_record(bytes(plaintext))


def parse_record_pieces(pieces: Sequence[bytes]) -> Record:
    """Parse one decrypted record given as the plaintexts of its Noise pieces.

    Equal to ``parse_record(b"".join(pieces))``, but a DATA record spread over several pieces
    has its payload copied once (straight out of the pieces), not joined and then sliced.

    :raises RecordError: as :func:`parse_record`.
    """
    if len(pieces) == 1:
        return parse_record(pieces[0])
    first = pieces[0]
    if len(first) >= 9 and first[0] == 4:
        _, scid, seqnum = _HEAD.unpack_from(first)
        return Data(seqnum, scid, b"".join([memoryview(first)[9:], *pieces[1:]]))
    return parse_record(b"".join(pieces))


__all__ = [
    "KCM",
    "T_ACK",
    "T_CLOSE",
    "T_DATA",
    "T_KCM",
    "T_OPEN",
    "T_PING",
    "T_PONG",
    "Ack",
    "Close",
    "Data",
    "Open",
    "Ping",
    "Pong",
    "Record",
    "SequencedRecord",
    "encode_record",
    "encode_record_parts",
    "parse_record",
    "parse_record_pieces",
    "parse_record_view",
]
