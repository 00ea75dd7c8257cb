"""Exceptions raised by txdilation, grouped by layer.

Wire-level errors all derive from :class:`DilationProtocolError`: whoever catches one drops the
offending connection (or subchannel) with the error's message as the logged reason, never the
process. Application-facing errors keep stock magic-wormhole's names.
"""

from __future__ import annotations

from wormhole.errors import WormholeClosed


class DilationProtocolError(Exception):
    """The peer (or something pretending to be it) broke the wire protocol."""


class FramingError(DilationProtocolError):
    """Bad relay answer, wrong prologue, or a frame length we refuse to buffer."""


class RecordError(DilationProtocolError):
    """A decrypted record is truncated, has an unknown tag, or has bad field contents."""


class NoiseError(DilationProtocolError):
    """The Noise handshake failed or a transport message did not authenticate."""


# --- application-facing errors (names as in stock wormhole._dilation) ---


class OldPeerCannotDilateError(Exception):
    """The peer shares no ``can-dilate`` version with us."""


class CanOnlyDilateOnceError(Exception):
    """``dilate()`` was called a second time on the same wormhole."""


class UnknownDilationMessageType(Exception):
    """A DILATE-n message had an unknown ``type`` (logged and ignored)."""


class UnexpectedKCM(Exception):
    """A KCM arrived on a connection that was already selected."""


class UnknownMessageType(Exception):
    """A record of an unknown kind reached the manager."""


class AlreadyClosedError(Exception):
    """``write()`` or ``loseConnection()`` on a subchannel that is already closed."""


class NormalCloseUsedOnHalfCloseable(Exception):
    """``loseConnection()`` was used where ``loseWriteConnection()`` is required."""


class HalfCloseUsedOnNonHalfCloseable(Exception):
    """``loseWriteConnection()`` on a subchannel whose protocol is not half-closeable."""


class UnexpectedSubprotocol(Exception):
    """The peer opened a subchannel for a name we do not expect."""


class DuplicateOpenError(DilationProtocolError):
    """An OPEN arrived for a subchannel id that is already open."""


class DataForMissingSubchannelError(DilationProtocolError):
    """DATA arrived for a subchannel id we do not know."""


class CloseForMissingSubchannelError(DilationProtocolError):
    """CLOSE arrived for a subchannel id we do not know."""


class WormholeClosedError(WormholeClosed):  # type: ignore[misc]
    """The wormhole was closed before this operation could complete (a
    ``wormhole.errors.WormholeClosed``, so handlers written for stock's errors catch it)."""
