"""L1 vocabulary: the DILATE-n mailbox messages, parsed and built without I/O.

Each DILATE-n phase carries one JSON object with a ``type``: stock's ``please``,
``connection-hints``, ``reconnect`` and ``reconnecting``, and txdilation's ``closing`` and
``link-lost``, sent only to a peer whose ``please`` listed them in ``extensions``.
:class:`Outbox` numbers and sends ours (``dilate-0``, ``dilate-1``, ... without gaps, one
counter for every type); :func:`dispatch` hands each received one to its
:class:`MessageHandlers` method through one table.

Invariants: :func:`parse_dilation_message` returns a message class or raises
:class:`MalformedDilationMessage` with a short reason, nothing else, keeping no more of a
hostile message than a bounded excerpt; bad hints (:func:`txdilation.selection.hints.parse_hints`)
are reported in ``problems`` and dropped, the others kept; ``parse(build(x)) == x``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from twisted.logger import Logger
from wormhole._interfaces import ISend
from wormhole._status import DilationHint

from txdilation.errors import ProtocolViolation
from txdilation.selection.hints import parse_hints

__all__ = [
    "CLOSING",
    "EXTENSIONS",
    "LINK_LOST",
    "PATH_UPGRADE",
    "SIDE_PREFIX",
    "STANDBY",
    "Closing",
    "ConnectionHints",
    "DilationMessage",
    "LinkLost",
    "MalformedDilationMessage",
    "MessageHandlers",
    "Outbox",
    "Please",
    "Reconnect",
    "Reconnecting",
    "build_please",
    "choose_version",
    "dispatch",
    "hint_type_counts",
    "make_side",
    "parse_dilation_message",
]

_log = Logger()

#: Extension names listed in our ``please``.
CLOSING: Final = "closing-v1"
LINK_LOST: Final = "link-lost-v1"
#: a relayed link moves to a direct connection of the same generation once one works: the
#: generation's connectors keep listening and dialing direct hints after selecting a relay,
#: and the Leader's KCM on a later connection moves the link there (docs/connectivity.md)
PATH_UPGRADE: Final = "path-upgrade-v1"
#: beside a direct link each side keeps a relayed connection warm and moves the link there
#: at once when the direct path dies (``mailbox.standby``, docs/reliability.md)
STANDBY: Final = "standby-v1"
EXTENSIONS: Final = (CLOSING, LINK_LOST, PATH_UPGRADE, STANDBY)


class MalformedDilationMessage(ValueError, ProtocolViolation):
    """A DILATE-n body that is not a message we can act on (the reason says why)."""


@dataclass(frozen=True, slots=True)
class Please:
    """The peer wants to dilate. ``use_version`` is None when absent or not a string."""

    side: str
    use_version: str | None
    extensions: frozenset[str]


@dataclass(frozen=True, slots=True)
class ConnectionHints:
    """The peer's hints; ``problems`` names the hints that were dropped, ``type_counts`` counts
    the hints it sent per ``type`` (``other`` for a hint without a string type)."""

    hints: list[DilationHint]
    problems: list[str] = field(default_factory=list)
    type_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reconnect:
    """The Leader asks the Follower for a new generation."""


@dataclass(frozen=True, slots=True)
class Reconnecting:
    """The Follower is ready for a new generation."""


@dataclass(frozen=True, slots=True)
class Closing:
    """The peer's application is closing its wormhole (txdilation extension ``closing-v1``)."""


@dataclass(frozen=True, slots=True)
class LinkLost:
    """The Follower lost the connection of ``generation`` (extension ``link-lost-v1``)."""

    generation: int


DilationMessage = Please | ConnectionHints | Reconnect | Reconnecting | Closing | LinkLost


#: The first hex digits of every side we make. The higher side leads (a string comparison),
#: so we lead a stock peer (whose side is 16 random hex digits) unless its side starts with
#: these too (1 in 65,536), and then half the time: in 99.999% of mixed pairs. Between two
#: txdilation peers the 12 random digits that follow decide, a fair coin as before.
SIDE_PREFIX: Final = "ffff"


