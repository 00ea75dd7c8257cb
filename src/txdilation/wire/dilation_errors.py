"""Exceptions raised by txdilation, grouped by layer.

Wire-level errors all derive from :class:`DilationProtocolError`: whoever catches one drops the
offending connection (or subchannel) with the error's message as the logged reason, never the
process. Application-facing errors keep stock magic-wormhole's names. Each is in one family of
``txdilation.errors`` (stock's ``UnknownDilationMessageType`` and ``UnknownMessageType`` are the
real errors for those events, under stock's names: ``txdilation._stock.manager``).
"""

from __future__ import annotations

from wormhole.errors import WormholeClosed

from txdilation.errors import LinkFailure, ProtocolViolation, UsageMistake


class DilationProtocolError(ProtocolViolation):
    """The peer (or something pretending to be it) broke the wire protocol."""


class FramingError(DilationProtocolError):
    """Bad relay answer, wrong prologue, or a frame length we refuse to buffer."""


class RecordError(DilationProtocolError):
    """A decrypted record is truncated, has an unknown tag, or has bad field contents."""


class NoiseError(DilationProtocolError):
    """The Noise handshake failed or a transport message did not authenticate."""


# --- application-facing errors (names as in stock wormhole._dilation) ---


class OldPeerCannotDilateError(LinkFailure):
    """The peer shares no ``can-dilate`` version with us."""


class CanOnlyDilateOnceError(UsageMistake):
    """``dilate()`` was called a second time on the same wormhole."""


class UnexpectedKCM(ProtocolViolation):
    """A KCM arrived on a connection that was already selected."""


class AlreadyClosedError(UsageMistake):
    """``write()`` or ``loseConnection()`` on a subchannel that is already closed."""


class NormalCloseUsedOnHalfCloseable(UsageMistake):
    """``loseConnection()`` was used where ``loseWriteConnection()`` is required."""


class HalfCloseUsedOnNonHalfCloseable(UsageMistake):
    """``loseWriteConnection()`` on a subchannel whose protocol is not half-closeable."""


class UnexpectedSubprotocol(ProtocolViolation):
    """The peer opened a subchannel for a name we do not expect."""


class DuplicateOpenError(DilationProtocolError):
    """An OPEN arrived for a subchannel id that is already open."""


class DataForMissingSubchannelError(DilationProtocolError):
    """DATA arrived for a subchannel id we do not know."""


class CloseForMissingSubchannelError(DilationProtocolError):
    """CLOSE arrived for a subchannel id we do not know."""


class WormholeClosedError(WormholeClosed, LinkFailure):  # type: ignore[misc]
    """The wormhole was closed before this operation could complete (a
    ``wormhole.errors.WormholeClosed``, so handlers written for stock's errors catch it)."""
