"""Process-level glue for a session process (``twistd dilation`` and ``txdilation run``).

Layer: process entry points only (library code never calls these: they install txdilation,
touch signal handlers and the process's exit status).

- :func:`prepare` sets the log level of ``txdilation.logs`` (``--log-level``) and installs
  txdilation as magic-wormhole's Dilation (``txdilation.install()``) before anything imports
  ``wormhole``.
  The library's settings are not set here: the session reads them once, when it dilates
  (``txdilation.session.service.library_settings``: the ``TXDILATION_*`` variables of the
  environment with the session's own ``--events``, ``--listen-interface``, ... laid over them).
- :func:`install_signal_handlers` (call once the reactor runs, i.e. after Twisted installed its
  own): SIGTERM and SIGINT start a clean stop and then stop the reactor, WITHOUT Twisted's habit
  of re-raising the signal at exit, so the process exits 0 after a clean stop; once the reactor
  has shut down they are ignored (Python would otherwise restore the default handlers while the
  interpreter finalizes, and a late SIGTERM would kill a process that already stopped cleanly);
  SIGUSR2 (a debug and test aid, see docs/plugin.md) aborts the current L2 connection, as a
  network cut would.
- :func:`end_process` is the session's ``on_ended``: it stops the reactor, and after a
  failure makes the process exit with status 1 once twistd has finished its own cleanup
  (pidfile, logs): twistd has no other way for a service to set it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger

from txdilation.session.config import SessionConfig

if TYPE_CHECKING:  # pragma: no cover (importing .service imports wormhole: after prepare())
    from txdilation.session.service import Session

__all__ = [
    "EXIT_FAILED",
    "end_process",
    "install_signal_handlers",
    "prepare",
    "stop_reactor",
]

EXIT_FAILED = 1
CUT_SIGNAL = getattr(signal, "SIGUSR2", None)
"""The debug signal that aborts the current L2 connection (None where it does not exist)."""

_log = Logger(namespace="txdilation.session.process")


def prepare(config: SessionConfig) -> None:
    """Set the log level and install txdilation (see the module docstring)."""
    if config.log_level is not None:
        from txdilation import logs

        logs.configure(config.log_level)
    import txdilation

    txdilation.install()


def stop_reactor(reactor: Any) -> None:
    """``reactor.stop()`` unless it is already stopping."""
    with contextlib.suppress(ReactorNotRunning):
        reactor.stop()


def install_signal_handlers(reactor: Any, session: Session) -> Callable[[], None]:
    """Handle SIGTERM/SIGINT (clean stop, exit 0) and SIGUSR2 (cut the link).

    :returns: a function restoring the previous handlers.
    """
    stopping: list[str] = []

    def stop(name: str) -> None:
        if stopping:
            _log.info("{signal}: already stopping", signal=name)
            return
        stopping.append(name)
        session.stop(name)
        stop_reactor(reactor)

    def on_stop_signal(signum: int, frame: object) -> None:
        reactor.callFromThread(stop, signal.Signals(signum).name)

    def on_cut_signal(signum: int, frame: object) -> None:
        reactor.callFromThread(session.cut_link)

    handlers: dict[int, Any] = {signal.SIGTERM: on_stop_signal, signal.SIGINT: on_stop_signal}
    if CUT_SIGNAL is not None:
        handlers[CUT_SIGNAL] = on_cut_signal
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}

    def ignore_late_signals() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    trigger = reactor.addSystemEventTrigger("after", "shutdown", ignore_late_signals)

    def restore() -> None:
        reactor.removeSystemEventTrigger(trigger)
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def end_process(reactor: Any, outcome: str) -> None:
    """The session ended with ``outcome``: stop the reactor; after ``failed`` the process then
    exits with :data:`EXIT_FAILED` (see the module docstring), else with 0."""
    if outcome == "failed":
        atexit.register(_exit_failed)
    stop_reactor(reactor)


def _exit_failed() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_FAILED)
