"""Pairing: every value two paired sides compute alike from a shared secret (no I/O).

Layer: pairing core (pure functions). Each derivation is RFC 5869 HKDF-SHA256 with an ``info``
naming its purpose (``txdilation-pairing/v2/...``) and, where two sides must agree on an order,
the two pairing ids lowest first: the secrets (:func:`initial_secret`, :func:`next_secret`),
:func:`fingerprint`, the lobby's (:func:`lobby_mailbox`, :func:`lobby_side`,
:func:`lobby_key`), :func:`psk`, a meeting's (:func:`meeting_mailbox`,
:func:`meeting_password`) and :func:`file_key`. What each is for: docs/module-notes.md,
docs/pairing.md.

Invariants: every function is pure and independent of which side calls it; outputs of
different purposes are independent (distinct ``info``); mailbox ids are 13 lowercase base32
characters and sides 10 hex digits, the forms of the stock mailbox server's and client's.
"""

from __future__ import annotations

import base64
from typing import Final

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "ID_LENGTH",
    "MATERIAL_PURPOSE",
    "RECEIPT_PURPOSE",
    "SECRET_LENGTH",
    "SLOTS",
    "file_key",
    "fingerprint",
    "initial_secret",
    "lobby_key",
    "lobby_mailbox",
    "lobby_side",
    "meeting_mailbox",
    "meeting_password",
    "next_purpose",
    "next_secret",
    "ordered",
    "psk",
]

SECRET_LENGTH: Final = 32
"""Bytes of one generation's secret."""

ID_LENGTH: Final = 16
"""Bytes of a pairing id (each side makes its own at random when it pairs)."""

SLOTS: Final = 2
"""Independent rendezvous mailboxes per generation: one squatted is not the only way in."""

MATERIAL_PURPOSE: Final = "txdilation-pairing/v2/secret"
"""The ``w.derive_key()`` purpose of the code wormhole's material for :func:`initial_secret`."""

RECEIPT_PURPOSE: Final = "txdilation-pairing/v2/receipt"
"""The ``w.derive_key()`` purpose of a meeting's receipt (proves a process was in it)."""

_PREFIX: Final = b"txdilation-pairing/v2/"


def next_purpose(number: int) -> str:
    """The ``w.derive_key()`` purpose of the material stepping generation ``number`` on (one
    per step, so a meeting can step more than once)."""
    return f"txdilation-pairing/v2/next/{number}"


def _hkdf(key_material: bytes, purpose: bytes, length: int = SECRET_LENGTH) -> bytes:
    hkdf = HKDF(algorithm=SHA256(), length=length, salt=None, info=_PREFIX + purpose)
    return hkdf.derive(key_material)


def ordered(id_a: bytes, id_b: bytes) -> tuple[bytes, bytes]:
    """The two pairing ids, lowest first (the order both sides agree on).

    :raises ValueError: when they are equal (a pairing is between two different sides).
    """
    if id_a == id_b:
        raise ValueError("both sides of a pairing have the same id")
    return (id_a, id_b) if id_a < id_b else (id_b, id_a)


def initial_secret(material: bytes, my_id: bytes, peer_id: bytes) -> bytes:
    """Generation 0's secret from ``w.derive_key(MATERIAL_PURPOSE, 32)`` of the code wormhole."""
    low, high = ordered(my_id, peer_id)
    return _hkdf(material + low + high, b"initial")


def next_secret(secret: bytes, material: bytes) -> bytes:
    """The next generation's secret from the current one and a meeting's material."""
    return _hkdf(secret + material, b"next")


def fingerprint(secret: bytes) -> str:
    """16 hex digits naming ``secret`` (equal on both sides exactly when the secrets are)."""
    return _hkdf(secret, b"fingerprint", 8).hex()


def _mailbox_id(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").lower().rstrip("=")


def lobby_mailbox(secret: bytes, slot: int, round_: int) -> str:
    """The mailbox id of rendezvous ``slot`` in its ``round_`` (13 base32 characters)."""
    return _mailbox_id(_hkdf(secret, f"lobby-mailbox/{slot}/{round_}".encode(), 8))


def lobby_side(secret: bytes, side_id: bytes, slot: int, round_: int) -> str:
    """The mailbox-server ``side`` one pairing side binds with in a rendezvous: the same at
    every restart, so a restarted process re-opens it as the same side."""
    return _hkdf(secret + side_id, f"lobby-side/{slot}/{round_}".encode(), 5).hex()


def lobby_key(secret: bytes) -> bytes:
    """The key sealing the messages of the generation's rendezvous."""
    return _hkdf(secret, b"lobby-key")


def psk(secret: bytes) -> bytes:
    """The Noise KKpsk2 pre-shared key of the generation's meetings."""
    return _hkdf(secret, b"psk")


def meeting_mailbox(key: bytes, handshake_hash: bytes) -> str:
    """A meeting's mailbox id, from the key its Noise handshake carried and the handshake hash."""
    return _mailbox_id(_hkdf(key + handshake_hash, b"meeting-mailbox", 8))


def meeting_password(key: bytes, handshake_hash: bytes) -> str:
    """A meeting's PAKE password: 64 hex digits (256 bits)."""
    return _hkdf(key + handshake_hash, b"meeting-password").hex()


def file_key(secret: bytes) -> bytes:
    """The key of the integrity tag of a pairing file whose current secret is ``secret``."""
    return _hkdf(secret, b"file-tag")
