"""
Test harness: the real magic-wormhole servers in-process, loopback confinement, and peer pairs.

Layer: test infrastructure (not shipped). Everything here listens on 127.0.0.1 only.

- ``start_mailbox_server`` / ``start_transit_relay`` run the REAL
  ``wormhole_mailbox_server`` / ``wormhole_transit_relay`` code in this process on a random (or
  given) loopback port. ``stop()`` closes the listening port and aborts every open connection,
  and its Deferred fires only once all of them are gone, so trial's reactor check stays clean.
  A mailbox server can be stopped and started again on the same port with the same channel
  database file (fault injection).
- ``stock_loopback()`` confines a STOCK magic-wormhole dilation peer to 127.0.0.1 (its address
  discovery and its direct-hint listener); ``loopback_env()`` is the environment that confines
  OUR implementation (``TXDILATION_LISTEN_INTERFACE`` / ``TXDILATION_HINT_ADDRESSES``).
- ``RealServersMixin`` gives a trial TestCase a fresh mailbox server and transit relay per test.
- ``run_peer_pair`` runs two ``tests.support.peer`` processes against each other and collects their
  JSON-line reports; it always ends both processes, within the timeout, before returning.
  ``PeerPair`` is the same with events and stdin commands while they run; a ``Placement``
  puts a peer elsewhere (inside a network namespace: ``tests.support.peers``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

LOOPBACK = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
SRC_DIR = REPO_ROOT / "src"

# ---------------------------------------------------------------------------------------------
# loopback confinement


def loopback_env() -> dict[str, str]:
    """
    The environment variables that keep txdilation's dilation listener and hints on loopback.

    :returns: a new dict; apply it with ``os.environ.update`` or pass it to a child process.
    """
    return {"TXDILATION_LISTEN_INTERFACE": LOOPBACK, "TXDILATION_HINT_ADDRESSES": LOOPBACK}


def apply_loopback_env() -> dict[str, str | None]:
    """
    Set ``loopback_env()`` in ``os.environ`` of this process.

    :returns: the previous values (``None`` for unset), for ``restore_env``.
    """
    previous = {name: os.environ.get(name) for name in loopback_env()}
    os.environ.update(loopback_env())
    return previous


def restore_env(previous: Mapping[str, str | None]) -> None:
    """Undo ``apply_loopback_env``: restore each variable to its previous value (or unset it)."""
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _loopback_addresses() -> list[str]:
    return [LOOPBACK]


@contextmanager
def stock_loopback() -> Iterator[None]:
    """
    Confine STOCK magic-wormhole's dilation connector to 127.0.0.1 while the block runs.

    Stock advertises the addresses from ``ipaddrs.find_addresses()`` and listens with
    ``serverFromString(reactor, "tcp:0")`` on all interfaces (``connector.py``). This patches
    exactly those two names as the connector module sees them: discovery returns only
    127.0.0.1 and the listener gets ``interface=127.0.0.1``.

    :raises RuntimeError: if ``wormhole._dilation.connector`` is not stock's (txdilation is
        installed): confine txdilation with ``loopback_env()`` instead.
    """
    from wormhole._dilation import connector

    stock_server_from_string = getattr(connector, "serverFromString", None)
    if stock_server_from_string is None or not connector.__name__.startswith("wormhole."):
        raise RuntimeError(
            "stock_loopback() patches stock magic-wormhole's connector, but "
            f"wormhole._dilation.connector is {connector.__name__!r} ({connector.__file__}); "
            "confine txdilation with loopback_env() instead"
        )

    def loopback_server_from_string(reactor: Any, description: str) -> Any:
        if description.startswith("tcp:") and "interface=" not in description:
            description += f":interface={LOOPBACK}"
        return stock_server_from_string(reactor, description)

    with (
        mock.patch.object(connector.ipaddrs, "find_addresses", _loopback_addresses),
        mock.patch.object(connector, "serverFromString", loopback_server_from_string),
    ):
        yield


# ---------------------------------------------------------------------------------------------
# real servers (shipped in txdilation.testing.servers, re-exported here)

from txdilation.testing.servers import (  # noqa: E402
    MailboxServer,
    TransitRelay,
    start_mailbox_server,
    start_transit_relay,
)


class RealServersMixin:
    """
    Mixin for ``twisted.trial.unittest.TestCase``: a fresh real mailbox server and transit
    relay for each test, both stopped by cleanups, and ``loopback_env()`` set in
    ``os.environ`` for the duration of the test.

    Put it before ``TestCase`` in the bases. Attributes: ``mailbox`` (``MailboxServer``),
    ``transit_relay`` (``TransitRelay``), ``reactor``.
    """

    mailbox: MailboxServer
    transit_relay: TransitRelay
    reactor: Any

    def setUp(self) -> Deferred[None]:
        from twisted.internet import reactor

        super().setUp()  # type: ignore[misc]
        self.reactor = reactor
        previous = apply_loopback_env()
        self.addCleanup(restore_env, previous)  # type: ignore[attr-defined]
        return Deferred.fromCoroutine(self._start_real_servers())

    async def _start_real_servers(self) -> None:
        self.mailbox = await start_mailbox_server(self.reactor)
        self.addCleanup(self.mailbox.stop)  # type: ignore[attr-defined]
        self.transit_relay = await start_transit_relay(self.reactor)
        self.addCleanup(self.transit_relay.stop)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# peer processes


class PeerFailure(AssertionError):
    """A peer process failed, timed out, or broke the JSON-lines protocol."""


@dataclass
class PeerResult:
    """
    What one ``tests.support.peer`` process reported.

    ``events`` holds every JSON object it printed, in order; ``result`` is the body of its
    ``{"event": "result", ...}`` line (``{}`` if none); ``exit_code`` is ``None`` if it was
    killed by a signal.
    """

    name: str
    events: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    stderr: bytes = b""

    @property
    def result(self) -> dict[str, Any]:
        """The last ``result`` event's body, without the ``event`` key."""
        for event in reversed(self.events):
            if event.get("event") == "result":
                return {k: v for k, v in event.items() if k != "event"}
        return {}

    def event(self, kind: str) -> dict[str, Any] | None:
        """The first event of this kind, or ``None``."""
        return next((e for e in self.events if e.get("event") == kind), None)

    def tail(self, limit: int = 4000) -> str:
        """The end of stderr and the last events, for failure messages."""
        text = self.stderr.decode("utf-8", "replace")[-limit:]
        events = "\n".join(json.dumps(e)[:300] for e in self.events[-8:])
        return (
            f"--- {self.name}: exit {self.exit_code}; last events:\n{events}\n"
            f"--- {self.name} stderr (tail):\n{text}"
        )


