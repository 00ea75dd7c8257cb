"""Shared: the key derivations of Dilation (no I/O).

Both derivations are RFC 5869 HKDF with SHA-256, no salt and a 32-byte output, exactly as stock
magic-wormhole's ``wormhole.util.derive_key``:

- the dilation key comes from the wormhole's SPAKE2 master key (``info=b"dilation-v1"``); the same
  key serves every connection of every generation (only the Noise ephemerals differ);
- the transit-relay token comes from the dilation key (``info=b"transit_relay_token"``).

Invariant: the functions are pure; the same input always gives the same 32 bytes.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

DILATION_KEY_INFO = b"dilation-v1"
RELAY_TOKEN_INFO = b"transit_relay_token"
KEY_LENGTH = 32


def _hkdf(key_material: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=SHA256(), length=KEY_LENGTH, salt=None, info=info).derive(key_material)


def derive_dilation_key(master_key: bytes) -> bytes:
    """Derive the Dilation key (the Noise PSK) from the wormhole's master key.

    :param master_key: the SPAKE2 session key the Boss hands to ``got_key``.
    :returns: 32 bytes.
    """
    return _hkdf(master_key, DILATION_KEY_INFO)


def derive_relay_token(dilation_key: bytes) -> bytes:
    """Derive the token sent to a transit relay in the ``please relay`` line.

    :param dilation_key: the key returned by :func:`derive_dilation_key`.
    :returns: 32 bytes (the relay line carries them hex-encoded).
    """
    return _hkdf(dilation_key, RELAY_TOKEN_INFO)


__all__ = ["derive_dilation_key", "derive_relay_token"]