def make_side() -> str:
    """A fresh dilation side: 16 lowercase hex digits (independent of the mailbox side), the
    first ones :data:`SIDE_PREFIX` so that we lead a stock peer (docs/reliability.md, "Mixed
    pairs"), the rest random."""
    random_digits = 16 - len(SIDE_PREFIX)
    return SIDE_PREFIX + os.urandom(random_digits // 2).hex()


def choose_version(mine: Iterable[str], theirs: object) -> str | None:
    """The shared version ranked highest in *my* list, or None (also when ``theirs`` is not a
    list; non-string entries are ignored)."""
    if not isinstance(theirs, list):
        return None
    offered = {v for v in theirs if isinstance(v, str)}
    return next((v for v in mine if v in offered), None)


def hint_type_counts(hints: object) -> dict[str, int]:
    """How many hints of each ``type`` a ``connection-hints`` list holds (for telemetry)."""
    counts: dict[str, int] = {}
    for hint in hints if isinstance(hints, list) else []:
        kind = hint.get("type") if isinstance(hint, dict) else None
        key = kind if isinstance(kind, str) else "other"
        counts[key] = counts.get(key, 0) + 1
    return counts


def build_please(side: str, version: str | None) -> dict[str, Any]:
    """Our ``please``: our side, the version we chose and the extensions we speak."""
    return {"type": "please", "side": side, "extensions": list(EXTENSIONS), "use-version": version}


def parse_dilation_message(plaintext: bytes) -> DilationMessage:
    """Parse one DILATE-n body.

    :param plaintext: the decrypted phase body.
    :returns: the message.
    :raises MalformedDilationMessage: not UTF-8 JSON, not an object, an unknown ``type``, a
        ``please`` without a non-empty string ``side``, or a ``link-lost`` whose ``generation``
        is not a non-negative integer.
    """
    try:
        message = json.loads(plaintext.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise MalformedDilationMessage(f"not UTF-8 JSON: {e}") from None
    if not isinstance(message, dict):
        raise MalformedDilationMessage("not a JSON object")
    kind = message.get("type")
    if kind == "please":
        return _please(message)
    if kind == "connection-hints":
        raw = message.get("hints")
        hints, problems = parse_hints(raw)
        return ConnectionHints(hints, problems, hint_type_counts(raw))
    if kind == "reconnect":
        return Reconnect()
    if kind == "reconnecting":
        return Reconnecting()
    if kind == "closing":
        return Closing()
    if kind == "link-lost":
        generation = message.get("generation")
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise MalformedDilationMessage(f"link-lost generation {generation!r:.20}")
        return LinkLost(generation)
    raise MalformedDilationMessage(f"unknown type {kind!r:.60}")


def _please(message: dict[str, Any]) -> Please:
    side = message.get("side")
    if not isinstance(side, str) or not side:
        raise MalformedDilationMessage("'please' without a side")
    version = message.get("use-version")
    extensions = message.get("extensions")
    return Please(
        side,
        version if isinstance(version, str) else None,
        frozenset(e for e in extensions if isinstance(e, str))
        if isinstance(extensions, list)
        else frozenset(),
    )


class Outbox:
    """Sends our DILATE-n messages through the wormhole: ``dilate-0``, ``dilate-1``, ... in
    call order, one counter for every message type (as the peer requires: it delivers them in
    order and stalls on a gap).

    :param sender: stock's ``ISend`` (the Boss's ``S``); it may deliver synchronously.
    """

    def __init__(self, sender: ISend) -> None:
        self._sender = sender
        self.sent = 0

    def send(self, **fields: Any) -> None:
        """Send one message (its JSON object). A send refused because the wormhole is closing
        is logged, not raised: the message cannot matter any more then."""
        phase = f"dilate-{self.sent}"
        self.sent += 1
        try:
            self._sender.send(phase, json.dumps(fields).encode("utf-8"))
        except Exception:
            _log.failure("could not send {phase} (wormhole closing?)", phase=phase)


class MessageHandlers(Protocol):
    """What handles each received DILATE-n message type (``mailbox.peer_messages``)."""

    def please(self, message: Please) -> None: ...

    def hints(self, message: ConnectionHints) -> None: ...

    def reconnect(self) -> None: ...

    def reconnecting(self) -> None: ...

    def closing(self) -> None: ...

    def peer_lost_link(self, generation: int) -> None: ...


_DISPATCH: dict[type, Callable[[MessageHandlers, Any], None]] = {
    Please: lambda h, m: h.please(m),
    ConnectionHints: lambda h, m: h.hints(m),
    Reconnect: lambda h, m: h.reconnect(),
    Reconnecting: lambda h, m: h.reconnecting(),
    Closing: lambda h, m: h.closing(),
    LinkLost: lambda h, m: h.peer_lost_link(m.generation),
}


def dispatch(plaintext: bytes, handlers: MessageHandlers) -> bool:
    """Parse one DILATE-n body and hand it to ``handlers`` (one table from type to method).

    :returns: False when the body was malformed (logged and ignored, as stock ignores unknown
        types), True when it was handled.
    """
    try:
        message = parse_dilation_message(plaintext)
    except MalformedDilationMessage as e:
        _log.warn("ignoring dilation message: {why}", why=str(e))
        return False
    _DISPATCH[type(message)](handlers, message)
    return True
