"""Errors of the session layer (the long-running forwarding service)."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """The session's settings are wrong; the message says which one and why."""
