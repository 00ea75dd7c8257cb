"""Tests for txdilation.wire.encode: 4-byte big-endian integers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.wire.encode import from_be4, to_be4

u32 = st.integers(min_value=0, max_value=2**32 - 1)


class Be4Tests(SynchronousTestCase):
    @given(u32)
    def test_round_trip(self, value: int) -> None:
        """Every unsigned 32-bit value survives to_be4 then from_be4, in 4 bytes."""
        encoded = to_be4(value)
        self.assertEqual(len(encoded), 4)
        self.assertEqual(from_be4(encoded), value)

    @given(u32)
    def test_big_endian(self, value: int) -> None:
        """to_be4 puts the most significant byte first."""
        self.assertEqual(to_be4(value), value.to_bytes(4, "big"))

    def test_known_values(self) -> None:
        """The boundaries encode to the expected bytes."""
        self.assertEqual(to_be4(0), b"\x00\x00\x00\x00")
        self.assertEqual(to_be4(65536), b"\x00\x01\x00\x00")
        self.assertEqual(to_be4(2**32 - 1), b"\xff\xff\xff\xff")

    @given(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)))
    def test_to_be4_out_of_range(self, value: int) -> None:
        """Negative values and values >= 2**32 raise ValueError."""
        self.assertRaises(ValueError, to_be4, value)

    @given(st.binary().filter(lambda b: len(b) != 4))
    def test_from_be4_wrong_length(self, data: bytes) -> None:
        """Anything but exactly 4 bytes raises ValueError."""
        self.assertRaises(ValueError, from_be4, data)

    def test_from_be4_not_bytes(self) -> None:
        """A non-bytes argument (str, bytearray) raises TypeError."""
        self.assertRaises(TypeError, from_be4, "abcd")
        self.assertRaises(TypeError, from_be4, bytearray(4))
