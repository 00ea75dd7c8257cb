"""Pairing records: what one side keeps of a pairing, and its file format (no I/O).

Layer: pairing core (pure: values in, bytes out and back). A :class:`PairingRecord` holds both
sides' identities, this side's static X25519 key and the peer's public key, where the pairing
meets, the current generation's secret (and the ``pending`` next one), the last two receipts
(:mod:`.ratchet`), the incarnation counter and two timestamps; never the code or a session
key. The file is one JSON object (docs/pairing.md) whose ``tag`` is an HMAC over the rest,
keyed from the current secret (:func:`txdilation.pairing.derive.file_key`): it detects
corruption and edits, not a forger (file permissions: :mod:`.store`); version 1 files are
refused (pair again).

Invariants: ``decode(encode(r)) == r``; :func:`decode` raises only
:class:`~txdilation.pairing.pairing_errors.PairingFileError` subclasses, each with a one-line
message; a pending generation is the current one plus one; at most two receipts, newest first.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from txdilation.pairing.derive import ID_LENGTH, SECRET_LENGTH, file_key, fingerprint
from txdilation.pairing.pairing_errors import (
    CorruptPairingFile,
    NotAPairingFile,
    UnsupportedPairingVersion,
)

__all__ = [
    "FORMAT",
    "KEY_LENGTH",
    "MAX_RECEIPTS",
    "VERSION",
    "Generation",
    "Identity",
    "PairingRecord",
    "decode",
    "encode",
]

FORMAT: Final = "txdilation-pairing"
VERSION: Final = 2
KEY_LENGTH: Final = 32
MAX_RECEIPTS: Final = 2
_MAX_NAME: Final = 200


@dataclass(frozen=True, slots=True)
class Identity:
    """One side of a pairing: a random id (made once, when it paired) and a name for people."""

    id: bytes
    name: str

    def short(self) -> str:
        """``name (id prefix)``, for status lines."""
        return f"{self.name} ({self.id.hex()[:8]})"


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation of the pairing's secret."""

    number: int
    secret: bytes

    def __repr__(self) -> str:  # never print a secret
        return f"Generation({self.number}, {fingerprint(self.secret)})"

    @property
    def fingerprint(self) -> str:
        """The secret's :func:`~txdilation.pairing.derive.fingerprint`."""
        return fingerprint(self.secret)


@dataclass(frozen=True, slots=True)
class PairingRecord:
    """What one side keeps of a pairing (see the module docstring).

    :ivar key: this side's static X25519 private key (32 raw bytes).
    :ivar peer_key: the peer's static X25519 public key.
    :ivar receipts: the receipts of the last meetings this side met in, newest first (at most
        :data:`MAX_RECEIPTS`; :mod:`.ratchet`).
    :ivar confirmed: the peer said it holds the newest receipt (it stored the pairing after the
        code meeting, or met in the last meeting).
    :ivar counter: incarnations so far (the last start's number).
    :ivar created: when the pairing was made (Unix time).
    :ivar met: the last successful meeting (Unix time), None before the first after pairing.
    """

    me: Identity
    peer: Identity
    mailbox: str
    appid: str
    relay: tuple[str, ...]
    current: Generation
    key: bytes = b""
    peer_key: bytes = b""
    pending: Generation | None = None
    receipts: tuple[bytes, ...] = ()
    confirmed: bool = False
    counter: int = 0
    created: float = 0.0
    met: float | None = None

    def __repr__(self) -> str:  # never print a secret
        return (
            f"PairingRecord({self.me.short()} with {self.peer.short()}, {self.current!r}, "
            f"pending={self.pending!r}, counter={self.counter})"
        )

    def held(self) -> tuple[Generation, ...]:
        """The generations this side can meet with, newest first."""
        return (self.pending, self.current) if self.pending is not None else (self.current,)

    def generation_with(self, fp: str) -> Generation | None:
        """The held generation whose secret has fingerprint ``fp``, if any."""
        return next((g for g in self.held() if g.fingerprint == fp), None)

    def with_(self, **changes: Any) -> PairingRecord:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)


def _identity(value: Identity) -> dict[str, str]:
    return {"id": value.id.hex(), "name": value.name}


def _generation(value: Generation | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"generation": value.number, "secret": value.secret.hex()}


def _body(record: PairingRecord) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "me": _identity(record.me),
        "peer": _identity(record.peer),
        "mailbox": record.mailbox,
        "appid": record.appid,
        "relay": list(record.relay),
        "key": record.key.hex(),
        "peer-key": record.peer_key.hex(),
        "current": _generation(record.current),
        "pending": _generation(record.pending),
        "receipts": [r.hex() for r in record.receipts],
        "confirmed": record.confirmed,
        "counter": record.counter,
        "created": record.created,
        "met": record.met,
    }


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _tag(secret: bytes, body: Mapping[str, Any]) -> str:
    return hmac.new(file_key(secret), _canonical(body), hashlib.sha256).hexdigest()


