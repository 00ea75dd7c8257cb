"""``wormhole._dilation.inbound``: the receiving half of L4 and the errors it reports."""

from __future__ import annotations

from txdilation.durable.inbound import (
    ACK_DELAY,
    ACK_THRESHOLD_BYTES,
    BuildSubchannel,
    Delivery,
    Inbound,
)
from txdilation.wire.dilation_errors import (
    CloseForMissingSubchannelError,
    DataForMissingSubchannelError,
    DuplicateOpenError,
)
from txdilation.wire.limits import (
    DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
    DEFAULT_MAX_PENDING_OPEN_BYTES,
)

__all__ = [
    "ACK_DELAY",
    "ACK_THRESHOLD_BYTES",
    "DEFAULT_MAX_BUFFERED_INBOUND_BYTES",
    "DEFAULT_MAX_PENDING_OPEN_BYTES",
    "BuildSubchannel",
    "CloseForMissingSubchannelError",
    "DataForMissingSubchannelError",
    "Delivery",
    "DuplicateOpenError",
    "Inbound",
]
