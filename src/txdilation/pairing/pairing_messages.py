"""The pairing's own wormhole messages, and how a side announces that it pairs (no I/O).

Layer: pairing core (pure codec). A side that pairs says so in its wormhole's app versions
(:data:`ANNOUNCEMENT`); that is all a peer that does not pair ever receives. Between two sides
that both announced it, the wormhole's application messages carry :class:`Introduce` (code
meetings: id, name, nonce, static public key), :class:`Met`, :class:`Stored` and
:class:`Check` / :class:`Here` (what each says: docs/module-notes.md).

Invariants: :func:`parse` raises :class:`BadPairingMessage` for anything else;
``parse(build(m)) == m``; the static key travels only inside the SPAKE2-authenticated wormhole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from txdilation.errors import ProtocolViolation
from txdilation.pairing.derive import ID_LENGTH
from txdilation.pairing.hello import is_nonce
from txdilation.pairing.identity_keys import check_public

__all__ = [
    "ANNOUNCEMENT",
    "KEY",
    "VERSION",
    "BadPairingMessage",
    "Check",
    "Here",
    "Introduce",
    "Met",
    "PairingMessage",
    "Stored",
    "announced",
    "build",
    "parse",
]

KEY: Final = "txdilation-pairing"
VERSION: Final = 2
ANNOUNCEMENT: Final[dict[str, Any]] = {KEY: {"v": VERSION}}
"""The app versions of a wormhole that pairs."""

_MAX_NAME: Final = 200


class BadPairingMessage(ValueError, ProtocolViolation):
    """An application message that is not a pairing message."""


@dataclass(frozen=True, slots=True)
class Introduce:
    """A side's pairing identity, the nonce of its code meeting and its static public key."""

    id: bytes
    name: str
    nonce: str
    key: bytes


@dataclass(frozen=True, slots=True)
class Met:
    """The sender keeps this meeting's receipt."""


@dataclass(frozen=True, slots=True)
class Check:
    """Is the process with ``nonce`` you?"""

    nonce: str


@dataclass(frozen=True, slots=True)
class Here:
    """I am alive in this meeting, and the process with ``nonce`` is not me."""

    nonce: str


@dataclass(frozen=True, slots=True)
class Stored:
    """A side stored ``generation`` (whose secret has ``fingerprint``)."""

    generation: int
    fingerprint: str


PairingMessage = Introduce | Met | Stored | Check | Here


def announced(app_versions: object) -> bool:
    """Whether the peer's app versions announce pairing (version 1)."""
    if not isinstance(app_versions, dict):
        return False
    entry = app_versions.get(KEY)
    return isinstance(entry, dict) and entry.get("v") == VERSION


def build(message: PairingMessage) -> bytes:
    """The message's bytes (for ``w.send_message``)."""
    if isinstance(message, Introduce):
        body: dict[str, Any] = {
            "pairing": "introduce",
            "id": message.id.hex(),
            "name": message.name,
            "nonce": message.nonce,
            "key": message.key.hex(),
        }
    elif isinstance(message, Met):
        body = {"pairing": "met"}
    elif isinstance(message, (Check, Here)):
        body = {"pairing": type(message).__name__.lower(), "nonce": message.nonce}
    else:
        body = {
            "pairing": "stored",
            "generation": message.generation,
            "fingerprint": message.fingerprint,
        }
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def parse(data: bytes) -> PairingMessage:
    """One received application message.

    :raises BadPairingMessage: for anything that is not a pairing message.
    """
    try:
        body = json.loads(data.decode("utf-8"))
        kind = body["pairing"]
        if kind == "introduce":
            raw = bytes.fromhex(body["id"])
            name, nonce = body["name"], body["nonce"]
            key = check_public(bytes.fromhex(body["key"]))
            if (
                len(raw) != ID_LENGTH
                or not isinstance(name, str)
                or not name.isprintable()
                or not 0 < len(name) <= _MAX_NAME
                or not is_nonce(nonce)
            ):
                raise ValueError(kind)
            return Introduce(raw, name, nonce, key)
        if kind == "met":
            return Met()
        if kind in ("check", "here") and is_nonce(body["nonce"]):
            return (Check if kind == "check" else Here)(body["nonce"])
        if kind == "stored":
            generation, fp = body["generation"], body["fingerprint"]
            if not isinstance(generation, int) or generation < 0 or not is_nonce(fp):
                raise ValueError(kind)
            return Stored(generation, fp)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        pass
    raise BadPairingMessage(f"not a pairing message: {data[:60]!r}")