def encode(record: PairingRecord) -> bytes:
    """The file's bytes (indented JSON and a newline, ``tag`` last)."""
    body = _body(record)
    body["tag"] = _tag(record.current.secret, body)
    return (json.dumps(body, indent=2) + "\n").encode("utf-8")


def decode(data: bytes, where: str = "pairing file") -> PairingRecord:
    """Parse and check a pairing file's bytes.

    :param where: how messages name the file (e.g. ``pairing file /var/lib/x.pairing``).
    :raises NotAPairingFile: not a JSON object of format ``txdilation-pairing``.
    :raises UnsupportedPairingVersion: another ``version`` than :data:`VERSION`.
    :raises CorruptPairingFile: a missing or malformed field, or a tag that does not match.
    """
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        body = None
    if not isinstance(body, dict) or "format" not in body:
        if FORMAT.encode() in data:  # ours, but no longer JSON: truncated or overwritten
            raise CorruptPairingFile(f"{where} is corrupted (not valid JSON any more)")
        raise NotAPairingFile(f"{where} is not a txdilation pairing file")
    if body.get("format") != FORMAT:
        raise NotAPairingFile(f"{where} is not a txdilation pairing file")
    version = body.get("version")
    if version == 1:
        raise UnsupportedPairingVersion(
            f"{where} was written by an earlier txdilation (format 1, without identity keys) "
            "and cannot be used any more: forget it on both sides and pair again with a new code"
        )
    if version != VERSION:
        raise UnsupportedPairingVersion(
            f"{where} has format version {version!r}; this txdilation reads version {VERSION}"
        )
    try:
        record = _record(body)
        expected = _tag(record.current.secret, {k: v for k, v in body.items() if k != "tag"})
        given = body["tag"]
        if not isinstance(given, str) or not hmac.compare_digest(given, expected):
            raise ValueError("integrity tag")
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptPairingFile(
            f"{where} is corrupted or was edited ({_what(e)} does not check out)"
        ) from None
    return record


def _what(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"field {error.args[0]!r}"
    text = str(error).split(":")[0]
    return text if text else "a field"


def _record(body: Mapping[str, Any]) -> PairingRecord:
    current = _parse_generation(body["current"])
    if current is None:
        raise ValueError("current generation")
    pending = _parse_generation(body["pending"])
    if pending is not None and pending.number != current.number + 1:
        raise ValueError("pending generation")
    relay = body["relay"]
    if not isinstance(relay, list) or not all(isinstance(r, str) for r in relay):
        raise ValueError("relay")
    receipts = body["receipts"]
    if not isinstance(receipts, list) or len(receipts) > MAX_RECEIPTS:
        raise ValueError("receipts")
    record = PairingRecord(
        me=_parse_identity(body["me"]),
        peer=_parse_identity(body["peer"]),
        mailbox=_text(body["mailbox"], "mailbox"),
        appid=_text(body["appid"], "appid"),
        relay=tuple(relay),
        current=current,
        key=_hex(body["key"], KEY_LENGTH, "key"),
        peer_key=_hex(body["peer-key"], KEY_LENGTH, "peer-key"),
        pending=pending,
        receipts=tuple(_hex(r, SECRET_LENGTH, "receipts") for r in receipts),
        confirmed=_bool(body["confirmed"], "confirmed"),
        counter=_count(body["counter"], "counter"),
        created=_number(body["created"], "created"),
        met=None if body["met"] is None else _number(body["met"], "met"),
    )
    if record.me.id == record.peer.id:
        raise ValueError("peer id")
    return record


def _parse_identity(value: object) -> Identity:
    if not isinstance(value, dict):
        raise ValueError("identity")
    raw = bytes.fromhex(_text(value["id"], "id"))
    if len(raw) != ID_LENGTH:
        raise ValueError("id")
    name = _text(value["name"], "name")
    if len(name) > _MAX_NAME or not name.isprintable():
        raise ValueError("name")
    return Identity(raw, name)


def _hex(value: object, length: int, name: str) -> bytes:
    raw = bytes.fromhex(_text(value, name))
    if len(raw) != length:
        raise ValueError(name)
    return raw


def _parse_generation(value: object) -> Generation | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("generation")
    secret = bytes.fromhex(_text(value["secret"], "secret"))
    if len(secret) != SECRET_LENGTH:
        raise ValueError("secret")
    return Generation(_count(value["generation"], "generation"), secret)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(name)
    return value


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(name)
    return value


def _count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(name)
    return value


def _number(value: object, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(name)
    return float(value)
