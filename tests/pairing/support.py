"""Records for the pairing tests."""

from __future__ import annotations

import os

from txdilation.pairing import ratchet
from txdilation.pairing.identity_keys import new_private, public_of
from txdilation.pairing.record import Identity, PairingRecord


def records(mailbox: str = "ws://127.0.0.1:1/v1") -> tuple[PairingRecord, PairingRecord]:
    """Two sides of one fresh pairing (generation 0, the same secret and receipt, confirmed)."""
    a, b = Identity(os.urandom(16), "side-a"), Identity(os.urandom(16), "side-b")
    key_a, key_b = new_private(), new_private()
    secret, receipt = os.urandom(32), os.urandom(32)
    common = {
        "mailbox": mailbox,
        "appid": "txdilation.test/pairing",
        "relay": ("tcp:127.0.0.1:2",),
        "secret": secret,
        "receipt": receipt,
        "counter": 1,
        "now": 1.0,
    }
    return (
        ratchet.confirm(ratchet.new_record(a, b, key=key_a, peer_key=public_of(key_b), **common)),  # type: ignore[arg-type]
        ratchet.confirm(ratchet.new_record(b, a, key=key_b, peer_key=public_of(key_a), **common)),  # type: ignore[arg-type]
    )
