"""``txdilation run``: one session in the foreground, with a live status line.

Layer: process entry point. The options are exactly those of ``twistd dilation``
(:class:`~txdilation.session.command_line.SessionOptions`); the session runs on the global reactor
until SIGINT/SIGTERM (a clean stop with its grace period, then exit 130/143 as shells expect
of an interrupted command; a second signal cuts at once), the peer closing its wormhole (exit
0) or a fatal error (exit 1); usage errors exit 2, with one line on stderr (``txdilation run:
error: ...; see 'txdilation run --help'``), and a start refused by this host (a pairing file
in use) exits 1, with one line saying what to do.
Notable events and, on a terminal, a live status line (generation, path, RTT, bytes) go to
stderr; ``--status -`` puts the JSON-line events on stdout. Twisted's log also goes to stderr,
at ``--log-level`` (or ``TXDILATION_LOG_LEVEL``) if given, else from ``warn`` up, without the
status lines (the human view shows those).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO, Any

from twisted.logger import LogLevel, globalLogBeginner, textFileLogObserver
from twisted.python import usage

from txdilation import _early_signals
from txdilation.session.command_line import SessionOptions, StartRefused

__all__ = ["EXIT_USAGE", "begin_logging", "refusal", "run", "usage_error"]

EXIT_USAGE = 2


class RunOptions(SessionOptions):
    """``txdilation run [options]``."""

    synopsis = "txdilation run [options]"
    command = "txdilation run"
    longdesc = SessionOptions.longdesc.split(" Exit status:")[0] + (
        " Exit status: 130 after SIGINT and 143 after SIGTERM (what shells report for an "
        "interrupted command), 0 when the peer closed its wormhole, 1 after a fatal error, 2 "
        "for bad options."
    )


def run(argv: Sequence[str], *, stderr: IO[str] | None = None) -> int:
    """Parse ``argv`` and run the session until it stops; returns the exit status."""
    err = stderr if stderr is not None else sys.stderr
    options = RunOptions()
    try:
        options.parseOptions(list(argv))  # type: ignore[no-untyped-call]
    except usage.UsageError as e:
        refused, status = refusal("txdilation run", e)
        print(refused, file=err)
        return status
    config = options.config
    assert config is not None

    from txdilation.session.process import (
        Signals,
        exit_status,
        install_signal_handlers,
        prepare,
        stop_reactor,
        watch_parent,
    )

    prepare(config)
    begin_logging(err, explicit=config.log_level is not None)
    from twisted.internet import reactor

    from txdilation.reporting.status_events import open_status_writer
    from txdilation.session.liveline import LiveStatusLine
    from txdilation.session.service import Session

    outcomes: list[str] = []
    signals: list[Signals] = []

    def ended(outcome: str) -> None:
        outcomes.append(outcome)
        stop_reactor(reactor)

    def handle_signals() -> None:
        signals.append(install_signal_handlers(reactor, session))
        watch_parent(reactor, session)

    try:
        writer = open_status_writer(reactor, config.status)
    except OSError as e:
        print(f"txdilation run: cannot open the status file: {e}", file=err)
        return EXIT_USAGE
    session = Session(config, reactor, writer, on_ended=ended)
    line = LiveStatusLine(session, err, reactor, tty=err.isatty())
    writer.add_observer(line.observe)
    _early_signals.keep_through_startup(reactor)  # until handle_signals: not the reactor's
    reactor.callWhenRunning(handle_signals)  # type: ignore[attr-defined]
    reactor.callWhenRunning(session.start)  # type: ignore[attr-defined]
    reactor.callWhenRunning(line.start)  # type: ignore[attr-defined]
    reactor.addSystemEventTrigger("before", "shutdown", session.stop, "shutdown")  # type: ignore[attr-defined]
    reactor.addSystemEventTrigger("after", "shutdown", line.stop)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    return exit_status(signals[0] if signals else Signals(), outcomes[0] if outcomes else "")


def refusal(command: str, error: usage.UsageError) -> tuple[str, int]:
    """The one line and the exit status for refused options: a usage error (status 2), or a
    start refused (:class:`StartRefused`, status 1: the line says what to do instead)."""
    if isinstance(error, StartRefused):
        return f"{command}: {error}", error.exit_status
    return usage_error(command, str(error)), EXIT_USAGE


def usage_error(command: str, message: str) -> str:
    """The one line a usage error prints: ``COMMAND: error: MESSAGE; see 'COMMAND --help'``."""
    message = message.removeprefix("Parameter type enforcement failed: ").rstrip(".")
    return f"{command}: error: {message}; see '{command} --help'"


def begin_logging(stream: IO[str], *, explicit: bool) -> None:
    """Send Twisted's log to ``stream``: at the configured level if ``explicit`` (or if
    ``TXDILATION_LOG_LEVEL`` is set), else from ``warn`` up; status lines are left out."""
    import os

    from txdilation import logs

    level = logs.current_level() if explicit or os.environ.get(logs.ENV_LEVEL) else LogLevel.warn

    def is_status_line(event: Any) -> bool:
        return "status" in event

    observer = logs.filtered(textFileLogObserver(stream), level, exclude=is_status_line)
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
