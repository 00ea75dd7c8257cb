"""Limits and defaults that several layers share, and that the settings read at the edge.

Each is the default of one setting in :mod:`txdilation.settings`; the layers that enforce a
limit take its value as a parameter (never reading the environment).
"""

from __future__ import annotations

#: Largest record plaintext accepted by default once the handshake is complete.
DEFAULT_MAX_RECORD_SIZE = 64 * 2**20

#: Seconds a connection may take from TCP connect to selection before it is aborted.
DEFAULT_HANDSHAKE_TIMEOUT = 30.0

#: Outbound bytes (queued or sent, not yet acknowledged) above which producers are paused.
DEFAULT_MAX_UNACKED_BYTES = 64 * 2**20

#: Bytes held for subchannels nobody listens on yet.
DEFAULT_MAX_PENDING_OPEN_BYTES = 4 * 2**20

#: Bytes paused subchannels may hold before the whole connection stops reading.
DEFAULT_MAX_BUFFERED_INBOUND_BYTES = 4 * 2**20

#: Unauthenticated connections (accepted by the listener, handshake not done) held at once.
DEFAULT_MAX_UNAUTHENTICATED = 256

#: Bytes a sequenced record (OPEN, DATA, CLOSE) costs on top of its payload: tag, scid, seqnum.
RECORD_OVERHEAD = 9

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_BUFFERED_INBOUND_BYTES",
    "DEFAULT_MAX_PENDING_OPEN_BYTES",
    "DEFAULT_MAX_RECORD_SIZE",
    "DEFAULT_MAX_UNACKED_BYTES",
    "DEFAULT_MAX_UNAUTHENTICATED",
    "RECORD_OVERHEAD",
]
