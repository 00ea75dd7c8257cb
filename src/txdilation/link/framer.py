"""L2: the inbound framing of one connection (I/O-free, an h11-style pull parser).

Bytes arrive through :meth:`Framer.receive_data`; :meth:`Framer.next_event` yields, one per
call: :class:`RelayAccepted` (the relay's ``b"ok\n"``, with ``expect_relay``),
:class:`PrologueReceived`, then :class:`Frame` after :class:`Frame` (4-byte big-endian length
and payload). Outbound framing is the stateless :meth:`Framer.frame` /
:meth:`Framer.frame_pieces`, for ``writeSequence``.

Invariants: a wrong relay answer or prologue byte is refused at once (a bounded excerpt in the
error); a frame over the limit read at parse time (:meth:`Framer.set_max_frame_size`) is
refused from its header, before anything is buffered; chunks are kept as received and a frame
inside one is a zero-copy view (only frames spanning reads are assembled, never resized after);
after a :class:`~txdilation.wire.dilation_errors.FramingError` every call raises again. In full:
docs/module-notes.md.
"""

from __future__ import annotations

import enum
import math
import struct
from binascii import hexlify
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from txdilation.wire.dilation_errors import FramingError
from txdilation.wire.limits import DEFAULT_MAX_RECORD_SIZE
from txdilation.wire.roles import Role

PROLOGUE_LEADER = b"Magic-Wormhole Dilation Handshake v1 Leader\n\n"
PROLOGUE_FOLLOWER = b"Magic-Wormhole Dilation Handshake v1 Follower\n\n"
RELAY_OK = b"ok\n"

#: One Noise NNpsk0 handshake message with an empty payload: a 32-byte X25519 ephemeral public
#: key and the 16-byte tag of the (empty) encrypted payload. Nothing larger is legitimate before
#: the handshake completes.
HANDSHAKE_FRAME_LIMIT = 32 + 16


_PIECE_PLAINTEXT = 65519  # largest plaintext of one Noise transport message
_PIECE_OVERHEAD = 16  # ChaCha20-Poly1305 tag added to each piece
_FRAME_LENGTH_LIMIT = 2**32  # the length prefix is 4 unsigned bytes
_EXCERPT = 64  # bytes of bad input quoted in an error message
_LENGTH = struct.Struct(">L")


def relay_handshake_line(token: bytes, side: str) -> bytes:
    """Return the line a connection to a transit relay starts with.

    :param token: the relay token (see :func:`txdilation.wire.keys.derive_relay_token`).
    :param side: our dilation side, 16 lowercase hex digits.
    :returns: ``b"please relay <hex token> for side <side>\\n"``.
    :raises UnicodeEncodeError: when ``side`` is not ASCII.
    """
    return b"please relay " + hexlify(token) + b" for side " + side.encode("ascii") + b"\n"


def max_frame_size_for_record(max_record_size: int) -> int:
    """Return the frame payload size that carries a record plaintext of ``max_record_size``.

    A plaintext is encrypted in pieces of at most 65519 bytes (one for an empty plaintext), each
    gaining a 16-byte tag, all inside one frame.

    :param max_record_size: the largest plaintext record to accept, in bytes.
    :returns: the matching ciphertext frame size, to pass to :meth:`Framer.set_max_frame_size`.
    :raises ValueError: when ``max_record_size`` is negative.
    """
    if max_record_size < 0:
        raise ValueError(f"max_record_size must not be negative, got {max_record_size}")
    pieces = max(1, math.ceil(max_record_size / _PIECE_PLAINTEXT))
    return max_record_size + pieces * _PIECE_OVERHEAD


@dataclass(frozen=True, slots=True)
class RelayAccepted:
    """The transit relay answered ``ok\\n``: the peer is connected through it."""


@dataclass(frozen=True, slots=True)
class PrologueReceived:
    """The peer's prologue arrived intact; frames follow."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One length-prefixed frame: a Noise handshake message or transport ciphertext."""

    payload: bytes


FramerEvent = RelayAccepted | PrologueReceived | Frame


class _Expecting(enum.Enum):
    RELAY_OK = enum.auto()
    PROLOGUE = enum.auto()
    FRAMES = enum.auto()
    NOTHING = enum.auto()  # failed


