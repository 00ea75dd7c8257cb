"""Operator settings read from the environment (loopback control for tests and deployments).

- ``TXDILATION_LISTEN_INTERFACE``: the interface the direct-hint listener binds (default: all).
- ``TXDILATION_HINT_ADDRESSES``: comma-separated addresses to advertise in direct hints instead of
  the discovered ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


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
