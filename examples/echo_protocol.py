"""An echo service and its client, line by line: the protocols the other examples run over a
subchannel of a dilated wormhole (and ``test_echo.py`` tests in memory).

Nothing here knows about Dilation: a subchannel is an ordinary Twisted transport, so these
are ordinary ``LineReceiver`` protocols, usable over TCP as well. (:func:`in_one_line`, for the
examples' command lines, says why a wormhole failed in one line instead of a traceback, and
:class:`OneLineParser` says what was wrong with the arguments in one line.)
"""

from __future__ import annotations

import argparse
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure


class EchoServer(LineReceiver):
    """Answers every line with ``echo: <line>``; ``bye`` ends the conversation."""

    def lineReceived(self, line: bytes) -> None:
        if line == b"bye":
            self.sendLine(b"bye")
            self.transport.loseConnection()  # type: ignore[union-attr]
        else:
            self.sendLine(b"echo: " + line)


class EchoClient(LineReceiver):
    """Sends ``messages`` one at a time (the next once the previous is echoed), then ``bye``.

    :ivar replies: the lines received, in order.
    :ivar done: fires with ``replies`` once the server said ``bye`` and the connection is
        closed; fails if it is lost before.
    """

    def __init__(self, messages: list[bytes]) -> None:
        self._waiting = list(messages)
        self.replies: list[bytes] = []
        self.done: Deferred[list[bytes]] = Deferred()

    def connectionMade(self) -> None:
        self._next()

    def _next(self) -> None:
        self.sendLine(self._waiting.pop(0) if self._waiting else b"bye")

    def lineReceived(self, line: bytes) -> None:
        self.replies.append(line)
        if line != b"bye":
            self._next()

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self.done.called:
            return
        if self.replies[-1:] == [b"bye"]:
            self.done.callback(self.replies)
        else:
            self.done.errback(reason or Failure(ConnectionError("lost before 'bye'")))


def server_factory() -> Factory:
    """A factory of :class:`EchoServer`."""
    return Factory.forProtocol(EchoServer)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is ONE line (not the usage text first), exit status 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def in_one_line(program: str) -> Any:
    """An errback for a command's main Deferred: a failure is ONE line on stderr saying what
    went wrong and what to do (``txdilation.endpoints.in_words``), and exit status 1."""
    from txdilation.endpoints import in_words

    def explain(failure: Failure) -> Failure:
        if failure.check(SystemExit):  # argparse's usage errors are already one line
            return failure
        raise SystemExit(f"{program}: {in_words(failure, mailbox_setting='--mailbox')}")

    return explain
