"""
Driving real ``fowld`` processes (fowl's JSON-lines daemon, ``python -m fowl``) in tests.

Layer: test infrastructure. :class:`Fowld` starts one fowld with stock magic-wormhole or, as a
user would, under ``txdilation exec`` (its ``--proof`` and ``--events`` files kept), confined
to loopback
(``tests/support/site``: the transit relay fowl hard-codes is replaced by the test's own, stock
is kept on 127.0.0.1), sends it commands and waits for its messages. :func:`cut_links` aborts
a process's dilated TCP connections from outside (``ss -K``), as a network failure would.

Invariants: every wait is bounded; :meth:`Fowld.stop` ends the process (TERM, then KILL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from tests.support.apps import signal_then_kill
from tests.support.execs import exec_prefix
from tests.support.harness import REPO_ROOT, SRC_DIR

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


def fowld_environment(impl: str, relay: str) -> dict[str, str]:
    """The environment of a fowld child: loopback-confined (txdilation's settings too), the
    test's relay instead of the public one; ``txdilation exec`` adds the rest."""
    env = dict(os.environ)
    paths = [SITE_DIR, str(SRC_DIR), str(REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    env["TXDILATION_TEST_TRANSIT_RELAY"] = relay
    for name in ("TXDILATION_DROPIN", "TXDILATION_DROPIN_PROOF", "TXDILATION_EVENTS"):
        env.pop(name, None)
    if impl == "txdilation":
        env["TXDILATION_LISTEN_INTERFACE"] = "127.0.0.1"
        env["TXDILATION_HINT_ADDRESSES"] = "127.0.0.1"
    return env


_BYTES = ("bytes-in", "bytes-out")


class Fowld(ProcessProtocol):
    """One fowld process: its JSON messages, its stderr, its exit."""

    def __init__(self, reactor: Any, name: str, impl: str) -> None:
        self.reactor = reactor
        self.name = name
        self.impl = impl
        self.messages: list[dict[str, Any]] = []
        self.stderr = bytearray()
        self.stdout_text = bytearray()
        self.ended: Deferred[int | None] = Deferred()
        self.exit_code: int | None = None
        self.pid: int | None = None
        self.proof: str | None = None
        self.events: str | None = None
        self._buffer = bytearray()
        self._waiters: list[tuple[str, Deferred[dict[str, Any]]]] = []

    @classmethod
    def start(
        cls, reactor: Any, name: str, impl: str, mailbox: str, relay: str, scratch: str = ""
    ) -> Fowld:
        """``python -m fowl``: as it is (``impl`` "stock"), or under ``txdilation exec
        --proof SCRATCH/NAME.proof --events SCRATCH/NAME.events`` ("txdilation")."""
        proto = cls(reactor, name, impl)
        args = [sys.executable, "-m", "fowl", "--mailbox", mailbox]
        if impl == "txdilation":
            proto.proof = os.path.join(scratch, f"{name}.proof")
            proto.events = os.path.join(scratch, f"{name}.events")
            args = [*exec_prefix(proto.proof, "--events", proto.events), *args]
        env = fowld_environment(impl, relay)
        transport = reactor.spawnProcess(proto, args[0], args, env=env, path=str(REPO_ROOT))
        proto.pid = transport.pid
        return proto

    # --- ProcessProtocol ---

    def outReceived(self, data: bytes) -> None:
        self.stdout_text += data
        self._buffer += data
        while (newline := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:newline]).strip()
            del self._buffer[: newline + 1]
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                self.messages.append(message)
                for waiter in list(self._waiters):
                    kind, d = waiter
                    if message.get("kind") == kind:
                        self._waiters.remove(waiter)
                        d.callback(message)

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Failure) -> None:
        if reason.check(ProcessDone):
            self.exit_code = 0
        elif reason.check(ProcessTerminated):
            self.exit_code = reason.value.exitCode
        for _, d in self._waiters:
            d.errback(RuntimeError(f"{self.name} exited while waiting\n{self.tail()}"))
        self._waiters.clear()
        self.ended.callback(self.exit_code)

    # --- driving ---

    def send(self, **command: Any) -> None:
        assert self.transport is not None
        self.transport.write(json.dumps(command).encode() + b"\n")

    def next_message(self, kind: str, timeout: float = 30.0) -> Deferred[dict[str, Any]]:
        """The first message of ``kind`` not consumed yet (fires at once if already here)."""
        for message in self.messages:
            if message.get("kind") == kind and not message.get("_seen"):
                message["_seen"] = True
                d: Deferred[dict[str, Any]] = Deferred()
                d.callback(message)
                return d
        d = Deferred()
        self._waiters.append((kind, d))

        def seen(message: dict[str, Any]) -> dict[str, Any]:
            message["_seen"] = True
            return message

        d.addCallback(seen)
        d.addTimeout(timeout, self.reactor)
        return d

    def kinds(self) -> list[str]:
        """The kinds of the messages so far, without the many ``bytes-in``/``bytes-out``."""
        return [str(m.get("kind")) for m in self.messages if m.get("kind") not in _BYTES]

    def errors(self) -> list[str]:
        return [str(m.get("message")) for m in self.messages if m.get("kind") == "error"]

    def tail(self, limit: int = 3000) -> str:
        return (
            f"--- {self.name} ({self.impl}) exit={self.exit_code} kinds={self.kinds()}\n"
            f"errors={self.errors()}\n" + self.stderr.decode("utf-8", "replace")[-limit:]
        )

    def stop(self) -> None:
        """TERM now, KILL two seconds later if it is still running."""
        signal_then_kill(self.reactor, self.transport, self.ended, "TERM")


def tcp_connections(pid: int) -> list[tuple[int, int]]:
    """(local port, peer port) of the established TCP connections of process ``pid``."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()  # Recv-Q Send-Q Local:Port Peer:Port users:((...,pid=N,...))
        if len(parts) >= 5 and f"pid={pid}," in line:
            local, peer = parts[2], parts[3]
            found.append((int(local.rsplit(":", 1)[1]), int(peer.rsplit(":", 1)[1])))
    return found


def cut_links(pid: int, keep_ports: Iterable[int]) -> list[tuple[int, int]]:
    """Abort (``ss -K``, both ends) process ``pid``'s TCP connections whose ports are not in
    ``keep_ports`` (the mailbox, the forwarded service): its dilated link. Returns them."""
    keep = set(keep_ports)
    cut = []
    for local, peer in tcp_connections(pid):
        if local in keep or peer in keep:
            continue
        for a, b in ((local, peer), (peer, local)):
            subprocess.run(
                ["ss", "-K", "-tn", "sport", "=", f":{a}", "dport", "=", f":{b}"],
                capture_output=True,
                check=False,
            )
        cut.append((local, peer))
    return cut