_STDERR_KEEP = 64 * 1024


class _PeerProcess(ProcessProtocol):
    """Collects one peer's JSON lines and stderr; fires ``ended`` when the process is gone."""

    def __init__(self, result: PeerResult, on_event: Any) -> None:
        self.result = result
        self._on_event = on_event
        self._stdout = bytearray()
        self._stderr = bytearray()
        self.ended: Deferred[None] = Deferred()
        self.running = False

    def connectionMade(self) -> None:
        self.running = True

    def outReceived(self, data: bytes) -> None:
        self._stdout += data
        while (newline := self._stdout.find(b"\n")) >= 0:
            line = bytes(self._stdout[:newline]).strip()
            del self._stdout[: newline + 1]
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "garbage", "line": line.decode("utf-8", "replace")}
            if not isinstance(event, dict):
                event = {"event": "garbage", "line": line.decode("utf-8", "replace")}
            self.result.events.append(event)
            self._on_event(self, event)

    def errReceived(self, data: bytes) -> None:
        self._stderr += data
        if len(self._stderr) > 2 * _STDERR_KEEP:
            del self._stderr[:-_STDERR_KEEP]

    def close_stdin(self) -> None:
        if self.running and self.transport is not None:
            self.transport.closeStdin()

    def write_stdin(self, data: bytes) -> None:
        if self.running and self.transport is not None:
            self.transport.write(data)

    def kill(self) -> None:
        if self.running and self.transport is not None:
            with suppress(ProcessExitedAlready):  # gone between the check and the signal
                self.transport.signalProcess("KILL")

    def processEnded(self, reason: Failure) -> None:
        self.running = False
        self.result.stderr = bytes(self._stderr[-_STDERR_KEEP:])
        if reason.check(ProcessDone):
            self.result.exit_code = 0
        elif reason.check(ProcessTerminated):
            self.result.exit_code = reason.value.exitCode
        self.ended.callback(None)


