"""Records for the pairing tests."""

from __future__ import annotations

import os

from txdilation.pairing import ratchet
from txdilation.pairing.record import Identity, PairingRecord


def records(mailbox: str = "ws://127.0.0.1:1/v1") -> tuple[PairingRecord, PairingRecord]:
    """Two sides of one fresh pairing (generation 0, the same secret)."""
    a, b = Identity(os.urandom(16), "side-a"), Identity(os.urandom(16), "side-b")
    secret = os.urandom(32)
    common = {"mailbox": mailbox, "appid": "txdilation.test/pairing", "relay": ("tcp:127.0.0.1:2",)}
    return (
        ratchet.new_record(a, b, secret=secret, counter=1, now=1.0, **common),  # type: ignore[arg-type]
        ratchet.new_record(b, a, secret=secret, counter=1, now=1.0, **common),  # type: ignore[arg-type]
    )
