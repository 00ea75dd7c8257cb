"""Lobby messages: sealed and opened under the generation's key, always the same size, refused
under any other key, when altered, malformed, too long (before any decoding) or with numbers
out of bounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.hello import (
    BODY_LENGTH,
    MAX_NUMBER,
    SEALED_SIZE,
    BadHello,
    Hello,
    new_nonce,
    seal,
    unseal,
)

fingerprints = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)
numbers = st.integers(min_value=0, max_value=MAX_NUMBER)
hellos = st.builds(
    Hello,
    sender=st.binary(min_size=16, max_size=16),
    counter=numbers,
    seq=numbers,
    nonce=st.just(new_nonce()),
    holds=st.lists(fingerprints, max_size=2).map(tuple),
)
directed = st.builds(
    Hello,
    sender=st.binary(min_size=16, max_size=16),
    counter=numbers,
    seq=numbers,
    nonce=st.just(new_nonce()),
    kind=st.sampled_from(["offer", "answer"]),
    to=fingerprints,
    generation=fingerprints,
    offer=numbers,
    noise=st.binary(min_size=1, max_size=144),
)
KEY = b"k" * 32


class HelloTests(SynchronousTestCase):
    @given(st.one_of(hellos, directed))
    def test_round_trip_and_size(self, hello: Hello) -> None:
        """``unseal(seal(m)) == m``, and every sealed message has the same size."""
        body = seal(hello, KEY)
        self.assertEqual(len(body), BODY_LENGTH)
        self.assertEqual(len(bytes.fromhex(body)), SEALED_SIZE)
        self.assertEqual(unseal(body, KEY), hello)

    def test_other_key_or_altered(self) -> None:
        """Another lobby's key, a flipped bit, a truncation, garbage of the right length, a
        body of 10 MB (refused by its length, never decoded) or not a string: BadHello."""
        hello = Hello(b"s" * 16, 1, 1, new_nonce(), ("0" * 16,))
        body = seal(hello, KEY)
        self.assertRaises(BadHello, unseal, body, b"o" * 32)
        flipped = bytearray(bytes.fromhex(body))
        flipped[20] ^= 1
        for bad in (flipped.hex(), body[:-2], "x" * BODY_LENGTH, "ab" * 5_000_000, None, 7):
            self.assertRaises(BadHello, unseal, bad, KEY)

    def test_malformed_fields_refused(self) -> None:
        """Sealed with the right key but with a bad nonce or fingerprint, an offer without its
        Noise message, or a counter over the bound (what only a key holder could send):
        BadHello, not a crash later."""
        nonce = new_nonce()
        for hello in (
            Hello(b"s" * 16, 1, 1, "ü" * 16, ("0" * 16,)),
            Hello(b"s" * 16, 1, 1, nonce, ("not hex",)),
            Hello(b"s" * 16, 1, 1, nonce, (), "offer", nonce, "0" * 16, 1, b""),
            Hello(b"s" * 16, 1, 1, nonce, (), "answer", "x", "0" * 16, 1, b"n"),
            Hello(b"s" * 16, 1, 1, nonce, (), "other"),
            Hello(b"s" * 16, MAX_NUMBER + 1, 1, nonce, ()),
        ):
            self.assertRaises(BadHello, unseal, seal(hello, KEY), KEY)

    def test_order(self) -> None:
        """A later message of one incarnation, or any of a later incarnation, orders after."""
        a = Hello(b"s" * 16, 3, 9, "n", ())
        self.assertLess(a.order, Hello(b"s" * 16, 3, 10, "n", ()).order)
        self.assertLess(a.order, Hello(b"s" * 16, 4, 1, "m", ()).order)
