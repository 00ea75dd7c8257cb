"""Process-level glue for a session process (``twistd dilation`` and ``txdilation run``).

Layer: process entry points only (library code never calls these: they install txdilation,
touch signal handlers and the process's exit status). :func:`prepare` sets the log level and
installs txdilation before anything imports ``wormhole``; :func:`install_signal_handlers`:
the first SIGTERM/SIGINT stops cleanly, a second cuts, a third exits at once, SIGUSR2 aborts
the current L2 connection (docs/plugin.md); :func:`watch_parent` stops a child session whose
parent is gone; :func:`end_process` is the session's ``on_ended`` (exit status 1 after a
failure, once twistd cleaned up).

Invariants: the library's settings are not read here (the session reads them when it
dilates); Twisted's re-raising of the signal at exit is not used (the caller picks the status,
:func:`exit_status`); signals after the reactor shut down are ignored. In full:
docs/module-notes.md.
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
    "PARENT_VARIABLE",
    "Signals",
    "end_process",
    "exit_status",
    "install_signal_handlers",
    "prepare",
    "stop_reactor",
    "watch_parent",
]

EXIT_FAILED = 1
PARENT_VARIABLE = "TXDILATION_PARENT_PID"
"""Set by a supervising program to its process id: the session stops when that process is
gone (:func:`watch_parent`). Removed from the environment once read."""
PARENT_POLL_SECONDS = 0.5
CUT_SIGNAL = getattr(signal, "SIGUSR2", None)
"""The debug signal that aborts the current L2 connection (None where it does not exist)."""

_log = Logger()


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


class Signals:
    """The stop signals a process received (see :func:`install_signal_handlers`).

    :ivar received: the names of the SIGTERM/SIGINT received, in order.
    :ivar restore: puts the previous handlers back.
    """

    def __init__(self) -> None:
        self.received: list[str] = []
        self.restore: Callable[[], None] = lambda: None

    @property
    def first(self) -> int | None:
        """The number of the first stop signal received, or None."""
        return int(signal.Signals[self.received[0]]) if self.received else None


def exit_status(signals: Signals, outcome: str) -> int:
    """A foreground command's exit status: 1 after a failure, 128 + the signal's number after
    a stop by SIGINT/SIGTERM (130, 143: what shells report for an interrupted command), else 0."""
    if outcome == "failed":
        return EXIT_FAILED
    first = signals.first
    return 128 + first if first is not None else 0


def install_signal_handlers(reactor: Any, session: Session) -> Signals:
    """Handle SIGTERM/SIGINT (first: clean stop; second: cut and close now; third: exit now)
    and SIGUSR2 (cut the link); see the module docstring.

    :returns: what was received, and how to restore the previous handlers.
    """
    signals = Signals()

    def stop(name: str, count: int) -> None:
        if count == 1:
            session.stop(name)
            stop_reactor(reactor)
        else:  # (the session's "stopping" event says so: one line in the log, not two)
            session.stop_now(name)

    def on_stop_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        signals.received.append(name)
        if len(signals.received) >= 3:
            _exit_now(f"{name} a third time: exiting at once", 128 + signum)
        reactor.callFromThread(stop, name, len(signals.received))

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

    signals.restore = restore
    return signals


def watch_parent(reactor: Any, session: Session, environ: Any = os.environ) -> Any:
    """If :data:`PARENT_VARIABLE` names a process (our parent when we started), stop the
    session at once (``stop_now``) and the reactor when our parent is no longer that process.

    :returns: the polling ``LoopingCall``, or None when no parent is to be watched.
    """
    text = environ.pop(PARENT_VARIABLE, None)
    try:
        parent = int(text) if text else 0
    except ValueError:
        parent = 0
    if parent <= 0:
        return None
    from twisted.internet.task import LoopingCall

    def check() -> None:
        if os.getppid() != parent:
            loop.stop()
            _log.warn("the process that started this session ({pid}) is gone: stopping", pid=parent)
            session.stop_now("parent-exited")
            stop_reactor(reactor)

    loop = LoopingCall(check)
    loop.clock = reactor
    loop.start(PARENT_POLL_SECONDS, now=True)
    return loop


def _exit_now(message: str, status: int) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    os._exit(status)


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
