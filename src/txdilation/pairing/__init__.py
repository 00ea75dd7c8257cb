"""Pairing: two sides that met once with a wormhole code meet again without one, after any
restart of either (docs/pairing.md).

Layer: an application of the library (above ``txdilation.dilate``; the session, the endpoints
and the command build on it). One concern per module:

- :mod:`.derive`: every value both sides derive from their shared secret (pure);
- :mod:`.record` / :mod:`.store`: the pairing file's format, and reading it (checked) and
  writing it (atomically, durably, mode 0600);
- :mod:`.hello` / :mod:`.plan` / :mod:`.ratchet` / :mod:`.messages`: the I/O-free protocol:
  hellos posted in a lobby, where to meet, how the secret moves forward, the pairing's own
  wormhole messages;
- :mod:`.lobby` / :mod:`.meeting`: the mailbox-server glue: a lobby's WebSocket, one meeting's
  wormhole;
- :mod:`.conduct` / :mod:`.paired` / :mod:`.endpoints`: putting them together behind the
  :class:`~txdilation.pairing.paired.PairedWormhole` facade and its endpoints.

Only :mod:`.lobby`, :mod:`.meeting`, :mod:`.conduct` and :mod:`.paired` import ``wormhole`` or
autobahn (``txdilation.install()`` first; :class:`PairedWormhole` does it).
"""

from __future__ import annotations

from txdilation.pairing.errors import PairingError, PairingFileError, PeerRestarted
from txdilation.pairing.options import PairingOptions

__all__ = ["PairedWormhole", "PairingError", "PairingFileError", "PairingOptions", "PeerRestarted"]


def __getattr__(name: str) -> object:
    if name == "PairedWormhole":  # imports wormhole: only when asked for
        from txdilation.pairing.paired import PairedWormhole

        return PairedWormhole
    raise AttributeError(name)
