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

    @given(secrets, ids, secrets, st.integers(0, 3), st.integers(0, 64))
    def test_forms(self, secret: bytes, side_id: bytes, digest: bytes, slot: int, r: int) -> None:
        """Mailbox ids are 13 lowercase base32 characters and sides 10 hex digits (the stock
        server's and client's own forms); the password has 256 bits."""
        for mailbox in (
            derive.lobby_mailbox(secret, slot, r),
            derive.meeting_mailbox(secret, digest),
        ):
            self.assertRegex(mailbox, re.compile(r"^[a-z2-7]{13}$"))
        self.assertRegex(derive.lobby_side(secret, side_id, slot, r), re.compile(r"^[0-9a-f]{10}$"))
        self.assertRegex(derive.meeting_password(secret, digest), re.compile(r"^[0-9a-f]{64}$"))
        self.assertRegex(derive.fingerprint(secret), re.compile(r"^[0-9a-f]{16}$"))

    def test_purposes_are_independent(self) -> None:
        """Each purpose gives other bytes: a rendezvous is not a meeting; each slot and each
        round of a generation is another mailbox (who saw one cannot tell the next), and so is
        each generation's; keys of different purposes differ."""
        s1, s2 = b"1" * 32, b"2" * 32
        values = {
            *(
                derive.lobby_mailbox(s, slot, r)
                for s in (s1, s2)
                for slot in (0, 1)
                for r in (0, 1)
            ),
            derive.meeting_mailbox(s1, b"h" * 32),
            derive.meeting_mailbox(s2, b"h" * 32),
        }
        self.assertEqual(len(values), 10)
        keys = {derive.lobby_key(s1), derive.file_key(s1), derive.psk(s1), derive.lobby_key(s2)}
        self.assertEqual(len(keys), 4)
        sides = {derive.lobby_side(s1, i, 0, r) for i in (b"a" * 16, b"b" * 16) for r in (0, 1)}
        self.assertEqual(len(sides), 4)
        self.assertNotEqual(derive.next_purpose(1), derive.next_purpose(2))
