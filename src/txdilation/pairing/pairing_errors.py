"""Pairing errors: each says in one line what is wrong and what to do.

Layer: pairing vocabulary (no I/O). A :class:`PairingError`'s message is complete as it is: the
session and the ``txdilation`` command print it as their one line, with nothing sent to any
server.
"""

from __future__ import annotations

from txdilation.errors import PairingFailure

__all__ = [
    "CorruptPairingFile",
    "NotAPairingFile",
    "PairingError",
    "PairingFileError",
    "PairingInUse",
    "PeerCannotPair",
    "PeerRestarted",
    "UnsafePairingFile",
    "UnsupportedPairingVersion",
]


class PairingError(PairingFailure):
    """Something about a pairing that a person must act on (the message says what)."""


class PairingFileError(PairingError):
    """A pairing file that cannot be used (the session refuses it before sending anything)."""


class NotAPairingFile(PairingFileError):
    """The file is not a txdilation pairing file at all."""


class UnsupportedPairingVersion(PairingFileError):
    """The file was written by a txdilation with another pairing format."""


class CorruptPairingFile(PairingFileError):
    """The file is damaged or was edited (its integrity tag does not match)."""


class UnsafePairingFile(PairingFileError):
    """Others may read or write the file (its mode or owner), or it is not a regular file."""


class PairingInUse(PairingFileError):
    """Another process on this host is using the same pairing file."""


class PeerCannotPair(PairingError):
    """The peer did not announce pairing (stock magic-wormhole, or txdilation without it)."""


class PeerRestarted(PairingFailure):
    """The paired peer restarted: what was open with its previous process is gone.

    The reason a subchannel's protocol gets in ``connectionLost`` when the meeting it belonged
    to ends because the peer came back as a new process.
    """