def peer_environment() -> dict[str, str]:
    """
    The environment for a ``tests.support.peer`` child: this process's, plus ``src`` and the repo
    root on ``PYTHONPATH``, ``loopback_env()``, and unbuffered output.
    """
    env = dict(os.environ)
    paths = [str(SRC_DIR), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(loopback_env())
    return env


@dataclass(frozen=True)
class Placement:
    """
    Where a peer process runs. The default is here, confined to loopback.

    ``prefix`` goes before the Python command line (``tests.support.netns.Node.exec_argv([])``
    runs it inside a network namespace), ``env`` replaces ``peer_environment()``, and
    ``extra_args`` are added to the peer's arguments (``--no-loopback`` in a namespace).
    """

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    extra_args: tuple[str, ...] = ()


HERE = Placement()


def _spawn_peer(
    reactor: Any, name: str, argv: Sequence[str], on_event: Any, placement: Placement = HERE
) -> _PeerProcess:
    proto = _PeerProcess(PeerResult(name=name), on_event)
    args = [
        *placement.prefix,
        sys.executable,
        "-m",
        "tests.support.peer",
        *argv,
        *placement.extra_args,
    ]
    env = dict(placement.env) if placement.env is not None else peer_environment()
    reactor.spawnProcess(proto, args[0], args, env=env, path=str(REPO_ROOT))
    return proto


class PeerPair:
    """
    Two ``python -m tests.support.peer`` processes run against each other through a mailbox server.

    The left peer allocates a code (``--allocate``); once it reports ``{"event": "code"}`` the
    right peer starts with ``--code``. Given a ``code``, both start at once with it (the
    nameplate must be free). When one peer exits, the other's stdin is closed
    (scenarios may treat EOF as "the other peer has finished"). Each peer also gets
    ``--timeout`` (``timeout`` minus a margin) unless its args already have one; both are
    killed at ``timeout``. While they run, ``when()`` waits for an event and ``send()`` writes a
    command to a peer's stdin; ``finish()`` waits for both to end and checks them.

    :param reactor: a reactor providing ``IReactorProcess`` and ``IReactorTime``.
    :param mailbox_url: the mailbox server's websocket URL.
    :param left_args: the left peer's other arguments (``--impl``, ``--scenario``, ...).
    :param right_args: the right peer's other arguments.
    :param timeout: seconds after which both peers are killed.
    :param appid: the wormhole application id both peers use.
    :param left: where the left peer runs (``Placement``); ``right`` likewise.
    :param code: a code both peers set (instead of the left's allocating one).
    """

    def __init__(
        self,
        reactor: Any,
        mailbox_url: str,
        left_args: Sequence[str],
        right_args: Sequence[str],
        timeout: float = 30.0,
        *,
        appid: str = "lothar.com/txdilation/test",
        left: Placement = HERE,
        right: Placement = HERE,
        code: str | None = None,
    ) -> None:
        self._reactor = reactor
        self.timeout = timeout
        peer_timeout = f"{max(timeout - 5.0, timeout * 0.8):.1f}"
        common = ["--mailbox", mailbox_url, "--appid", appid]

        def argv(args: Sequence[str], *code: str) -> list[str]:
            bounded = [*args] if "--timeout" in args else [*args, "--timeout", peer_timeout]
            return [*common, *code, *bounded]

        self._code = code
        left_code = ("--code", code) if code is not None else ("--allocate",)
        self._argv = {"left": argv(left_args, *left_code), "right": argv(right_args)}
        self._placement = {"left": left, "right": right}
        self.procs: dict[str, _PeerProcess] = {}
        self.problems: list[str] = []
        self._waiters: list[tuple[str, str, Any, Deferred[dict[str, Any]]]] = []
        self._timer: Any = None

    def start(self) -> PeerPair:
        """Start the left peer (the right one follows its code) and the kill timer."""
        self._spawn("left", self._argv["left"])
        self.procs["left"].ended.addCallback(lambda _: self._close_stdin("right"))
        if self._code is not None:
            self._spawn_right(self._code)
        self._timer = self._reactor.callLater(self.timeout, self._timed_out)
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.procs[name] = _spawn_peer(
            self._reactor, name, argv, self._on_event, self._placement[name]
        )

    def _close_stdin(self, name: str) -> None:
        if name in self.procs:
            self.procs[name].close_stdin()

    def _on_event(self, proc: _PeerProcess, event: dict[str, Any]) -> None:
        name = proc.result.name
        if event.get("event") == "code" and name == "left" and "right" not in self.procs:
            self._spawn_right(str(event.get("code")))
        for waiter in list(self._waiters):
            side, kind, predicate, d = waiter
            if side == name and event.get("event") == kind and predicate(event):
                self._waiters.remove(waiter)
                d.callback(event)

    def _spawn_right(self, code: str) -> None:
        self._spawn("right", [*self._argv["right"], "--code", code])
        self.procs["right"].ended.addCallback(lambda _: self._close_stdin("left"))

    def when(self, side: str, kind: str, predicate: Any = None) -> Deferred[dict[str, Any]]:
        """
        The first event of ``kind`` from peer ``side`` (``"left"``/``"right"``) for which
        ``predicate(event)`` is true, whether it came already or comes later. Never fires if
        it never comes: bound it (``addTimeout``) or race it with ``ended()``.
        """
        test = predicate or (lambda event: True)
        d: Deferred[dict[str, Any]] = Deferred()
        if side in self.procs:
            for event in self.procs[side].result.events:
                if event.get("event") == kind and test(event):
                    d.callback(event)
                    return d
        self._waiters.append((side, kind, test, d))
        return d

    def send(self, side: str, command: Mapping[str, Any]) -> None:
        """Write one JSON command line to a running peer's stdin (ignored once it ended)."""
        proc = self.procs.get(side)
        if proc is not None:
            proc.write_stdin(json.dumps(dict(command)).encode() + b"\n")

    def kill(self) -> None:
        """SIGKILL both peers (if still running)."""
        for proc in list(self.procs.values()):
            proc.kill()

    def _timed_out(self) -> None:
        self.problems.append(f"timed out after {self.timeout} s")
        self.kill()

    async def ended(self) -> None:
        """Wait until every peer that was started has exited (the kill timer bounds it)."""
        try:
            await self.procs["left"].ended
            if "right" in self.procs:
                await self.procs["right"].ended
        finally:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self.kill()  # only reached early if cancelled
            await DeferredList([p.ended for p in self.procs.values()])

    @property
    def results(self) -> tuple[PeerResult, PeerResult]:
        """What each peer reported so far (the right one empty if it never started)."""
        right = self.procs["right"].result if "right" in self.procs else PeerResult(name="right")
        return self.procs["left"].result, right

    async def finish(self) -> tuple[PeerResult, PeerResult]:
        """
        Wait for both peers to end.

        :returns: ``(left, right)`` results, both peers having exited with status 0.
        :raises PeerFailure: on timeout, a non-zero exit, or an ``error`` event, with both
            peers' stderr tails and last events in the message.
        """
        await self.ended()
        left_result, right_result = self.results
        problems = list(self.problems)
        if "right" not in self.procs:
            problems.append("the left peer never reported a code, so the right peer never started")
        for peer in (left_result, right_result):
            if peer is right_result and "right" not in self.procs:
                continue
            if peer.exit_code != 0:
                problems.append(f"{peer.name} exited with {peer.exit_code}")
            error = peer.event("error")
            if error is not None:
                problems.append(f"{peer.name} reported an error: {error.get('error')}")
        if problems:
            raise PeerFailure(
                "; ".join(problems) + "\n" + left_result.tail() + "\n" + right_result.tail()
            )
        return left_result, right_result


async def run_peer_pair(
    reactor: Any,
    mailbox_url: str,
    left_args: Sequence[str],
    right_args: Sequence[str],
    timeout: float = 30.0,
    *,
    appid: str = "lothar.com/txdilation/test",
    left: Placement = HERE,
    right: Placement = HERE,
) -> tuple[PeerResult, PeerResult]:
    """
    Run two ``python -m tests.support.peer`` processes against each other through ``mailbox_url``
    until both end (``PeerPair``, which documents the parameters).

    :returns: ``(left, right)`` results, both peers having exited with status 0.
    :raises PeerFailure: on timeout, a non-zero exit, or an ``error`` event, with both peers'
        stderr tails and last events in the message.
    """
    pair = PeerPair(
        reactor, mailbox_url, left_args, right_args, timeout, appid=appid, left=left, right=right
    )
    return await pair.start().finish()
