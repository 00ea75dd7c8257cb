"""``wormhole._dilation.subchannel``: the subchannel transport, its address, its errors and
the endpoint classes (stock defines them all in this module; applications import them from it
or check ``isinstance`` against them, and get the very classes ``connector_for`` and
``listener_for`` return)."""

from __future__ import annotations

from txdilation.errors import ProtocolViolation
from txdilation.subchannels.app_endpoints import (
    SubchannelConnectorEndpoint,
    SubchannelListenerEndpoint,
    SubchannelListeningPort,
)
from txdilation.subchannels.subchannel import (
    MAX_WRITE_LENGTH,
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
    Receiver,
    Sender,
    SubChannel,
    SubchannelAddress,
    UnexpectedSubprotocol,
    _WormholeAddress,
)

#: stock's bound on one ``write()`` (2**32 less the record header and the Noise tag); ours is
#: :data:`MAX_WRITE_LENGTH` (the largest record a peer accepts by default)
MAX_FRAME_LENGTH = 2**32 - 1 - 9 - 16


class IllegalSubprotocolError(ProtocolViolation):
    """A peer tried to open a subprotocol that has no listener (stock's name; unused)."""


__all__ = [
    "MAX_FRAME_LENGTH",
    "MAX_WRITE_LENGTH",
    "AlreadyClosedError",
    "HalfCloseUsedOnNonHalfCloseable",
    "IllegalSubprotocolError",
    "NormalCloseUsedOnHalfCloseable",
    "Receiver",
    "Sender",
    "SubChannel",
    "SubchannelAddress",
    "SubchannelConnectorEndpoint",
    "SubchannelListenerEndpoint",
    "SubchannelListeningPort",
    "UnexpectedSubprotocol",
    "_WormholeAddress",
]
