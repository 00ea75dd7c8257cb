"""Tests for txdilation.wire.keys: the two HKDF derivations."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from wormhole._key import derive_key
from wormhole.util import HKDF

from txdilation.wire.keys import derive_dilation_key, derive_relay_token


def _rfc5869_hkdf_sha256(ikm: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 HKDF-SHA256 with no salt, written from the RFC with hmac/hashlib."""
    prk = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()
    okm, block = b"", b""
    counter = 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


class RFC5869SelfCheck(SynchronousTestCase):
    def test_rfc5869_case_3(self) -> None:
        """The test helper reproduces RFC 5869 test case 3 (SHA-256, no salt, no info)."""
        ikm = b"\x0b" * 22
        expected = bytes.fromhex(
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        )
        self.assertEqual(_rfc5869_hkdf_sha256(ikm, b"", 42), expected)


class DilationKeyTests(SynchronousTestCase):
    def test_known_answer(self) -> None:
        """derive_dilation_key is HKDF-SHA256(no salt, info=b"dilation-v1", 32 bytes)."""
        master = bytes(range(32))
        self.assertEqual(
            derive_dilation_key(master), _rfc5869_hkdf_sha256(master, b"dilation-v1", 32)
        )

    @given(st.binary(min_size=1, max_size=64))
    def test_matches_stock(self, master: bytes) -> None:
        """The dilation key equals what the stock Dilator derives in got_key().

        Stock: ``wormhole._key.derive_key(key, b"dilation-v1", 32)``.
        """
        self.assertEqual(derive_dilation_key(master), derive_key(master, b"dilation-v1", 32))

    def test_length(self) -> None:
        """The dilation key is 32 bytes."""
        self.assertEqual(len(derive_dilation_key(b"\x01" * 32)), 32)


class RelayTokenTests(SynchronousTestCase):
    def test_known_answer(self) -> None:
        """derive_relay_token is HKDF-SHA256(no salt, info=b"transit_relay_token", 32 bytes)."""
        key = bytes(range(100, 132))
        self.assertEqual(
            derive_relay_token(key), _rfc5869_hkdf_sha256(key, b"transit_relay_token", 32)
        )

    @given(st.binary(min_size=32, max_size=32))
    def test_matches_stock(self, key: bytes) -> None:
        """The relay token equals the stock connector's HKDF(key, 32, CTXinfo=...)."""
        stock = HKDF(key, 32, CTXinfo=b"transit_relay_token")
        self.assertEqual(derive_relay_token(key), stock)

    def test_differs_from_dilation_key(self) -> None:
        """The two derivations use different info strings, so their outputs differ."""
        key = b"\x07" * 32
        self.assertNotEqual(derive_relay_token(key), derive_dilation_key(key))
