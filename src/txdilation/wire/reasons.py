"""Why a connection ended: a typed reason, made where the connection dies.

A :class:`LinkLoss` is a :class:`Cause` (what happened: what code decides on) and a readable
``message`` (what the logs say; ``str(loss)`` is the message), like aioquic's
``ConnectionTerminated(error_code, reason_phrase)``. It is created once, where a connection is
given up or found gone (the L2 connection, the selected link's liveness and dead-path checks,
the Manager's lifecycle), and travels as it is: to the Connector and its telemetry attempts
(``selection.attempts``), to the selected link's owner, to the loss telemetry
(``mailbox.losses``, which ``telemetry.causes`` puts in words) and to the log lines.
Nothing reads the message to decide anything, so rewording a log line changes no telemetry.

Invariants: every loss has exactly one cause; the causes are the ways a connection ends, not
the telemetry vocabulary (each consumer maps them onto its own values, with a test that every
cause is mapped).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Cause", "LinkLoss"]


class Cause(enum.Enum):
    """How a connection ended."""

    CLOSED = "closed"
    """Its transport closed cleanly (Twisted's ``ConnectionDone``), whoever closed it."""

    DROPPED = "dropped"
    """Its transport was lost or aborted (Twisted's other ``ConnectionClosed`` errors: the
    network, the peer, or our own ``abort()``)."""

    TRANSPORT_FAILED = "transport_failed"
    """Its transport ended with an error that is no ``ConnectionClosed`` (TLS, for one)."""

    PROTOCOL_ERROR = "protocol_error"
    """We dropped it: the peer broke the wire protocol (relay line, prologue, Noise, KCM,
    records), or an input came where the protocol has no place for it."""

    HANDSHAKE_TIMEOUT = "handshake_timeout"
    """Not selected within the handshake timeout (the Connector's setting)."""

    SILENT = "silent"
    """The selected link: nothing heard for 1.5 ping intervals (``path.liveness``)."""

    PROBE_UNANSWERED = "probe_unanswered"
    """The selected link: a probe went unanswered (``path.dead_path``)."""

    NETWORK_CHANGE = "network_change"
    """The selected link: our address went away, or a probe sent because our addresses or
    routes changed went unanswered."""

    PEER_REPORT = "peer_report"
    """The selected link: the peer said it is dead (``link-lost``, or ``reconnect``)."""

    PATH_UPGRADE = "path_upgrade"
    """We left it for a better path: a link the wormhole moved away from, closed after its
    grace; or a stock peer's relayed link a Leader gave up to start a generation that uses a
    direct path that proved to work."""


@dataclass(frozen=True, slots=True)
class LinkLoss:
    """Why one connection ended.

    :ivar cause: what happened.
    :ivar message: a short sentence for the logs (never parsed).
    """

    cause: Cause
    message: str

    def __str__(self) -> str:
        return self.message
