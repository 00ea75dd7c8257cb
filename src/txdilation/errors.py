"""The families of txdilation's exceptions: one base, four families a caller can catch.

Layer: errors, below everything (no import). Every exception txdilation defines derives from
:class:`TxdilationError` through exactly one family, and keeps the bases a caller may already
catch it by (``ValueError``, Twisted's ``ConnectError``, ``wormhole.errors.WormholeClosed``,
stock's names). The concrete exceptions live beside the code that raises them (a layer's
``*_errors.py`` or the module itself); ``tests/test_errors.py`` keeps the tree whole.
"""

from __future__ import annotations

__all__ = ["LinkFailure", "PairingFailure", "ProtocolViolation", "TxdilationError", "UsageMistake"]


class TxdilationError(Exception):
    """Anything txdilation raises on purpose."""


class UsageMistake(TxdilationError):
    """A person's or a program's mistake: a setting, an option or a value that is wrong, or an
    API called against its rules (the message says what to change)."""


class ProtocolViolation(TxdilationError):
    """A peer, a server or a router sent what its protocol does not allow (the connection or
    message is dropped, never the process)."""


class PairingFailure(TxdilationError):
    """A pairing cannot be used, or what was open with the paired peer is gone."""


class LinkFailure(TxdilationError):
    """A connection, a wormhole or a port mapping could not be made, or was closed."""
