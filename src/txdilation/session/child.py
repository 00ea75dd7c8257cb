"""Run session processes and follow their status events (for ``txdilation demo`` and tests).

Layer: process supervision (Twisted ``spawnProcess``; no protocol logic). A
:class:`SessionProcess` runs ``txdilation run ...`` or ``twistd -n [twistd options] dilation
...`` with ``--status -`` and parses the JSON lines it prints; :meth:`SessionProcess.next_event`
waits for an event of a kind, :meth:`SessionProcess.signal` sends signals (SIGUSR2 cuts the
link, SIGTERM stops), :meth:`SessionProcess.terminate` stops it, :attr:`SessionProcess.ended`
fires with the exit status.

Invariants: every line of stdout that is a JSON object is an event, in order (anything else is
kept in :attr:`SessionProcess.other_output`); stderr is kept (its last 64 KiB); signals to a
process that already exited are ignored; :meth:`SessionProcess.terminate` always ends the
process within its timeout (SIGKILL last).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from txdilation.reporting.status_events import EventLog, StatusEvent

__all__ = ["CLEAN_EXITS", "SessionProcess", "run_command", "spawn_session", "twistd_command"]

_STDERR_KEEP = 64 * 1024
CLEAN_EXITS = frozenset({0, 128 + signal.SIGINT, 128 + signal.SIGTERM})
"""Exit statuses of a session process that stopped cleanly (``twistd dilation``: 0;
``txdilation run``: 0, or 130/143 after SIGINT/SIGTERM)."""


def run_command() -> list[str]:
    """The argv prefix of ``txdilation run`` with this interpreter."""
    return [sys.executable, "-m", "txdilation.cli", "run"]


def twistd_command(twistd_options: Sequence[str] = ()) -> list[str]:
    """The argv prefix of ``twistd -n [twistd_options] dilation`` with this interpreter."""
    return [
        sys.executable,
        "-c",
        "from twisted.scripts.twistd import run; run()",
        "-n",
        *twistd_options,
        "dilation",
    ]


class SessionProcess(ProcessProtocol):
    """One session process (see the module docstring).

    :ivar log: the status events so far (an :class:`EventLog`).
    :ivar exit_code: the exit status once ended (None if killed by a signal or running).
    :ivar exit_signal: the signal that killed it, if any.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.log = EventLog()
        self.other_output: list[str] = []
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.ended: Deferred[int | None] = Deferred()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._running = False

    # --- ProcessProtocol ---

    def connectionMade(self) -> None:
        self._running = True

    def outReceived(self, data: bytes) -> None:
        self._stdout += data
        while (newline := self._stdout.find(b"\n")) >= 0:
            line = bytes(self._stdout[:newline]).decode("utf-8", "replace").strip()
            del self._stdout[: newline + 1]
            self._line(line)

    def _line(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or "kind" not in event:
            if line:
                self.other_output.append(line)
            return
        self.log(event)

    def errReceived(self, data: bytes) -> None:
        self._stderr += data
        if len(self._stderr) > 2 * _STDERR_KEEP:
            del self._stderr[:-_STDERR_KEEP]

    def processEnded(self, reason: Failure) -> None:
        self._running = False
        value = reason.value
        if isinstance(value, ProcessDone):
            self.exit_code = 0
        elif isinstance(value, ProcessTerminated):
            self.exit_code = value.exitCode
            self.exit_signal = value.signal
        self.log.end(RuntimeError(f"{self.name} exited before the event came\n{self.tail()}"))
        self.ended.callback(self.exit_code)

    # --- for the supervisor ---

    @property
    def running(self) -> bool:
        """True until the process has ended."""
        return self._running

    @property
    def pid(self) -> int | None:
        """The process id (None once it ended)."""
        return getattr(self.transport, "pid", None)

    @property
    def stderr(self) -> str:
        """The end of what the process wrote to stderr."""
        return self._stderr[-_STDERR_KEEP:].decode("utf-8", "replace")

    @property
    def events(self) -> list[StatusEvent]:
        """Every status event so far."""
        return self.log.events

    def of_kind(self, kind: str) -> list[StatusEvent]:
        """Every event of ``kind`` so far."""
        return self.log.of_kind(kind)

    def next_event(
        self, kind: str, match: Callable[[StatusEvent], bool] = lambda e: True, *, after: int = 0
    ) -> Deferred[StatusEvent]:
        """See :meth:`EventLog.next_event`; errbacks if the process ends before the event."""
        return self.log.next_event(kind, match, after=after)

    def signal(self, name: str) -> bool:
        """Send a signal (``"TERM"``, ``"USR2"``, ``"KILL"``); False if it already exited."""
        if not self._running or self.transport is None:
            return False
        number = name if name in ("TERM", "KILL", "INT") else getattr(signal, f"SIG{name}")
        with suppress(ProcessExitedAlready):
            self.transport.signalProcess(number)  # type: ignore[attr-defined]
            return True
        return False

    async def cut_link(self, reactor: Any, timeout: float = 15.0) -> StatusEvent:
        """Cut the session's link (SIGUSR2) and wait until it selected a connection of a newer
        generation; returns that ``connection-selected`` event.

        :raises twisted.internet.defer.TimeoutError: when it has not reconnected in time.
        """
        selected = self.of_kind("connection-selected")
        generation = max((e["generation"] for e in selected), default=0)
        seen = len(self.events)
        self.signal("USR2")
        reconnected = self.next_event(
            "connection-selected", lambda e: bool(e["generation"] > generation), after=seen
        )
        reconnected.addTimeout(timeout, reactor)
        return await reconnected

    async def terminate(self, reactor: Any, timeout: float = 10.0) -> int | None:
        """SIGTERM (unless the session already reported ``closed`` and is exiting by itself),
        then wait up to ``timeout`` seconds (SIGKILL after); returns the exit status."""
        if self._running:
            if not self.of_kind("closed"):
                self.signal("TERM")
            killer = reactor.callLater(timeout, self.signal, "KILL")
            await self.ended
            if killer.active():
                killer.cancel()
        return self.exit_code

    @property
    def stopped_cleanly(self) -> bool:
        """It has ended with exit status 0, or 130/143 (a clean stop after SIGINT/SIGTERM, as
        ``txdilation run`` reports it), and its last event is a ``closed`` not ``failed``."""
        last = self.events[-1] if self.events else {}
        return (
            self.exit_code in CLEAN_EXITS
            and last.get("kind") == "closed"
            and last.get("reason") != "failed"
        )

    def tail(self, events: int = 12) -> str:
        """The last events and stderr lines, for error messages."""
        lines = "\n".join(json.dumps(e)[:300] for e in self.events[-events:])
        return (
            f"--- {self.name}: exit {self.exit_code} signal {self.exit_signal}; last events:\n"
            f"{lines}\n--- {self.name} stderr (tail):\n{self.stderr[-4000:]}"
        )


def spawn_session(
    reactor: Any,
    name: str,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    path: str | None = None,
) -> SessionProcess:
    """Start ``argv`` (e.g. ``run_command() + [...]``) as a session process.

    :param env: its environment (default: this process's, unbuffered output); it stops when
        this process is gone (``txdilation.session.process.watch_parent``).
    :param path: its working directory.
    """
    from txdilation.session.process import PARENT_VARIABLE

    process = SessionProcess(name)
    environment = dict(os.environ if env is None else env)
    environment["PYTHONUNBUFFERED"] = "1"
    environment[PARENT_VARIABLE] = str(os.getpid())
    reactor.spawnProcess(process, argv[0], list(argv), env=environment, path=path)
    return process
