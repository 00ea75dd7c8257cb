"""Driving real applications' processes in tests: what they print, waiting for it, their end.

Layer: test infrastructure. :class:`AppProcess` starts one command (optionally on a pseudo
terminal, for a program that wants one, such as ``git-withme``'s host), keeps everything it
prints (escape sequences removed), waits for a pattern in it, types into it, and ends it.

Invariants: every wait is bounded; :meth:`AppProcess.stop` ends the process (its signal, then
KILL two seconds later).
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import struct
import termios
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

#: CSI/OSC escape sequences and other control characters a terminal program prints
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]|[\r\x07]")


class AppProcess(ProcessProtocol):
    """One application process: its output (stdout and stderr together), its exit."""

    def __init__(self, reactor: Any, name: str) -> None:
        self.reactor = reactor
        self.name = name
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._text: list[str] = []
        self._held = ""  # the end of the last chunk, when it may be the start of an escape
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.ended: Deferred[None] = Deferred()
        self.pid: int | None = None
        self._waiters: list[tuple[re.Pattern[str], Deferred[re.Match[str]]]] = []

    @classmethod
    def start(
        cls,
        reactor: Any,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        terminal: bool = False,
    ) -> AppProcess:
        """Start ``argv``; ``terminal``: on a new 250-column pseudo terminal."""
        proto = cls(reactor, name)
        use_pty: Any = False
        if terminal:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 250, 0, 0))
            use_pty = (master, slave, os.ttyname(slave))
        transport = reactor.spawnProcess(
            proto, argv[0], list(argv), env=dict(env), path=cwd, usePTY=use_pty
        )
        proto.pid = transport.pid
        return proto

    @property
    def text(self) -> str:
        """Everything printed so far, decoded, without terminal escape sequences."""
        return "".join(self._text)

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        chunk = self._held + self._decoder.decode(data)
        escape = chunk.rfind("\x1b", max(0, len(chunk) - 64))
        complete = escape < 0 or _ESCAPES.match(chunk, escape) is not None
        self._held, chunk = ("", chunk) if complete else (chunk[escape:], chunk[:escape])
        self._text.append(_ESCAPES.sub("", chunk))
        if len(self._text) > 64:
            self._text[:] = ["".join(self._text)]
        text = self.text
        for waiter in list(self._waiters):
            pattern, d = waiter
            found = pattern.search(text)
            if found:
                self._waiters.remove(waiter)
                d.callback(found)

    def processEnded(self, reason: Failure) -> None:
        self._text.append(_ESCAPES.sub("", self._held))
        self._held = ""
        if reason.check(ProcessDone):
            self.exit_code = 0
        elif reason.check(ProcessTerminated):
            self.exit_code = reason.value.exitCode
            self.exit_signal = reason.value.signal
        for _, d in self._waiters:
            d.errback(RuntimeError(f"{self.name} exited while waiting\n{self.tail()}"))
        self._waiters.clear()
        self.ended.callback(None)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> Deferred[re.Match[str]]:
        """The first match of ``pattern`` in the output (fires at once if already there)."""
        compiled = re.compile(pattern)
        d: Deferred[re.Match[str]] = Deferred()
        found = compiled.search(self.text)
        if found:
            d.callback(found)
            return d
        if self.ended.called:
            d.errback(RuntimeError(f"{self.name} had exited\n{self.tail()}"))
            return d
        self._waiters.append((compiled, d))
        d.addTimeout(timeout, self.reactor)
        return d

    def type(self, data: bytes) -> None:
        """Write ``data`` to its input (its terminal)."""
        assert self.transport is not None
        self.transport.write(data)

    def tail(self, limit: int = 4000) -> str:
        return f"--- {self.name} exit={self.exit_code}/{self.exit_signal}\n{self.text[-limit:]}"

    def stop(self, signal: str = "TERM") -> None:
        """Send ``signal`` now, KILL two seconds later if it is still running."""
        signal_then_kill(self.reactor, self.transport, self.ended, signal)


def signal_then_kill(reactor: Any, transport: Any, ended: Deferred[Any], signal: str) -> None:
    """Send ``signal`` to a spawned process that has not ``ended``; KILL it two seconds later
    if it has not ended by then."""
    if ended.called or transport is None:
        return
    try:
        transport.signalProcess(signal)
    except ProcessExitedAlready:
        return

    def kill() -> None:
        if not ended.called:
            with suppress(ProcessExitedAlready):
                transport.signalProcess("KILL")

    reactor.callLater(2.0, kill)
