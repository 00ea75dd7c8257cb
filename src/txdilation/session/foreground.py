"""``txdilation run``: one session in the foreground, with a live status line.

Layer: process entry point. The options are exactly those of ``twistd dilation``
(:class:`~txdilation.session.options.SessionOptions`); the session runs on the global reactor
until SIGTERM/SIGINT (clean stop, exit 0), the peer closing its wormhole (exit 0) or a fatal
error (exit 1); usage errors exit 2.
Notable events and, on a terminal, a live status line (generation, path, RTT, bytes) go to
stderr; ``--status -`` puts the JSON-line events on stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from twisted.python import usage

from .options import SessionOptions

__all__ = ["EXIT_USAGE", "run"]

EXIT_USAGE = 2


class RunOptions(SessionOptions):
    """``txdilation run [options]``."""

    synopsis = "txdilation run [options]"


def run(argv: Sequence[str], *, stderr: IO[str] | None = None) -> int:
    """Parse ``argv`` and run the session until it stops; returns the exit status."""
    err = stderr if stderr is not None else sys.stderr
    options = RunOptions()
    try:
        options.parseOptions(list(argv))  # type: ignore[no-untyped-call]
    except usage.UsageError as e:
        print(f"{options}\ntxdilation run: {e}", file=err)
        return EXIT_USAGE
    config = options.config
    assert config is not None

    from .process import EXIT_FAILED, install_signal_handlers, prepare, stop_reactor

    prepare(config)
    from twisted.internet import reactor

    from .liveline import LiveStatusLine
    from .service import Session
    from .status import open_status_writer

    status: list[int] = [0]

    def ended(outcome: str) -> None:
        if outcome == "failed":
            status[0] = EXIT_FAILED
        stop_reactor(reactor)

    try:
        writer = open_status_writer(reactor, config.status)
    except OSError as e:
        print(f"txdilation run: cannot open the status file: {e}", file=err)
        return EXIT_USAGE
    session = Session(config, reactor, writer, on_ended=ended)
    line = LiveStatusLine(session, err, reactor, tty=err.isatty())
    writer.add_observer(line.observe)
    reactor.callWhenRunning(install_signal_handlers, reactor, session)  # type: ignore[attr-defined]
    reactor.callWhenRunning(session.start)  # type: ignore[attr-defined]
    reactor.callWhenRunning(line.start)  # type: ignore[attr-defined]
    reactor.addSystemEventTrigger("before", "shutdown", session.stop, "shutdown")  # type: ignore[attr-defined]
    reactor.addSystemEventTrigger("after", "shutdown", line.stop)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    return status[0]
