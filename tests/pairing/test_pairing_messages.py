"""The pairing's wormhole messages and its announcement."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.identity_keys import new_private, public_of
from txdilation.pairing.pairing_messages import (
    ANNOUNCEMENT,
    BadPairingMessage,
    Check,
    Here,
    Introduce,
    Met,
    Stored,
    announced,
    build,
    parse,
)


class MessageTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """``parse(build(m)) == m``."""
        key = public_of(new_private())
        nonce = "0123456789abcdef"
        for message in (
            Introduce(b"i" * 16, "host", nonce, key),
            Stored(3, "f" * 16),
            Met(),
            Check(nonce),
            Here(nonce),
        ):
            self.assertEqual(parse(build(message)), message)

    def test_refused(self) -> None:
        """Other application messages, bad ids and names: BadPairingMessage."""
        for data in (
            b"hello",
            b'{"pairing": "other"}',
            b'{"pairing": "introduce", "id": "00", "name": "x", "nonce": "n"}',
            b'{"pairing": "introduce", "id": "' + b"00" * 16 + b'", "name": "", "nonce": "n"}',
            b'{"pairing": "stored", "generation": -1, "fingerprint": "f"}',
            b'{"pairing": "stored", "generation": 1, "fingerprint": "f"}',
            b'{"pairing": "introduce", "id": "' + b"00" * 16 + b'", "name": "x", "nonce": "n"}',
            b'{"pairing": "introduce", "id": "'
            + b"00" * 16
            + b'", "name": "x", "nonce": "'
            + b"0" * 16
            + b'", "key": "00"}',
            b'{"pairing": "check", "nonce": "x"}',
        ):
            self.assertRaises(BadPairingMessage, parse, data)

    def test_announcement(self) -> None:
        """Only our announcement counts; a stock peer's app versions ({}) do not."""
        self.assertTrue(announced(ANNOUNCEMENT))
        old = {"txdilation-pairing": {"v": 1}}  # before static identities: not compatible
        for versions in ({}, None, {"txdilation-pairing": 2}, old):
            self.assertFalse(announced(versions))
