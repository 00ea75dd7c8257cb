"""Pairing: two sides that met once with a code meet again without one (docs/pairing.md).

Layer: an application of the library (above ``txdilation.dilate``; the session, the endpoints
and the command build on it). One concern per module: :mod:`.derive` (values derived from the
shared secret); :mod:`.record` / :mod:`.store` (the file's format; checked reads, atomic
writes, mode 0600); :mod:`.hello` / :mod:`.plan` / :mod:`.ratchet` / :mod:`.pairing_messages` (the
I/O-free protocol); :mod:`.lobby` / :mod:`.meeting` (the mailbox-server glue);
:mod:`.conduct` / :mod:`.paired_wormhole` / :mod:`.paired_endpoints` (the
:class:`~txdilation.pairing.paired_wormhole.PairedWormhole` facade and its endpoints).

Only :mod:`.lobby`, :mod:`.meeting`, :mod:`.conduct` and :mod:`.paired_wormhole` import ``wormhole``
or autobahn (``txdilation.install()`` first; :class:`PairedWormhole` does it).
"""

from __future__ import annotations

from txdilation.pairing.pairing_errors import PairingError, PairingFileError, PeerRestarted
from txdilation.pairing.pairing_options import PairingOptions

__all__ = ["PairedWormhole", "PairingError", "PairingFileError", "PairingOptions", "PeerRestarted"]


def __getattr__(name: str) -> object:
    if name == "PairedWormhole":  # imports wormhole: only when asked for
        from txdilation.pairing.paired_wormhole import PairedWormhole

        return PairedWormhole
    raise AttributeError(name)
