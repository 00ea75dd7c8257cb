"""Pairing: every value two paired sides compute alike from their shared secret (no I/O).

Layer: pairing core (pure functions). Each derivation is RFC 5869 HKDF-SHA256 over the
secret of one generation, with an ``info`` naming its purpose (``txdilation-pairing/v1/...``)
and, where two sides must agree on an order, the two pairing ids lowest first. Nothing here
depends on which side calls it: both sides get the same bytes.

What the values are for (docs/pairing.md):

- :func:`initial_secret`: generation 0's secret, from the material a code wormhole's session
  key gives (``w.derive_key(MATERIAL_PURPOSE, 32)``) and both pairing ids (never the session
  key itself, never the code);
- :func:`next_secret`: the ratchet: the next generation's secret from the current one and the
  material of the meeting that advances it (an old secret alone does not give the next);
- :func:`fingerprint`: names one generation's secret in hellos and ``pairing show`` (reveals
  nothing about it);
- :func:`lobby_mailbox`, :func:`lobby_side`, :func:`hello_key`: the lobby of a generation (a
  mailbox whose id, and the mailbox-server ``side`` each pairing side binds with, look like
  the server's own random ones), and the key sealing the hellos posted there;
- :func:`meeting_mailbox`, :func:`meeting_password`: one meeting's mailbox and PAKE password,
  from the secret and the two sides' incarnation nonces (a fresh pair for every meeting);
- :func:`file_key`: the key of a pairing file's integrity tag.

Invariants: every function is pure; outputs of different purposes are independent (distinct
``info``); mailbox ids are 13 lowercase base32 characters and sides 10 hex digits, the forms
of the stock mailbox server's and client's random ones.
"""

from __future__ import annotations

import base64
from typing import Final

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "ID_LENGTH",
    "MATERIAL_PURPOSE",
    "NEXT_PURPOSE",
    "SECRET_LENGTH",
    "file_key",
    "fingerprint",
    "hello_key",
    "initial_secret",
    "lobby_mailbox",
    "lobby_side",
    "meeting_mailbox",
    "meeting_password",
    "next_secret",
    "ordered",
]

SECRET_LENGTH: Final = 32
"""Bytes of one generation's secret."""

ID_LENGTH: Final = 16
"""Bytes of a pairing id (each side makes its own at random when it pairs)."""

MATERIAL_PURPOSE: Final = "txdilation-pairing/v1/secret"
"""The ``w.derive_key()`` purpose of the code wormhole's material for :func:`initial_secret`."""

NEXT_PURPOSE: Final = "txdilation-pairing/v1/next"
"""The ``w.derive_key()`` purpose of a meeting's material for :func:`next_secret`."""

_PREFIX: Final = b"txdilation-pairing/v1/"


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
    """Generation 0's secret.

    :param material: ``w.derive_key(MATERIAL_PURPOSE, 32)`` of the code wormhole.
    :param my_id: this side's pairing id.
    :param peer_id: the peer's.
    """
    low, high = ordered(my_id, peer_id)
    return _hkdf(material + low + high, b"initial")


def next_secret(secret: bytes, material: bytes) -> bytes:
    """The next generation's secret.

    :param secret: the secret of the generation the meeting was made with.
    :param material: ``w.derive_key(NEXT_PURPOSE, 32)`` of that meeting's wormhole (fresh from
        its PAKE: someone who holds ``secret`` but was not in the meeting cannot compute it).
    """
    return _hkdf(secret + material, b"next")


def fingerprint(secret: bytes) -> str:
    """16 hex digits naming ``secret`` (equal on both sides exactly when the secrets are)."""
    return _hkdf(secret, b"fingerprint", 8).hex()


def _mailbox_id(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").lower().rstrip("=")


def lobby_mailbox(secret: bytes) -> str:
    """The id of the generation's lobby mailbox (13 base32 characters, as the server's)."""
    return _mailbox_id(_hkdf(secret, b"lobby-mailbox", 8))


def lobby_side(secret: bytes, side_id: bytes) -> str:
    """The mailbox-server ``side`` of one pairing side in the generation's lobby: the same at
    every restart, so a restarted process re-opens the lobby as the same side (the server
    refuses a third side)."""
    return _hkdf(secret + side_id, b"lobby-side", 5).hex()


def hello_key(secret: bytes) -> bytes:
    """The key sealing the hellos of the generation's lobby."""
    return _hkdf(secret, b"hello-key")


def _meeting_input(secret: bytes, nonces: tuple[str, str]) -> bytes:
    low, high = nonces
    return secret + low.encode("ascii") + b"/" + high.encode("ascii")


def meeting_mailbox(secret: bytes, nonces: tuple[str, str]) -> str:
    """The id of one meeting's mailbox.

    :param nonces: the two sides' incarnation nonces, the lower pairing id's first.
    """
    return _mailbox_id(_hkdf(_meeting_input(secret, nonces), b"meeting-mailbox", 8))


def meeting_password(secret: bytes, nonces: tuple[str, str]) -> str:
    """One meeting's PAKE password: 64 hex digits (256 bits)."""
    return _hkdf(_meeting_input(secret, nonces), b"meeting-password").hex()


def file_key(secret: bytes) -> bytes:
    """The key of the integrity tag of a pairing file whose current secret is ``secret``."""
    return _hkdf(secret, b"file-tag")
