"""Static identity keys: each side's long-term X25519 key pair (cryptography; no I/O).

Layer: pairing core. A side makes its key pair at the code meeting; the public key travels to
the peer inside the code wormhole (authenticated by its SPAKE2 key) and every later meeting is a
Noise handshake authenticated by both static keys (:mod:`.handshake`). Keys are raw 32-byte
strings, as Noise and the pairing file hold them.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

__all__ = ["check_public", "key_fingerprint", "new_private", "public_of"]


def new_private() -> bytes:
    """A fresh X25519 private key (32 raw bytes)."""
    return X25519PrivateKey.generate().private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    )


def public_of(private: bytes) -> bytes:
    """The public key (32 raw bytes) of ``private``."""
    key = X25519PrivateKey.from_private_bytes(private).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def check_public(public: bytes) -> bytes:
    """``public`` if it is an X25519 public key, else :class:`ValueError`."""
    X25519PublicKey.from_public_bytes(public)
    return public


def key_fingerprint(public: bytes) -> str:
    """16 hex digits naming a public key for people (``pairing show``, logs)."""
    return hashlib.sha256(b"txdilation-pairing/v2/key\0" + public).hexdigest()[:16]
