"""Errors of the session layer (the long-running forwarding service)."""

from __future__ import annotations

from txdilation.errors import UsageMistake

__all__ = ["CannotStart", "ConfigError"]


class ConfigError(ValueError, UsageMistake):
    """The session's settings are wrong; the message says which one and why."""


class CannotStart(ConfigError):
    """The settings are right, but something on this host refuses the start now (a pairing
    file another process uses): a failure (exit status 1), not a usage error; the message says
    what to do."""
