"""Human-readable fatal errors: what went wrong, in words, and what to do about it.

Layer: session presentation (pure: exceptions in, text out; no I/O). :func:`explain` turns the
exception that ended a session (a wrong code, an unreachable mailbox server, a port in use, ...)
into a :class:`Explanation`: a one-line ``message`` an operator understands without knowing
magic-wormhole's exception names, and an ``advice`` line saying what to check or do. The
``error`` status event carries both; the log line and ``txdilation run`` print both.

Invariants: every exception gets an explanation (unknown ones: ``TypeName: message``, with
generic advice); a message never ends with an empty ``": "`` (stock raises some errors with no
text); the exception classes are matched by name as well as by type, so an error that crossed
a ``DeferredList`` (``FirstError``) or a process boundary is still recognised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from twisted.python.failure import Failure

__all__ = ["Explanation", "explain", "unwrap"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """A fatal error in words.

    :ivar message: what happened (one line, no exception class names unless unknown).
    :ivar advice: what to do about it (one line), or ``""`` when there is nothing to add.
    """

    message: str
    advice: str


_ADVICE: Final[dict[str, tuple[str, str]]] = {
    # name: (message prefix, advice)
    "WrongPasswordError": (
        "wrong wormhole code: the two sides did not use the same code",
        "check the code on both sides (a code works only once: allocate a new one and start "
        "both sides again)",
    ),
    "LonelyError": (
        "the peer never came",
        "start the other side with the same code, mailbox and appid",
    ),
    "ServerConnectionError": (
        "cannot reach the mailbox server",
        "check --mailbox (ws://HOST:PORT/v1 or wss://...) and that the server is running and "
        "reachable from here",
    ),
    "WelcomeError": (
        "the mailbox server refused this client",
        "read the server's message above; it may want a newer client",
    ),
    "ServerError": (
        "the mailbox server reported an error",
        "if it says 'crowded', the code was already used by two other clients: allocate a new code",
    ),
    "KeyFormatError": (
        "the wormhole code is malformed",
        "a code looks like 7-guitarist-revenge: a number, a dash, then words",
    ),
    "OldPeerCannotDilateError": (
        "the peer cannot dilate",
        "the peer needs magic-wormhole 0.20 or later (or txdilation) with dilation=True",
    ),
    "CannotListenError": (
        "cannot listen on a --listen endpoint",
        "the port is probably in use: choose another one or stop what uses it",
    ),
    "PairingInUse": (
        "",
        "stop the other process that runs this pairing first (one process per pairing file); "
        "the pairing itself is fine: keep it",
    ),
    "PairingFileError": (
        "",
        "fix the file as the message says, or 'txdilation pairing forget PATH' on both sides and "
        "pair again with a new code",
    ),
    "PeerCannotPair": ("", "start the peer with --pairing too (it needs txdilation)"),
    "PairingError": ("", "see docs/pairing.md"),
    "StockMismatch": ("", "pairing needs magic-wormhole 0.24.x"),
    "WormholeClosedError": (
        "the wormhole closed",
        "see the messages before this one for the reason",
    ),
    "OSError": (
        "a file or socket could not be used",
        "check that the paths in the settings exist and are writable by this user (a --listen "
        "unix: socket's directory, --status, --events)",
    ),
}


def unwrap(failure: Failure | BaseException) -> BaseException:
    """The exception itself, through a ``DeferredList``'s ``FirstError`` (``subFailure``)."""
    value = failure.value if isinstance(failure, Failure) else failure
    inner = getattr(value, "subFailure", None)
    while isinstance(inner, Failure):
        value = inner.value
        inner = getattr(value, "subFailure", None)
    assert isinstance(value, BaseException)
    return value


def explain(error: Failure | BaseException, *, mailbox_setting: str = "--mailbox") -> Explanation:
    """Explain the exception (or ``Failure``) that ended a session (see the module docstring).

    :param mailbox_setting: how the advice names the mailbox setting (``mailbox=`` for an
        endpoint string).
    """
    exc = unwrap(error)
    name = type(exc).__name__
    text = str(exc).strip().removesuffix(".")  # (a sentence's stop before "; advice" reads badly)
    known = next((_ADVICE[n] for n in _names(type(exc)) if n in _ADVICE), None)
    if known is None:
        return Explanation(
            f"{name}: {text}" if text else name,
            "this is unexpected: please report it with the log (see docs/plugin.md)",
        )
    prefix, advice = known
    if name == "CannotListenError":
        interface = getattr(exc, "interface", "") or "*"
        port = getattr(exc, "port", "?")
        socket_error = getattr(exc, "socketError", None)
        detail = getattr(socket_error, "strerror", None) or str(socket_error or "")
        text = f"{interface}:{port}" + (f": {detail}" if detail else "")
    elif isinstance(exc, OSError) and exc.strerror:
        path = exc.filename2 or exc.filename  # (a link's path is the second)
        shown = os.fsdecode(path) if isinstance(path, str | bytes) else str(path)
        text = exc.strerror + (f": {shown}" if path else "")
    advice = advice.replace("--mailbox", mailbox_setting)
    if not prefix:  # the exception's own words are the message (pairing errors)
        return Explanation(text or name, advice)
    if text.startswith(prefix):  # explained before (an error given its words)
        return Explanation(text, advice)
    return Explanation(f"{prefix}: {text}" if text else prefix, advice)


def _names(cls: type) -> list[str]:
    return [c.__name__ for c in cls.__mro__]
