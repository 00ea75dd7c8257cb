"""Big-endian 4-byte unsigned integers, as used by every Dilation length, scid and seqnum.

Invariant: ``from_be4(to_be4(n)) == n`` for every ``0 <= n < 2**32``; anything else raises.
"""

from __future__ import annotations

import struct

_BE4 = struct.Struct(">L")


def to_be4(value: int) -> bytes:
    """Encode ``value`` as 4 big-endian bytes.

    :raises ValueError: when ``value`` is outside ``0 <= value < 2**32``.
    """
    if not 0 <= value < 2**32:
        raise ValueError(f"value {value!r} does not fit in 4 unsigned bytes")
    return _BE4.pack(value)


def from_be4(data: bytes) -> int:
    """Decode exactly 4 big-endian bytes.

    :raises TypeError: when ``data`` is not ``bytes``.
    :raises ValueError: when ``data`` is not 4 bytes long.
    """
    if not isinstance(data, bytes):
        raise TypeError(repr(data))
    if len(data) != 4:
        raise ValueError(f"need 4 bytes, got {len(data)}")
    value: int = _BE4.unpack(data)[0]
    return value
