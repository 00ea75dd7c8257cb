"""What a paired wormhole is given: its file, its mailbox, the code for the first time, and the
dilation settings every meeting uses.

Layer: pairing configuration (pure values).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["PairingOptions", "default_name"]


def default_name() -> str:
    """This side's name for the peer when none is given: the host name (printable, at most 64
    characters)."""
    name = "".join(c for c in socket.gethostname() if c.isprintable())[:64]
    return name or "peer"


@dataclass(frozen=True, slots=True)
class PairingOptions:
    """The settings of a :class:`~txdilation.pairing.paired_wormhole.PairedWormhole`.

    :ivar path: the pairing file.
    :ivar appid: the app id of the code meeting (later meetings use the file's).
    :ivar mailbox: the mailbox server of the code meeting (later meetings use the file's).
    :ivar code: the wormhole code of the code meeting; None with ``allocate_code`` (ignored
        when the file exists).
    :ivar allocate_code: allocate the code meeting's code.
    :ivar relay: transit relays; empty: the file's (those of the code meeting).
    :ivar name: this side's name for the peer (default: the host name).
    :ivar semantics: the application semantics of every meeting's subchannels.
    :ivar settings: the library's settings (``txdilation.settings.Settings``) or None.
    :ivar pair_again: pair from ``code`` even though this side already paired from it.
    :ivar fault: a test aid: one of ``keeper.FAULTS``, where the process kills itself.
    """

    path: str
    appid: str
    mailbox: str
    code: str | None = None
    allocate_code: bool = False
    relay: tuple[str, ...] = ()
    no_listen: bool = False
    ping_interval: float | None = None
    expected_subprotocols: tuple[str, ...] | None = None
    name: str | None = None
    semantics: str = "twisted"
    settings: Any = None
    pair_again: bool = False
    fault: str | None = None
