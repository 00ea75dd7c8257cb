"""The derivations: both sides get the same values whatever their order, values of different
purposes or secrets differ, and ids and sides have the server's own forms."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing import derive

ids = st.binary(min_size=16, max_size=16)
secrets = st.binary(min_size=32, max_size=32)
nonces = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


class DeriveTests(SynchronousTestCase):
    @given(secrets, ids, ids)
    def test_initial_secret_is_symmetric(self, material: bytes, a: bytes, b: bytes) -> None:
        """Both sides derive generation 0 alike, whichever calls itself ``me``."""
        if a == b:
            return
        self.assertEqual(
            derive.initial_secret(material, a, b), derive.initial_secret(material, b, a)
        )

    def test_same_ids_refused(self) -> None:
        """A pairing with itself is refused."""
        self.assertRaises(ValueError, derive.initial_secret, b"m" * 32, b"a" * 16, b"a" * 16)

    @given(secrets, secrets)
    def test_next_secret_needs_the_meeting(self, secret: bytes, material: bytes) -> None:
        """The next secret depends on the meeting's material, not only on the old secret."""
        self.assertNotEqual(
            derive.next_secret(secret, material), derive.next_secret(secret, material[::-1] + b"x")
        )
        self.assertNotEqual(derive.next_secret(secret, material), secret)

    @given(secrets, ids, nonces, nonces)
    def test_forms(self, secret: bytes, side_id: bytes, n1: str, n2: str) -> None:
        """Mailbox ids are 13 lowercase base32 characters and sides 10 hex digits (the stock
        server's and client's own forms); the password has 256 bits."""
        for mailbox in (derive.lobby_mailbox(secret), derive.meeting_mailbox(secret, (n1, n2))):
            self.assertRegex(mailbox, re.compile(r"^[a-z2-7]{13}$"))
        self.assertRegex(derive.lobby_side(secret, side_id), re.compile(r"^[0-9a-f]{10}$"))
        self.assertRegex(derive.meeting_password(secret, (n1, n2)), re.compile(r"^[0-9a-f]{64}$"))
        self.assertRegex(derive.fingerprint(secret), re.compile(r"^[0-9a-f]{16}$"))

    def test_purposes_are_independent(self) -> None:
        """Each purpose gives other bytes: a lobby is not a meeting, one generation's lobby is
        not another's, and a meeting of other nonces is another mailbox."""
        s1, s2 = b"1" * 32, b"2" * 32
        values = {
            derive.lobby_mailbox(s1),
            derive.lobby_mailbox(s2),
            derive.meeting_mailbox(s1, ("a" * 16, "b" * 16)),
            derive.meeting_mailbox(s1, ("b" * 16, "a" * 16)),
            derive.meeting_mailbox(s2, ("a" * 16, "b" * 16)),
        }
        self.assertEqual(len(values), 5)
        self.assertNotEqual(derive.hello_key(s1), derive.file_key(s1))
        self.assertNotEqual(derive.lobby_side(s1, b"a" * 16), derive.lobby_side(s1, b"b" * 16))
