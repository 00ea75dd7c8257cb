"""Where a meeting happens: a Noise KKpsk2 handshake between the two static identities.

Layer: pairing core (noiseprotocol and HMAC; no I/O). ``Noise_KKpsk2_25519_ChaChaPoly_BLAKE2s``
with both static keys, fresh ephemerals and the generation's
:func:`~txdilation.pairing.derive.psk`; its two messages travel in the lobby (:mod:`.hello`),
its prologue binds the generation, both ids, both nonces and the offer's number. Each message
carries its sender's receipt proofs (HMAC-SHA256(receipt, prologue)); message 2 a fresh meeting
key from which, with the handshake hash, the meeting's :class:`Place` comes. In full:
docs/module-notes.md.

Invariants: each side accepts only a peer proving one of its
:func:`~txdilation.pairing.ratchet.acceptable_receipts`; a stolen file lets its holder answer
or offer as its owner only (KK: it cannot compute the other side's static DH);
:class:`HandshakeFailed` is the only error raised.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidTag
from noise import exceptions as noise_exceptions
from noise.connection import Keypair, NoiseConnection

from txdilation.errors import PairingFailure
from txdilation.pairing.derive import meeting_mailbox, meeting_password

__all__ = ["PROTOCOL", "HandshakeFailed", "Initiator", "Place", "prologue", "respond"]

PROTOCOL: Final = b"Noise_KKpsk2_25519_ChaChaPoly_BLAKE2s"
_PROOFS: Final = 2
_PROOF: Final = 32
_KEY: Final = 32
_ERRORS: Final = (
    InvalidTag,
    ValueError,
    noise_exceptions.NoiseHandshakeError,
    noise_exceptions.NoiseInvalidMessage,
    noise_exceptions.NoiseValueError,
    noise_exceptions.NoisePSKError,
    noise_exceptions.NoiseValidationError,
)


class HandshakeFailed(PairingFailure):
    """The handshake message does not authenticate, or proves no acceptable receipt."""


@dataclass(frozen=True, slots=True)
class Place:
    """A meeting's mailbox and PAKE password."""

    mailbox: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Place({self.mailbox})"


def prologue(
    generation: str, ids: tuple[bytes, bytes], nonces: tuple[str, str], offer: int
) -> bytes:
    """The handshake's prologue: ``ids`` and ``nonces`` are (initiator's, responder's)."""
    parts = [generation, ids[0].hex(), ids[1].hex(), nonces[0], nonces[1], str(offer)]
    return b"txdilation-pairing/v2/meeting\0" + "\0".join(parts).encode("ascii")


def _proofs(receipts: Sequence[bytes], bound: bytes) -> bytes:
    macs = [hmac.new(r, bound, hashlib.sha256).digest() for r in receipts[:_PROOFS]]
    macs += [os.urandom(_PROOF) for _ in range(_PROOFS - len(macs))]
    return b"".join(macs)


def _proven(acceptable: Sequence[bytes], bound: bytes, proofs: bytes) -> bool:
    given = [proofs[i : i + _PROOF] for i in range(0, _PROOFS * _PROOF, _PROOF)]
    expected = [hmac.new(r, bound, hashlib.sha256).digest() for r in acceptable]
    return any(hmac.compare_digest(g, e) for g in given for e in expected)


def _connection(
    private: bytes, peer: bytes, psk: bytes, bound: bytes, initiator: bool
) -> NoiseConnection:
    noise = NoiseConnection.from_name(PROTOCOL)
    noise.set_psks(psk)
    noise.set_prologue(bound)
    noise.set_keypair_from_private_bytes(Keypair.STATIC, private)
    noise.set_keypair_from_public_bytes(Keypair.REMOTE_STATIC, peer)
    if initiator:
        noise.set_as_initiator()
    else:
        noise.set_as_responder()
    noise.start_handshake()
    return noise


def _place(key: bytes, noise: NoiseConnection) -> Place:
    digest = bytes(noise.get_handshake_hash())
    return Place(meeting_mailbox(key, digest), meeting_password(key, digest))


class Initiator:
    """One offer: message 1 made at once; :meth:`finish` reads one answer (once).

    :param private: this side's static private key; ``peer``: the peer's public key.
    :param psk: the generation's pre-shared key; ``bound``: the :func:`prologue`.
    :param receipts: this side's receipts (proved in message 1).
    """

    def __init__(
        self, private: bytes, peer: bytes, psk: bytes, bound: bytes, receipts: Sequence[bytes]
    ) -> None:
        self._bound = bound
        self._noise: NoiseConnection | None = _connection(private, peer, psk, bound, True)
        self.message = bytes(self._noise.write_message(_proofs(receipts, bound)))

    def finish(self, message: bytes, acceptable: Sequence[bytes]) -> Place:
        """The meeting's place, from the responder's message 2.

        :raises HandshakeFailed: it does not authenticate, proves no acceptable receipt, or
            this offer was answered already.
        """
        noise, self._noise = self._noise, None
        if noise is None:
            raise HandshakeFailed("this offer was answered already")
        try:
            payload = bytes(noise.read_message(message))
        except _ERRORS:
            raise HandshakeFailed("the answer does not authenticate") from None
        if len(payload) != _KEY + _PROOFS * _PROOF:
            raise HandshakeFailed("the answer is malformed")
        if not _proven(acceptable, self._bound, payload[_KEY:]):
            raise HandshakeFailed("the answer proves no receipt of the last meeting")
        return _place(payload[:_KEY], noise)


def respond(
    private: bytes,
    peer: bytes,
    psk: bytes,
    bound: bytes,
    message: bytes,
    receipts: Sequence[bytes],
    acceptable: Sequence[bytes],
) -> tuple[bytes, Place]:
    """Answer an offer: message 2 and the meeting's place.

    :raises HandshakeFailed: the offer does not authenticate or proves no acceptable receipt.
    """
    try:
        noise = _connection(private, peer, psk, bound, False)
        payload = bytes(noise.read_message(message))
    except _ERRORS:
        raise HandshakeFailed("the offer does not authenticate") from None
    if len(payload) != _PROOFS * _PROOF:
        raise HandshakeFailed("the offer is malformed")
    if not _proven(acceptable, bound, payload):
        raise HandshakeFailed("the offer proves no receipt of the last meeting")
    key = os.urandom(_KEY)
    try:
        reply = bytes(noise.write_message(key + _proofs(receipts, bound)))
    except _ERRORS:  # pragma: no cover (a handshake that read message 1 writes message 2)
        raise HandshakeFailed("cannot answer the offer") from None
    return reply, _place(key, noise)
