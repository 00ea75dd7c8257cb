"""Hellos: sealed and opened under the lobby's key, always the same size, refused under any
other key or when altered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.hello import SEALED_SIZE, BadHello, Hello, new_nonce, seal, unseal

hellos = st.builds(
    Hello,
    sender=st.binary(min_size=16, max_size=16),
    counter=st.integers(min_value=0, max_value=2**40),
    seq=st.integers(min_value=0, max_value=2**20),
    nonce=st.just(new_nonce()),
    holds=st.lists(st.text(alphabet="0123456789abcdef", min_size=16, max_size=16), max_size=2).map(
        tuple
    ),
)
KEY = b"k" * 32


class HelloTests(SynchronousTestCase):
    @given(hellos)
    def test_round_trip_and_size(self, hello: Hello) -> None:
        """``unseal(seal(h)) == h``, and every sealed hello has the same size."""
        body = seal(hello, KEY)
        self.assertEqual(len(bytes.fromhex(body)), SEALED_SIZE)
        self.assertEqual(unseal(body, KEY), hello)

    def test_other_key_or_altered(self) -> None:
        """Another lobby's key, a flipped bit, a truncation or garbage: BadHello."""
        hello = Hello(b"s" * 16, 1, 1, new_nonce(), ("0" * 16,))
        body = seal(hello, KEY)
        self.assertRaises(BadHello, unseal, body, b"o" * 32)
        flipped = bytearray(bytes.fromhex(body))
        flipped[20] ^= 1
        self.assertRaises(BadHello, unseal, flipped.hex(), KEY)
        self.assertRaises(BadHello, unseal, body[:-2], KEY)
        self.assertRaises(BadHello, unseal, "not hex", KEY)

    def test_malformed_fields_refused(self) -> None:
        """Sealed with the right key but with a nonce or a fingerprint that is not 16 hex
        digits (what only a key holder could send): BadHello, not a crash later."""
        for nonce, holds in (("ü" * 16, ("0" * 16,)), (new_nonce(), ("not hex",))):
            body = seal(Hello(b"s" * 16, 1, 1, nonce, holds), KEY)
            self.assertRaises(BadHello, unseal, body, KEY)

    def test_order(self) -> None:
        """A later hello of one incarnation, or any of a later incarnation, orders after."""
        a = Hello(b"s" * 16, 3, 9, "n", ())
        self.assertLess(a.order, Hello(b"s" * 16, 3, 10, "n", ()).order)
        self.assertLess(a.order, Hello(b"s" * 16, 4, 1, "m", ()).order)
