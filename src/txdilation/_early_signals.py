"""SIGINT and SIGTERM while a command starts: one line and the interrupted status, no traceback.

Layer: process entry points (``txdilation run``, ``txdilation demo``); standard library only,
so that :func:`install` takes effect before the slow imports (``wormhole``, the reactor) that
fill a command's first second. Python's own SIGINT handler would raise ``KeyboardInterrupt``
wherever the program happens to be, and the reactor's handlers would stop it before the
command's own are in place (``txdilation demo`` then ended with status 1 and no word).

Until the command installs its own handlers (once its reactor runs), a stop signal prints
``COMMAND: interrupted by SIGINT while starting: nothing was started`` and ends the process at
once with 128 + the signal's number (130, 143), as a shell reports an interrupted command:
nothing has started yet that would need stopping. :func:`keep_through_startup` puts the
handler back right after the reactor installed its own (the same ``during startup`` phase), so
there is no moment in which a signal meets the reactor's handlers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

__all__ = ["install", "keep_through_startup"]

_command: list[str] = []


def install(command: str) -> None:
    """Handle SIGINT and SIGTERM as the module docstring says, for ``command``."""
    _command[:] = [command]
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupted)


def keep_through_startup(reactor: Any) -> None:
    """Put the handlers back once the reactor installed its own (when :func:`install` was
    called in this process; otherwise do nothing)."""
    if _command:
        reactor.addSystemEventTrigger("during", "startup", install, _command[0])


def _interrupted(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(
            f"{_command[0]}: interrupted by {name} while starting: nothing was started\n"
        )
        sys.stderr.flush()
    os._exit(128 + signum)
