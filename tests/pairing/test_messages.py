"""The pairing's wormhole messages and its announcement."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.messages import (
    ANNOUNCEMENT,
    BadPairingMessage,
    Introduce,
    Stored,
    announced,
    build,
    parse,
)


class MessageTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """``parse(build(m)) == m``."""
        for message in (Introduce(b"i" * 16, "host", "0123456789abcdef"), Stored(3, "f" * 16)):
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
        ):
            self.assertRaises(BadPairingMessage, parse, data)

    def test_announcement(self) -> None:
        """Only our announcement counts; a stock peer's app versions ({}) do not."""
        self.assertTrue(announced(ANNOUNCEMENT))
        for versions in ({}, None, {"txdilation-pairing": 2}, {"txdilation-pairing": {"v": 2}}):
            self.assertFalse(announced(versions))
