"""L2: the Noise session of one connection (I/O-free).

``Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`` with the dilation key as the PSK, no prologue, empty
payloads; the Leader initiates (two 48-byte messages). A record plaintext over 65519 bytes is
cut into 65519-byte pieces, each its own transport message, concatenated into one frame
payload. noiseprotocol runs the handshake only; the transport is ``cryptography``'s
ChaCha20-Poly1305 with Noise's nonces, byte for byte what noiseprotocol would send.

Invariants: every failure raises :class:`~txdilation.wire.dilation_errors.NoiseError` (never the
library's exceptions), and the session is dead after one; the last nonce is never used; one AEAD
object per direction; :meth:`NoiseSession.decrypt_view` decrypts large payloads into one kept
buffer (valid until its next call; above :data:`SCRATCH_LIMIT` a buffer of their own). In full:
docs/module-notes.md.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import NoReturn, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from noise import exceptions as noise_exceptions
from noise.connection import NoiseConnection

from txdilation.wire.dilation_errors import NoiseError
from txdilation.wire.roles import Role

NOISE_PROTOCOL_NAME = b"Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s"
MAX_PLAINTEXT_PIECE = 65519
MAX_CIPHERTEXT_PIECE = 65535
HANDSHAKE_MESSAGE_SIZE = 48  # 32-byte ephemeral public key + 16-byte tag of the empty payload
DILATION_KEY_SIZE = 32
TAG_SIZE = 16  # Poly1305
#: plaintexts up to this size are decrypted into the buffer each session keeps and reuses
SCRATCH_LIMIT = 2**18
#: payloads up to this size are decrypted by ``decrypt`` (into a new ``bytes``): measured, below
#: ~32 KiB the views and slices ``decrypt_into`` needs cost more than the zero-filling it saves
VIEW_THRESHOLD = 2**15

#: Noise's ChaChaPoly nonce: 4 zero bytes, then the 64-bit counter, little-endian.
_NONCE = struct.Struct("<4xQ")
#: Noise never uses the nonce 2**64-1 (it is reserved; noiseprotocol refuses it too).
_NONCE_LIMIT = 2**64 - 1

# What noiseprotocol (and cryptography beneath it) raise on bad input or misuse.
_LIBRARY_FAILURES = (
    InvalidTag,
    ValueError,  # e.g. a low-order X25519 point from the peer
    noise_exceptions.NoiseHandshakeError,
    noise_exceptions.NoiseInvalidMessage,
    noise_exceptions.NoiseMaxNonceError,
    noise_exceptions.NoisePSKError,
    noise_exceptions.NoiseValidationError,
    noise_exceptions.NoiseValueError,
)

_T = TypeVar("_T")


class _Phase(enum.Enum):
    FRESH = enum.auto()  # nothing sent or received
    AWAITING_REPLY = enum.auto()  # Leader: message 1 sent
    COMPLETE = enum.auto()
    FAILED = enum.auto()


class NoiseSession:
    """The Noise handshake and transport encryption of one L2 connection."""

    def __init__(self, role: Role, dilation_key: bytes) -> None:
        """
        :param role: the Leader is the Noise initiator, the Follower the responder.
        :param dilation_key: the 32-byte PSK (see :func:`txdilation.wire.keys.derive_dilation_key`).
        :raises ValueError: when ``dilation_key`` is not 32 bytes.
        """
        if len(dilation_key) != DILATION_KEY_SIZE:
            raise ValueError(f"dilation key must be 32 bytes, got {len(dilation_key)}")
        self._role = role
        self._phase = _Phase.FRESH
        self._failure = ""
        self._noise = NoiseConnection.from_name(NOISE_PROTOCOL_NAME)
        self._noise.set_psks(bytes(dilation_key))
        if role is Role.LEADER:
            self._noise.set_as_initiator()
        else:
            self._noise.set_as_responder()
        self._noise.start_handshake()
        self._encryptor: ChaCha20Poly1305 | None = None
        self._decryptor: ChaCha20Poly1305 | None = None
        self._send_nonce = self._recv_nonce = 0
        self._scratch = memoryview(bytearray())  # decrypt_view's reused output buffer

    @property
    def handshake_complete(self) -> bool:
        """True once both handshake messages have been exchanged successfully."""
        return self._phase is _Phase.COMPLETE

    def start(self) -> bytes | None:
        """Begin the handshake.

        :returns: the Leader's handshake message 1 (48 bytes) to frame and send; None for the
            Follower, which waits for message 1.
        :raises NoiseError: when called again on a Leader, or after a failure.
        """
        self._check_alive()
        if self._role is Role.FOLLOWER:
            return None
        if self._phase is not _Phase.FRESH:
            self._fail("start() called twice")
        message = self._guard("writing handshake message 1", self._noise.write_message)
        self._phase = _Phase.AWAITING_REPLY
        return bytes(message)

    def receive_handshake(self, message: bytes | memoryview) -> bytes | None:
        """Process the peer's handshake message, completing the handshake.

        :param message: the payload of the first frame after the peer's prologue.
        :returns: for the Follower, handshake message 2 (48 bytes) to frame and send; None for
            the Leader.
        :raises NoiseError: when the message is not 48 bytes or does not authenticate (e.g. the
            peer has another dilation key), when the Leader has not called :meth:`start`, when
            the handshake is already complete, or after a failure.
        """
        self._check_alive()
        expected = _Phase.AWAITING_REPLY if self._role is Role.LEADER else _Phase.FRESH
        if self._phase is not expected:
            self._fail(f"unexpected handshake message in phase {self._phase.name}")
        if len(message) != HANDSHAKE_MESSAGE_SIZE:
            self._fail(f"handshake message must be 48 bytes, got {len(message)}")
        payload = self._guard("reading handshake message", self._noise.read_message, bytes(message))
        if payload:
            self._fail("handshake message carries a payload")
        reply: bytes | None = None
        if self._role is Role.FOLLOWER:
            reply = bytes(self._guard("writing handshake message 2", self._noise.write_message))
        if not self._noise.handshake_finished:
            self._fail("handshake did not complete")
        self._take_transport_keys()
        self._phase = _Phase.COMPLETE
        return reply

    def encrypt(self, plaintext: bytes) -> bytes:
        """Encrypt one record plaintext into one frame payload.

        :returns: one transport message for up to 65519 bytes, else the concatenated ciphertexts
            of consecutive 65519-byte pieces.
        :raises NoiseError: before the handshake completes, or after a failure.
        """
        pieces = self.encrypt_pieces(plaintext)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def encrypt_pieces(self, head: bytes, body: bytes | memoryview = b"") -> list[bytes]:
        """Encrypt the record plaintext ``head + body`` into ciphertext pieces.

        The pieces, concatenated, are the frame payload :meth:`encrypt` returns; keeping them
        apart lets the caller hand them to ``writeSequence`` without joining them. Only the
        first piece's plaintext is assembled (``head`` and the start of ``body``); later pieces
        are encrypted straight from ``body``.

        :param head: the start of the plaintext (e.g. a record's tag and header fields).
        :param body: the rest (e.g. a DATA record's payload).
        :raises NoiseError: before the handshake completes, or after a failure.
        """
        aead = self._encryptor
        if aead is None:
            self._check_complete()
            raise AssertionError("unreachable")  # pragma: no cover
        n = self._send_nonce
        size = len(head) + len(body)
        if size <= MAX_PLAINTEXT_PIECE:
            if n >= _NONCE_LIMIT:
                self._fail("encrypting failed: nonces exhausted")
            self._send_nonce = n + 1
            return [aead.encrypt(_NONCE.pack(n), head + body if body else head, None)]
        first = MAX_PLAINTEXT_PIECE - len(head)
        if first < 0:  # a head longer than one piece: treat it all as body
            head, body, first = b"", head + body, MAX_PLAINTEXT_PIECE
        view = memoryview(body)
        count = 1 + -(-(len(view) - first) // MAX_PLAINTEXT_PIECE)
        if n + count > _NONCE_LIMIT:
            self._fail("encrypting failed: nonces exhausted")
        self._send_nonce = n + count
        pack = _NONCE.pack
        pieces = [aead.encrypt(pack(n), head + view[:first], None)]
        for start in range(first, len(view), MAX_PLAINTEXT_PIECE):
            n += 1
            pieces.append(aead.encrypt(pack(n), view[start : start + MAX_PLAINTEXT_PIECE], None))
        return pieces

    def decrypt(self, payload: bytes | memoryview) -> bytes:
        """Decrypt one frame payload into one record plaintext.

        :returns: the plaintext (pieces joined when the payload exceeds 65535 bytes).
        :raises NoiseError: when a piece does not authenticate, before the handshake completes,
            or after a failure.
        """
        pieces = self.decrypt_pieces(payload)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def decrypt_pieces(self, payload: bytes | memoryview) -> list[bytes]:
        """Decrypt one frame payload into the plaintexts of its pieces (not joined).

        :param payload: a frame payload (any bytes-like object; a ``memoryview`` is not
            copied).
        :raises NoiseError: when a piece does not authenticate, before the handshake completes,
            or after a failure.
        """
        aead = self._decryptor
        if aead is None:
            self._check_complete()
            raise AssertionError("unreachable")  # pragma: no cover
        n = self._recv_nonce
        size = len(payload)
        try:
            if size <= MAX_CIPHERTEXT_PIECE:
                if n >= _NONCE_LIMIT:
                    self._fail("decrypting failed: nonces exhausted")
                pieces = [aead.decrypt(_NONCE.pack(n), payload, None)]
                self._recv_nonce = n + 1
                return pieces
            view = payload if type(payload) is memoryview else memoryview(payload)
            if n + -(-size // MAX_CIPHERTEXT_PIECE) > _NONCE_LIMIT:
                self._fail("decrypting failed: nonces exhausted")
            pack = _NONCE.pack
            pieces = []
            for start in range(0, size, MAX_CIPHERTEXT_PIECE):
                pieces.append(
                    aead.decrypt(pack(n), view[start : start + MAX_CIPHERTEXT_PIECE], None)
                )
                n += 1
        except _LIBRARY_FAILURES as e:
            self._fail(f"decrypting failed: {type(e).__name__}: {e}")
        self._recv_nonce = n
        return pieces

    def decrypt_view(self, payload: bytes | memoryview) -> bytes | memoryview:
        """Decrypt one frame payload, a large one into a buffer of the session's.

        The same plaintext as :meth:`decrypt`; a payload of more than :data:`VIEW_THRESHOLD`
        bytes without an output object allocated (and zero-filled) per piece and without
        joining pieces: each piece is decrypted in place (``decrypt_into``) into one buffer the
        session reuses for every plaintext of up to :data:`SCRATCH_LIMIT` bytes.

        :param payload: a frame payload (any bytes-like object; a ``memoryview`` is not
            copied).
        :returns: the plaintext: ``bytes`` for a small payload, else a view valid only until
            the next call of this method (copy whatever must outlive it).
        :raises NoiseError: when a piece does not authenticate (or is shorter than its tag),
            before the handshake completes, or after a failure.
        """
        aead = self._decryptor
        if aead is None:
            self._check_complete()
            raise AssertionError("unreachable")  # pragma: no cover
        size = len(payload)
        if size <= VIEW_THRESHOLD:
            return self.decrypt_pieces(payload)[0]
        n = self._recv_nonce
        count = -(-size // MAX_CIPHERTEXT_PIECE)
        if size - (count - 1) * MAX_CIPHERTEXT_PIECE < TAG_SIZE:  # the last piece
            self._fail("decrypting failed: InvalidTag: a piece is shorter than its tag")
        if n + count > _NONCE_LIMIT:
            self._fail("decrypting failed: nonces exhausted")
        plain = size - TAG_SIZE * count
        out = self._scratch
        if plain > len(out):
            out = memoryview(bytearray(plain))
            if plain <= SCRATCH_LIMIT:
                self._scratch = out
        pack = _NONCE.pack
        try:
            if count == 1:
                aead.decrypt_into(pack(n), payload, None, out[:plain])
                n += 1
            else:
                view = payload if type(payload) is memoryview else memoryview(payload)
                at = 0
                for start in range(0, size, MAX_CIPHERTEXT_PIECE):
                    piece = view[start : start + MAX_CIPHERTEXT_PIECE]
                    end = at + len(piece) - TAG_SIZE
                    aead.decrypt_into(pack(n), piece, None, out[at:end])
                    at = end
                    n += 1
        except _LIBRARY_FAILURES as e:
            self._fail(f"decrypting failed: {type(e).__name__}: {e}")
        self._recv_nonce = n
        return out[:plain]

    def _take_transport_keys(self) -> None:
        """The handshake is complete: drive ChaCha20-Poly1305 with its keys and nonces."""
        protocol = self._noise.noise_protocol
        sending, receiving = protocol.cipher_state_encrypt, protocol.cipher_state_decrypt
        self._encryptor = ChaCha20Poly1305(bytes(sending.k))
        self._decryptor = ChaCha20Poly1305(bytes(receiving.k))
        self._send_nonce, self._recv_nonce = sending.n, receiving.n

    def _guard(self, doing: str, call: Callable[..., _T], *args: bytes) -> _T:
        """Run a noiseprotocol call, turning its failures into NoiseError (and death)."""
        try:
            return call(*args)
        except _LIBRARY_FAILURES as e:
            self._fail(f"{doing} failed: {type(e).__name__}: {e}")

    def _check_complete(self) -> None:
        self._check_alive()
        if self._phase is not _Phase.COMPLETE:
            self._fail("the Noise handshake is not complete")

    def _check_alive(self) -> None:
        if self._phase is _Phase.FAILED:
            raise NoiseError(f"Noise session already failed: {self._failure}")

    def _fail(self, message: str) -> NoReturn:
        self._encryptor = self._decryptor = None
        self._phase = _Phase.FAILED
        self._failure = message
        raise NoiseError(message)


__all__ = [
    "MAX_CIPHERTEXT_PIECE",
    "MAX_PLAINTEXT_PIECE",
    "NOISE_PROTOCOL_NAME",
    "SCRATCH_LIMIT",
    "TAG_SIZE",
    "VIEW_THRESHOLD",
    "NoiseSession",
]
