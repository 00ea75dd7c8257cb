"""Hellos: what a paired side posts in a lobby to say "this process is here" (no I/O).

Layer: pairing core (pure codec). A :class:`Hello` names its sender (pairing id), the sender's
incarnation (``counter``, one more at every start, kept in the pairing file), the hello's
number within that incarnation (``seq``), the nonce the sender meets with now, and the
fingerprints of the generations it holds. It is sealed with ChaCha20-Poly1305 under the lobby's
:func:`~txdilation.pairing.derive.hello_key`, padded to :data:`SEALED_SIZE` so its size says
nothing, and posted hex-encoded as a mailbox message body.

Invariants: :func:`unseal` accepts only what :func:`seal` made with the same key (anything else,
a replay from another generation's lobby included, is :class:`BadHello`); a sender's later
hello has a greater :attr:`Hello.order`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from txdilation.pairing.derive import ID_LENGTH

__all__ = [
    "PHASE",
    "SEALED_SIZE",
    "BadHello",
    "Hello",
    "is_nonce",
    "new_nonce",
    "seal",
    "unseal",
]

PHASE: Final = "hello"
"""The mailbox phase of every hello."""

_PLAIN_SIZE: Final = 240
SEALED_SIZE: Final = 12 + _PLAIN_SIZE + 16
"""Bytes of every sealed hello (AEAD nonce, padded plaintext, tag)."""

_AAD: Final = b"txdilation-pairing/v1/hello"
_MAX_HOLDS: Final = 4
_HEX16: Final = re.compile(r"[0-9a-f]{16}")


def is_nonce(text: object) -> bool:
    """Whether ``text`` has the form of a nonce or a fingerprint: 16 lowercase hex digits."""
    return isinstance(text, str) and _HEX16.fullmatch(text) is not None


class BadHello(ValueError):
    """A lobby message that is not a hello sealed with this lobby's key."""


@dataclass(frozen=True, slots=True)
class Hello:
    """One side's word in a lobby (see the module docstring)."""

    sender: bytes
    counter: int
    seq: int
    nonce: str
    holds: tuple[str, ...]

    @property
    def order(self) -> tuple[int, int]:
        """Later hellos of one sender compare greater."""
        return (self.counter, self.seq)


def new_nonce() -> str:
    """A fresh incarnation nonce: 16 hex digits."""
    return os.urandom(8).hex()


def seal(hello: Hello, key: bytes) -> str:
    """The hex body to post.

    :raises ValueError: when the hello does not fit (too many fingerprints).
    """
    plain = json.dumps(
        {
            "from": hello.sender.hex(),
            "counter": hello.counter,
            "seq": hello.seq,
            "nonce": hello.nonce,
            "holds": list(hello.holds),
        },
        separators=(",", ":"),
    ).encode("ascii")
    if len(plain) > _PLAIN_SIZE or len(hello.holds) > _MAX_HOLDS:
        raise ValueError("hello too large")
    padded = plain + b" " * (_PLAIN_SIZE - len(plain))
    nonce = os.urandom(12)
    return (nonce + ChaCha20Poly1305(key).encrypt(nonce, padded, _AAD)).hex()


def unseal(body: str, key: bytes) -> Hello:
    """Open a hello posted in the lobby sealed with ``key``.

    :raises BadHello: for anything that is not one.
    """
    try:
        raw = bytes.fromhex(body)
    except (TypeError, ValueError):
        raise BadHello("not hex") from None
    if len(raw) != SEALED_SIZE:
        raise BadHello("wrong size")
    try:
        plain = ChaCha20Poly1305(key).decrypt(raw[:12], raw[12:], _AAD)
        fields = json.loads(plain.decode("ascii"))
        sender = bytes.fromhex(fields["from"])
        hello = Hello(
            sender=sender,
            counter=fields["counter"],
            seq=fields["seq"],
            nonce=fields["nonce"],
            holds=tuple(fields["holds"]),
        )
    except (InvalidTag, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise BadHello("not sealed with this lobby's key") from None
    if (
        len(sender) != ID_LENGTH
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in hello.order)
        or not is_nonce(hello.nonce)
        or len(hello.holds) > _MAX_HOLDS
        or not all(is_nonce(fp) for fp in hello.holds)
    ):
        raise BadHello("malformed")
    return hello
