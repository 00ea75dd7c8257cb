"""``wormhole._dilation.outbound``: the sending half of L4."""

from __future__ import annotations

from txdilation.durable.outbound import WRITE_BATCH_BYTES, Outbound, ProducerSet, SendQueue
from txdilation.wire.limits import DEFAULT_MAX_UNACKED_BYTES, RECORD_OVERHEAD

__all__ = [
    "DEFAULT_MAX_UNACKED_BYTES",
    "RECORD_OVERHEAD",
    "WRITE_BATCH_BYTES",
    "Outbound",
    "ProducerSet",
    "SendQueue",
]
