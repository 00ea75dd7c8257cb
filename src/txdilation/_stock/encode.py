"""``wormhole._dilation.encode``: stock's 4-byte big-endian helpers."""

from __future__ import annotations

from txdilation.wire.encode import from_be4, to_be4

__all__ = ["from_be4", "to_be4"]
