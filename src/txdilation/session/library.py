"""What the session asks of the library: its semantics, its settings, a dilated wormhole.

Layer: session (imported by :mod:`.core`, which dilates an ordinary wormhole, and by
:mod:`.paired_session`, which starts a ``PairedWormhole`` instead; neither start knows the other).
Importing this module does not import ``wormhole``.

Invariants: the session chooses its semantics explicitly (:data:`SEMANTICS`, Twisted's: the
splices are written and tested against it), whatever ``TXDILATION_SEMANTICS`` says; the
library's settings are typed values (:func:`library_settings`): the session's own Dilation
settings laid over the ``Settings`` read from the ``TXDILATION_*`` variables, here or by the
caller; the session uses a dilated wormhole only through :class:`Dilated` (a
``DilatedWormhole`` and a ``PairedWormhole`` both are one).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Final
from typing import Protocol as TypingProtocol

from twisted.internet.defer import Deferred

from txdilation.semantics import ENV_VAR, semantics_named
from txdilation.session.config import SessionConfig
from txdilation.settings import Settings

__all__ = ["SEMANTICS", "Dilated", "library_settings"]

SEMANTICS: Final = "twisted"
"""The application semantics the session's subchannels have (``txdilation.dilate``)."""


def library_settings(config: SessionConfig, base: Settings | None = None) -> Settings:
    """The settings a session dilates with: ``base`` (default: the process's ``TXDILATION_*``
    variables but ``TXDILATION_SEMANTICS``), each field replaced by the session's own setting
    where one was given (option or TOML key, ``events``, ``log-level``), and its :data:`SEMANTICS`.

    :raises ValueError: naming a ``TXDILATION_*`` variable set to something invalid.
    """
    if base is None:  # the session's one reader of the environment
        base = Settings.from_environ({k: v for k, v in os.environ.items() if k != ENV_VAR})
    own: dict[str, object] = dict(config.dilation)
    if config.events:
        own["events_path"] = config.events
    if config.log_level is not None:  # (telemetry records are log lines at debug only)
        own["log_records"] = config.log_level == "debug"
    settings = base.replacing(**own)
    return dataclasses.replace(settings, semantics=semantics_named(SEMANTICS))


class Dilated(TypingProtocol):
    """What the session uses of a dilated wormhole: a ``DilatedWormhole``, or with
    ``--pairing`` a ``PairedWormhole`` (the current meeting's)."""

    @property
    def last_rtt(self) -> float | None: ...

    @property
    def connected(self) -> bool: ...

    def abort_connection(self) -> None: ...

    def when_dilated(self) -> Deferred[None]: ...
