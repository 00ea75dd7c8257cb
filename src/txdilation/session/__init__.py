"""Long-running dilated sessions: named services forwarded over one dilated wormhole.

Layer: application, on top of txdilation's Dilation (it drives the public magic-wormhole API
with txdilation installed). One concern per module: :mod:`.config` / :mod:`.command_line` /
:mod:`.forwarding_specs` (settings and ``NAME=ENDPOINT`` specs); :mod:`.service` (the
:class:`~.service.Session` lifecycle and the twistd ``Service``); :mod:`.paired_session`
(``--pairing``); :mod:`.forwarding` / :mod:`.splice` (local connections and subchannels joined both
ways); :mod:`txdilation.reporting.status_events` / :mod:`.observe` (status events,
docs/status-events.md); :mod:`.process` / :mod:`.tap` / :mod:`.foreground` (process entry points,
signals, exit status); :mod:`.child` (session processes run and read: the demo, tests).

Only :mod:`.observe`, :mod:`.service` (through it), :mod:`.liveline` and :mod:`.foreground`'s
later imports load ``wormhole``; the entry points (:mod:`.tap`, :mod:`.foreground`) call
``txdilation.install()`` (:func:`.process.prepare`) before that.
"""

from __future__ import annotations

from txdilation.session.config import SessionConfig
from txdilation.session.session_errors import ConfigError

__all__ = ["ConfigError", "SessionConfig"]
