"""Lobby messages: what paired processes post in their rendezvous mailboxes (no I/O).

Layer: pairing core (pure codec). Three kinds (``hello``, an ``offer``: the initiator's Noise
message 1, an ``answer``: the responder's message 2), each naming its sender, its incarnation
(``counter``), its number (``seq``) and the process's ``nonce``; each sealed with
ChaCha20-Poly1305 under the generation's :func:`~txdilation.pairing.derive.lobby_key`, padded
to :data:`SEALED_SIZE`, and posted hex-encoded. The fields: docs/module-notes.md.

Invariants: :func:`unseal` checks the body's length before decoding anything and accepts only
what :func:`seal` made with the same key (a replay from another generation's lobby included is
:class:`BadHello`); counters and numbers are bounded (:data:`MAX_NUMBER`); a sealed message's
size says nothing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from txdilation.errors import ProtocolViolation
from txdilation.pairing.derive import ID_LENGTH

__all__ = [
    "BODY_LENGTH",
    "KINDS",
    "MAX_NUMBER",
    "PHASE",
    "SEALED_SIZE",
    "BadHello",
    "Hello",
    "is_nonce",
    "new_nonce",
    "seal",
    "unseal",
]

PHASE: Final = "pairing"
"""The mailbox phase of every lobby message."""

KINDS: Final = ("hello", "offer", "answer")

_PLAIN_SIZE: Final = 512
SEALED_SIZE: Final = 12 + _PLAIN_SIZE + 16
"""Bytes of every sealed lobby message (AEAD nonce, padded plaintext, tag)."""

BODY_LENGTH: Final = 2 * SEALED_SIZE
"""Characters of every lobby message body (hex)."""

MAX_NUMBER: Final = 10**15
"""Counters, sequence and offer numbers above this are refused (bounded, and they fit)."""

_AAD: Final = b"txdilation-pairing/v2/lobby"
_MAX_HOLDS: Final = 4
_MAX_NOISE: Final = 160
_HEX16: Final = re.compile(r"[0-9a-f]{16}")


def is_nonce(text: object) -> bool:
    """Whether ``text`` has the form of a nonce or a fingerprint: 16 lowercase hex digits."""
    return isinstance(text, str) and _HEX16.fullmatch(text) is not None


class BadHello(ValueError, ProtocolViolation):
    """A lobby message that is not one sealed with this lobby's key."""


@dataclass(frozen=True, slots=True)
class Hello:
    """One lobby message (see the module docstring; ``to``, ``generation``, ``offer`` and
    ``noise`` are for offers and answers)."""

    sender: bytes
    counter: int
    seq: int
    nonce: str
    holds: tuple[str, ...] = ()
    kind: str = "hello"
    to: str = ""
    generation: str = ""
    offer: int = 0
    noise: bytes = b""

    @property
    def order(self) -> tuple[int, int]:
        """Later messages of one sender compare greater."""
        return (self.counter, self.seq)


def new_nonce() -> str:
    """A fresh incarnation nonce: 16 hex digits."""
    return os.urandom(8).hex()


def seal(hello: Hello, key: bytes) -> str:
    """The hex body to post.

    :raises ValueError: when the message does not fit.
    """
    fields: dict[str, Any] = {
        "k": hello.kind,
        "from": hello.sender.hex(),
        "counter": hello.counter,
        "seq": hello.seq,
        "nonce": hello.nonce,
    }
    if hello.kind == "hello":
        fields["holds"] = list(hello.holds)
    else:
        fields.update(to=hello.to, gen=hello.generation, offer=hello.offer, noise=hello.noise.hex())
    plain = json.dumps(fields, separators=(",", ":")).encode("ascii")
    if len(plain) > _PLAIN_SIZE or len(hello.holds) > _MAX_HOLDS:
        raise ValueError("lobby message too large")
    padded = plain + b" " * (_PLAIN_SIZE - len(plain))
    nonce = os.urandom(12)
    return (nonce + ChaCha20Poly1305(key).encrypt(nonce, padded, _AAD)).hex()


def _number(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_NUMBER:
        raise ValueError("number")
    return value


def unseal(body: object, key: bytes) -> Hello:
    """Open a lobby message sealed with ``key``.

    :raises BadHello: for anything that is not one (its length is checked first).
    """
    if not isinstance(body, str) or len(body) != BODY_LENGTH:
        raise BadHello("wrong size")
    try:
        raw = bytes.fromhex(body)
        plain = ChaCha20Poly1305(key).decrypt(raw[:12], raw[12:], _AAD)
    except (ValueError, InvalidTag):
        raise BadHello("not sealed with this lobby's key") from None
    try:
        fields = json.loads(plain.decode("ascii"))
        kind = fields["k"]
        sender = bytes.fromhex(fields["from"])
        hello = Hello(
            sender=sender,
            counter=_number(fields["counter"]),
            seq=_number(fields["seq"]),
            nonce=fields["nonce"],
            holds=tuple(fields.get("holds", ())),
            kind=kind,
            to=fields.get("to", ""),
            generation=fields.get("gen", ""),
            offer=_number(fields.get("offer", 0)),
            noise=bytes.fromhex(fields.get("noise", "")),
        )
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise BadHello("malformed") from None
    directed = kind in ("offer", "answer")
    if (
        kind not in KINDS
        or len(sender) != ID_LENGTH
        or not is_nonce(hello.nonce)
        or len(hello.holds) > _MAX_HOLDS
        or not all(is_nonce(fp) for fp in hello.holds)
        or directed != (is_nonce(hello.to) and is_nonce(hello.generation))
        or directed != (0 < len(hello.noise) <= _MAX_NOISE)
    ):
        raise BadHello("malformed")
    return hello
