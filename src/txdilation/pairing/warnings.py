"""What a paired process warns about, each once, with its real cause and what to do.

Layer: pairing presentation (text only; the conductor calls it). :class:`Warnings` says once per
process that a plaintext ``ws://`` mailbox shows its traffic to anyone on the path; each lobby
trouble (a rendezvous someone else opened or filled, the server unreachable or refusing); and
each impostor: a copy of this side's file, or a process claiming to be the peer (``warning``
events with ``cause``: ``plaintext``, ``rendezvous``, ``mailbox``, ``impostor``).

Invariant: an impostor (by nonce) and a plaintext mailbox are reported at most once.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from txdilation.pairing.lobby import LobbyTrouble

__all__ = ["Warnings", "on_path_visible"]


def on_path_visible(url: str) -> bool:
    """Whether a mailbox URL is plaintext (``ws://``) to a host that is not this one."""
    parts = urlparse(url)
    if parts.scheme != "ws":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


class Warnings:
    """See the module docstring.

    :param emit: ``emit(kind, **fields)``.
    :param peer: the peer's name, when asked.
    :param path: the pairing file, for the messages.
    """

    def __init__(self, emit: Callable[..., object], peer: Callable[[], str], path: str) -> None:
        self._emit = emit
        self._peer = peer
        self._path = path
        self._impostors: set[str] = set()
        self._plaintext = False
        self._unreachable = False

    def plaintext(self, url: str) -> None:
        """Once: what an on-path observer of a ``ws://`` mailbox learns."""
        if self._plaintext or not on_path_visible(url):
            return
        self._plaintext = True
        self._emit(
            "warning",
            cause="plaintext",
            message=f"the mailbox {url} is plaintext ws://: anyone on the path sees this "
            "pairing's rendezvous and meeting mailbox ids, its sides, and the size and time of "
            "every message (never their contents, a secret or a key), and can squat a "
            "rendezvous (the pairing moves on)",
            advice="use a wss:// mailbox (the default: wss://relay.magic-wormhole.io/v1)",
        )

    def lobby(self, trouble: LobbyTrouble, url: str) -> None:
        """A lobby's trouble (it carries on by itself)."""
        if trouble.cause == "squatted":
            self._emit(
                "warning",
                cause="rendezvous",
                message=f"pairing rendezvous: {trouble.text}",
                advice="someone else opened, closed or filled this pairing's rendezvous mailbox "
                "(the mailbox server's operator, or anyone who saw its traffic, can); moving to "
                "the next one, which they cannot tell; nothing of the pairing leaked",
            )
            return
        if self._unreachable:
            return
        self._unreachable = True
        self._emit(
            "warning",
            cause="mailbox",
            message=(
                f"pairing rendezvous: cannot reach the mailbox server {url}: {trouble.text}"
                if trouble.cause == "unreachable"
                else f"pairing rendezvous: the mailbox server {url}: {trouble.text}"
            ),
            advice="still trying; 'txdilation pairing show' names the mailbox server it uses",
        )

    def impostor(self, nonce: str, counter: int, mine: bool, why: str) -> bool:
        """Report an impostor once; True when it is news."""
        if nonce in self._impostors:
            return False
        self._impostors.add(nonce)
        peer = self._peer()
        fields: dict[str, Any] = {"cause": "impostor", "nonce": nonce}
        if mine:
            start = f"start {counter}, " if counter >= 0 else ""
            message = (
                f"another process is using this side of the pairing with {peer} ({start}{why}): "
                f"a copy of {self._path}"
            )
        else:
            message = f"a process claiming to be the paired peer {peer} is not it: {why}"
        self._emit(
            "warning",
            message=message,
            advice="if you did not start it, a pairing file was copied: this side and its peer "
            "step the pairing on, which leaves the copy behind; keep pairing files private",
            **fields,
        )
        return True
