"""Operator settings read from the environment (loopback control and resource limits).

Where to listen and what to advertise (:class:`NetworkSettings`):

- ``TXDILATION_LISTEN_INTERFACE``: the interface the direct-hint listener binds (default: all).
- ``TXDILATION_HINT_ADDRESSES``: comma-separated addresses to advertise in direct hints instead of
  the discovered ones.

Resource limits (:class:`Limits`; each variable unset or empty means the default):

- ``TXDILATION_HANDSHAKE_TIMEOUT``: seconds a connection may take from TCP connect to selection
  (prologue, Noise handshake, KCM) before it is aborted; also the TCP connect timeout of our
  outbound attempts. Default 30.
- ``TXDILATION_MAX_UNACKED_BYTES``: outbound bytes (queued or sent, not yet acknowledged) above
  which every registered subchannel producer is paused. Default 64 MiB.
- ``TXDILATION_MAX_BUFFERED_INBOUND_BYTES``: bytes paused subchannels may hold before the whole
  connection stops reading. Default 4 MiB.
- ``TXDILATION_MAX_PENDING_OPEN_BYTES``: bytes held for subchannels nobody listens on yet.
  Default 4 MiB.
- ``TXDILATION_MAX_RECORD_SIZE``: largest record plaintext accepted from the peer. Default 64 MiB.

These are read once per dilated wormhole, when ``dilate()`` builds its Manager.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .framer import DEFAULT_MAX_RECORD_SIZE
from .inbound import DEFAULT_MAX_BUFFERED_INBOUND_BYTES, DEFAULT_MAX_PENDING_OPEN_BYTES
from .l2 import DEFAULT_HANDSHAKE_TIMEOUT
from .outbound import DEFAULT_MAX_UNACKED_BYTES

_BYTE_LIMITS = (
    "max_unacked_bytes",
    "max_buffered_inbound_bytes",
    "max_pending_open_bytes",
    "max_record_size",
)


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    """Where to listen and what to advertise; ``None`` means the default behaviour."""

    listen_interface: str | None = None
    hint_addresses: tuple[str, ...] | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> NetworkSettings:
        """Read the two ``TXDILATION_*`` variables (empty values count as unset)."""
        env = os.environ if environ is None else environ
        interface = env.get("TXDILATION_LISTEN_INTERFACE", "").strip() or None
        raw = env.get("TXDILATION_HINT_ADDRESSES", "")
        addresses = tuple(a.strip() for a in raw.split(",") if a.strip())
        return cls(interface, addresses or None)


@dataclass(frozen=True, slots=True)
class Limits:
    """Timeouts and memory bounds of one dilated wormhole (see the module docstring)."""

    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES
    max_buffered_inbound_bytes: int = DEFAULT_MAX_BUFFERED_INBOUND_BYTES
    max_pending_open_bytes: int = DEFAULT_MAX_PENDING_OPEN_BYTES
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE

    def __post_init__(self) -> None:
        if not (math.isfinite(self.handshake_timeout) and self.handshake_timeout > 0):
            raise ValueError(f"handshake_timeout must be positive, not {self.handshake_timeout!r}")
        for name in _BYTE_LIMITS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive number of bytes, not {value!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """Read the ``TXDILATION_*`` limit variables (empty values count as unset).

        :raises ValueError: when a variable is set to something other than a positive number
            (a misconfiguration is reported, not silently replaced by the default).
        """
        env = os.environ if environ is None else environ
        values: dict[str, float | int] = {}
        timeout = env.get("TXDILATION_HANDSHAKE_TIMEOUT", "").strip()
        if timeout:
            try:
                values["handshake_timeout"] = float(timeout)
            except ValueError:
                raise ValueError(
                    f"TXDILATION_HANDSHAKE_TIMEOUT must be a number of seconds, not {timeout!r}"
                ) from None
        for name in _BYTE_LIMITS:
            variable = f"TXDILATION_{name.upper()}"
            raw = env.get(variable, "").strip()
            if raw:
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ValueError(f"{variable} must be a number of bytes, not {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]
