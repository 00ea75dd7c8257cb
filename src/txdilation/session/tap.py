"""``twistd dilation``: the plugin's ``Options`` and ``makeService`` (loaded lazily by
``src/twisted/plugins/txdilation_plugin.py``).

Layer: process entry point. ``makeService`` prepares the process (log level,
``txdilation.install()``), opens the status stream, and returns a
:class:`~txdilation.session.service.SessionService`; once the reactor runs it installs the
session's signal handlers (SIGTERM/SIGINT: clean stop and exit 0, a second one cuts at once;
SIGUSR2: cut the link) and, when a supervising program asked for it, stops with its parent.
twistd's own options (``-n``, ``--pidfile``, ``--logfile``, ``--logger``, ...) work as usual;
unless ``--logger`` or ``--syslog`` is given, the log observer is twistd's own choice (stdout
or ``--logfile``) behind ``txdilation.logs.filtered`` (``--log-level``, default info: debug
lines such as telemetry records and Twisted's factory and port chatter are left out).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from twisted.python import usage

from txdilation.session.command_line import SessionOptions

if TYPE_CHECKING:  # pragma: no cover (.service imports wormhole: only after prepare())
    from txdilation.session.service import SessionService

__all__ = ["Options", "makeService"]


class Options(SessionOptions):
    """``twistd dilation [options]``: a usage error is ONE line on stderr and exit status 2,
    as for ``txdilation run`` (twistd itself would print its whole usage text, then the
    message, and exit 1); a start refused by this host is one line and exit status 1."""

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        try:
            super().parseOptions(options)  # type: ignore[no-untyped-call]
        except usage.UsageError as e:
            from txdilation.session.foreground import refusal

            line, status = refusal("twistd dilation", e)
            print(line, file=sys.stderr)
            raise SystemExit(status) from None


def makeService(options: Options) -> SessionService:
    """Build the session service from parsed options."""
    from twisted.internet import reactor

    from txdilation.logs import twistd_observer
    from txdilation.session.process import (
        end_process,
        install_signal_handlers,
        prepare,
        watch_parent,
    )

    config = options.config
    assert config is not None  # postOptions set it
    prepare(config)  # before anything imports wormhole
    from txdilation.reporting.status_events import open_status_writer
    from txdilation.session.service import Session, SessionService

    writer = open_status_writer(reactor, config.status)
    session = Session(config, reactor, writer, on_ended=lambda o: end_process(reactor, o))
    reactor.callWhenRunning(install_signal_handlers, reactor, session)  # type: ignore[attr-defined]
    reactor.callWhenRunning(watch_parent, reactor, session)  # type: ignore[attr-defined]
    server_options = getattr(options, "parent", None)
    observer = twistd_observer(server_options) if server_options is not None else None
    return SessionService(session, log_observer=observer)