class Framer:
    """Pull parser for the inbound bytes of one L2 connection (see the module docstring)."""

    def __init__(
        self,
        role: Role,
        *,
        expect_relay: bool = False,
        max_frame_size: int = HANDSHAKE_FRAME_LIMIT,
    ) -> None:
        """
        :param role: our role; the peer's prologue is the other role's.
        :param expect_relay: True for an outbound connection to a transit relay, which first
            answers ``ok\\n``.
        :param max_frame_size: the largest frame payload accepted until
            :meth:`set_max_frame_size` changes it.
        :raises ValueError: when ``max_frame_size`` is negative.
        """
        if role is Role.LEADER:
            self._our_prologue, self._peer_prologue = PROLOGUE_LEADER, PROLOGUE_FOLLOWER
        else:
            self._our_prologue, self._peer_prologue = PROLOGUE_FOLLOWER, PROLOGUE_LEADER
        self._expecting = _Expecting.RELAY_OK if expect_relay else _Expecting.PROLOGUE
        self._max_frame_size = 0
        self.set_max_frame_size(max_frame_size)
        self._data = b""  # the chunk being parsed
        self._view = memoryview(self._data)
        self._offset = 0  # bytes of _data already parsed
        self._queue: deque[bytes] = deque()  # chunks received after _data
        self._partial = bytearray()  # a frame that spans chunks, as assembled so far
        self._matched = 0  # bytes of the expected relay answer/prologue already seen
        self._failure = ""

    @property
    def our_prologue(self) -> bytes:
        """The prologue we send (the Leader sends :data:`PROLOGUE_LEADER`)."""
        return self._our_prologue

    @property
    def framing(self) -> bool:
        """True once the prologue was received: from then on only frames follow."""
        return self._expecting is _Expecting.FRAMES

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned in an event."""
        pending = sum(len(chunk) for chunk in self._queue)
        return len(self._partial) + len(self._data) - self._offset + pending

    def set_max_frame_size(self, size: int) -> None:
        """Set the largest frame payload accepted from now on.

        Applies to every frame not yet returned by :meth:`next_event`, buffered or not.

        :param size: a byte count; values of 2**32 and more mean "no limit".
        :raises ValueError: when ``size`` is negative.
        """
        if size < 0:
            raise ValueError(f"max_frame_size must not be negative, got {size}")
        self._max_frame_size = size

    def receive_data(self, data: bytes) -> None:
        """Append received bytes (kept as they are, not copied); parsing waits for the caller.

        :raises FramingError: when the framer already failed.
        """
        self._check_alive()
        if not data:
            return
        if type(data) is not bytes:
            data = bytes(data)  # only immutable chunks may be viewed without a copy
        if self._offset == len(self._data) and not self._queue:
            self._set_chunk(data)
        else:
            self._queue.append(data)

    def next_event(self) -> FramerEvent | None:
        """Parse and return the next event, or None when more bytes are needed.

        :raises FramingError: for a bad relay answer, a wrong prologue, a frame longer than the
            current limit, or when the framer already failed.
        """
        self._check_alive()
        if self._expecting is _Expecting.FRAMES:
            payload = self.next_frame()
            return None if payload is None else Frame(payload.tobytes())
        if self._expecting is _Expecting.PROLOGUE:
            if self._match(self._peer_prologue, "prologue"):
                self._expecting = _Expecting.FRAMES
                return PrologueReceived()
            return None
        if self._match(RELAY_OK, "relay answer"):
            self._expecting = _Expecting.PROLOGUE
            return RelayAccepted()
        return None

    def next_frame(self) -> memoryview | None:
        """Return the next frame's payload, or None when more bytes are needed (or the prologue
        has not been received yet: see :attr:`framing`).

        The payload is a read-only view that stays valid (the framer never writes to or
        resizes what it points into), without a copy when the frame arrived within one chunk.

        :raises FramingError: for a frame longer than the current limit, or when the framer
            already failed.
        """
        if self._expecting is not _Expecting.FRAMES:
            self._check_alive()
            return None
        while True:
            if not self._partial:
                data, start = self._data, self._offset
                available = len(data) - start
                if available >= _LENGTH.size:
                    (length,) = _LENGTH.unpack_from(data, start)
                    if length > self._max_frame_size:
                        self._refuse(length)
                    end = start + _LENGTH.size + length
                    if end <= len(data):
                        self._offset = end
                        return self._view[start + _LENGTH.size : end]  # read-only: bytes
                elif not available:
                    if not self._queue:
                        return None
                    self._set_chunk(self._queue.popleft())
                    continue
                if not self._queue:
                    return None  # the frame's start stays where it is until more arrives
            payload = self._assemble()
            if payload is not None or not self._queue:
                return payload

    def _assemble(self) -> memoryview | None:
        """Move bytes of the frame that spans chunks into ``_partial``, up to its end.

        :returns: the payload once complete (``_partial`` then starts afresh), else None
            (this chunk is used up).
        """
        partial = self._partial
        while True:
            if len(partial) < _LENGTH.size:
                need = _LENGTH.size - len(partial)
            else:
                (length,) = _LENGTH.unpack_from(partial, 0)
                if length > self._max_frame_size:
                    self._refuse(length)
                need = _LENGTH.size + length - len(partial)
                if not need:
                    self._partial = bytearray()
                    return memoryview(partial)[_LENGTH.size :].toreadonly()
            start = self._offset
            take = min(need, len(self._data) - start)
            if not take:
                if not self._queue:
                    return None
                self._set_chunk(self._queue.popleft())
                continue
            partial += self._view[start : start + take]
            self._offset = start + take

    @staticmethod
    def frame(payload: bytes) -> tuple[bytes, bytes]:
        """Frame ``payload`` for sending.

        :returns: ``(4-byte big-endian length, payload)``, ready for ``writeSequence``.
        :raises FramingError: when ``payload`` is 2**32 bytes or longer.
        """
        length = len(payload)
        if length >= _FRAME_LENGTH_LIMIT:
            raise FramingError(f"frame of {length} bytes does not fit a 4-byte length prefix")
        return _LENGTH.pack(length), payload

    @staticmethod
    def frame_pieces(pieces: Sequence[bytes]) -> list[bytes]:
        """Frame the concatenation of ``pieces`` (without concatenating them).

        :returns: ``[4-byte big-endian length, *pieces]``, ready for ``writeSequence``.
        :raises FramingError: when the pieces add up to 2**32 bytes or more.
        """
        length = len(pieces[0]) if len(pieces) == 1 else sum(map(len, pieces))
        if length >= _FRAME_LENGTH_LIMIT:
            raise FramingError(f"frame of {length} bytes does not fit a 4-byte length prefix")
        return [_LENGTH.pack(length), *pieces]

    def _set_chunk(self, chunk: bytes) -> None:
        self._data = chunk
        self._view = memoryview(chunk)
        self._offset = 0

    def _match(self, expected: bytes, what: str) -> bool:
        """Consume the received bytes that continue ``expected``.

        :returns: True once all of ``expected`` has arrived.
        :raises FramingError: at the first byte that differs.
        """
        while self._matched < len(expected):
            start = self._offset
            count = min(len(expected) - self._matched, len(self._data) - start)
            if not count:
                if not self._queue:
                    return False
                self._set_chunk(self._queue.popleft())
                continue
            got = self._data[start : start + count]
            if got != expected[self._matched : self._matched + count]:
                received = b"".join([self._data[start:], *self._queue])
                seen = expected[: self._matched] + received[:_EXCERPT]
                self._fail(f"bad {what}: expected {expected!r}, got {seen[:_EXCERPT]!r}")
            self._offset = start + count
            self._matched += count
        self._matched = 0
        return True

    def _refuse(self, length: int) -> NoReturn:
        self._fail(f"frame of {length} bytes exceeds the limit of {self._max_frame_size}")

    def _fail(self, message: str) -> NoReturn:
        self._expecting = _Expecting.NOTHING
        self._failure = message
        self._set_chunk(b"")
        self._queue.clear()
        self._partial = bytearray()
        raise FramingError(message)

    def _check_alive(self) -> None:
        if self._expecting is _Expecting.NOTHING:
            raise FramingError(f"framer already failed: {self._failure}")


__all__ = [
    "DEFAULT_MAX_RECORD_SIZE",
    "HANDSHAKE_FRAME_LIMIT",
    "PROLOGUE_FOLLOWER",
    "PROLOGUE_LEADER",
    "RELAY_OK",
    "Frame",
    "Framer",
    "FramerEvent",
    "PrologueReceived",
    "RelayAccepted",
    "max_frame_size_for_record",
    "relay_handshake_line",
]
