"""The pairing file format: round trip; every kind of damage or edit refused with one line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from txdilation.pairing import ratchet
from txdilation.pairing.pairing_errors import (
    CorruptPairingFile,
    NotAPairingFile,
    PairingFileError,
    UnsupportedPairingVersion,
)
from txdilation.pairing.record import decode, encode


class RecordTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """``decode(encode(r)) == r``, with and without a pending generation; the secret never
        shows in ``repr``."""
        record, _ = records()
        staged = ratchet.stage(record, b"n" * 32)
        for r in (record, staged, ratchet.confirm(staged)):
            self.assertEqual(decode(encode(r)), r)
        self.assertNotIn(record.current.secret.hex(), repr(record))

    def test_edits_refused(self) -> None:
        """Changing any field (the generation, a peer id, the secret, the mailbox) without the
        tag matching: refused as corrupted or edited."""
        record, _ = records()
        body = json.loads(encode(record))
        edits = [
            ("current", {**body["current"], "generation": 5}),
            ("peer", {**body["peer"], "id": "00" * 16}),
            ("current", {**body["current"], "secret": "11" * 32}),
            ("mailbox", "ws://elsewhere:1/v1"),
            ("peer-key", "22" * 32),
            ("receipts", []),
            ("counter", 99),
        ]
        for key, value in edits:
            edited = json.dumps({**body, key: value}).encode()
            with self.assertRaises(CorruptPairingFile, msg=key) as caught:
                decode(edited, "pairing file X")
            self.assertIn("pairing file X is corrupted or was edited", str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))

    @given(st.integers(min_value=0), st.integers(min_value=0, max_value=7))
    def test_bit_flips_and_truncations(self, where: int, bit: int) -> None:
        """Any flipped bit or truncation is refused (never accepted as another record)."""
        record, _ = records()
        data = bytearray(encode(record))
        index = where % len(data)
        data[index] ^= 1 << bit
        for damaged in (bytes(data), bytes(data[:index])):
            try:
                decoded = decode(damaged)
            except PairingFileError:
                continue
            self.assertEqual(decoded, record)  # a flip in insignificant whitespace only

    def test_format_1_refused_with_one_line(self) -> None:
        """A file written before static identities (format 1) is refused in one line that
        says to pair again (it is not upgraded: its secret carried no identity)."""
        record, _ = records()
        body = json.loads(encode(record))
        with self.assertRaises(UnsupportedPairingVersion) as caught:
            decode(json.dumps({**body, "version": 1}).encode(), "pairing file X")
        message = str(caught.exception)
        self.assertIn("format 1, without identity keys", message)
        self.assertIn("pair again with a new code", message)
        self.assertNotIn("\n", message)

    def test_not_ours_and_other_version(self) -> None:
        """Another JSON document or text: not a pairing file; another version: says which."""
        self.assertRaises(NotAPairingFile, decode, b'{"a": 1}')
        self.assertRaises(NotAPairingFile, decode, b"hello")
        record, _ = records()
        body = json.loads(encode(record))
        with self.assertRaises(UnsupportedPairingVersion) as caught:
            decode(json.dumps({**body, "version": 3}).encode())
        self.assertIn("version 3", str(caught.exception))
        self.assertRaises(CorruptPairingFile, decode, encode(record)[:40])
