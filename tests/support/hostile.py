"""
Helpers for the hostile-input, security and memory tests: a hand-driven L2 endpoint, an
in-memory mailbox, raw TCP attack clients, process memory, and the figures file.

Layer: test infrastructure (not shipped). Everything here talks to 127.0.0.1 only and closes
what it opened.

- ``RawL2``: one L2 connection driven by hand with txdilation's own ``Framer`` and
  ``NoiseSession``: it can play an authenticated (or a key-less) Leader or Follower and send any
  record, any plaintext or any frame, well-formed or not.
- ``Mailbox``: two Dilators' DILATE-n messages delivered in memory, with the
  ``connection-hints`` held back until released (to attack a listener before the peer uses it).
- ``RogueMailbox``: the mailbox of ONE real Dilator whose peer is played by a test.
- ``Attacker``: a raw TCP client that sends fixed bytes and notes when the server closed.
- ``vm_status_kib`` reads ``/proc/PID/status``; ``record_figures`` stores a test's figures in
  the file named by ``TXDILATION_FIGURES`` (see ``tests.support.figures``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Cooperator
from twisted.logger import formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from wormhole._interfaces import ISend
from zope.interface import implementer

from tests.mailbox.test_manager import RecordingTerminator
from tests.support.harness import loopback_env, restore_env
from txdilation._stock.manager import Dilator
from txdilation.link.framer import Frame, Framer, PrologueReceived
from txdilation.link.noise import NoiseSession
from txdilation.wire.dilation_errors import DilationProtocolError
from txdilation.wire.keys import derive_dilation_key
from txdilation.wire.records import KCM, Ping, Pong, Record, encode_record, parse_record
from txdilation.wire.roles import FOLLOWER, LEADER, Role

reactor: Any = _reactor

#: A side lower / higher than any real one (16 hex digits): the peer of a rogue Follower (side
#: LOWEST) is the Leader, the peer of a rogue Leader (side HIGHEST) is the Follower.
LOWEST_SIDE = "0" * 16
HIGHEST_SIDE = "f" * 16


# ---------------------------------------------------------------------------------------------
# environment and waiting


@contextmanager
def environment(**extra: str) -> Iterator[None]:
    """Set ``loopback_env()`` plus ``extra`` (``TXDILATION_*`` names) in ``os.environ``."""
    values = {**loopback_env(), **extra}
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        restore_env(previous)


def use_environment(test: Any, **extra: str) -> None:
    """``environment(**extra)`` for the rest of a TestCase's test (undone by a cleanup)."""
    context = environment(**extra)
    context.__enter__()
    test.addCleanup(context.__exit__, None, None, None)


# ---------------------------------------------------------------------------------------------
# mailboxes


def new_dilator(send: ISend) -> tuple[Dilator, RecordingTerminator]:
    """A Dilator wired to ``send`` and a fresh RecordingTerminator, on the global reactor."""
    terminator = RecordingTerminator()
    dilator = Dilator(reactor, None, Cooperator(), ["ged"])
    dilator.wire(send, terminator)
    return dilator, terminator


def hint_ports(bodies: list[dict[str, Any]]) -> list[int]:
    """The ports of the direct hints in these ``connection-hints`` bodies."""
    return [
        h["port"]
        for body in bodies
        if body.get("type") == "connection-hints"
        for h in body["hints"]
        if h.get("type") == "direct-tcp-v1"
    ]


@implementer(ISend)
class _Pipe:
    def __init__(self, mailbox: Mailbox, index: int) -> None:
        self._mailbox = mailbox
        self._index = index
        self.sent: list[dict[str, Any]] = []

    def send(self, phase: str, plaintext: bytes) -> None:
        assert phase == f"dilate-{len(self.sent)}", (phase, len(self.sent))
        self.sent.append(json.loads(plaintext))
        self._mailbox.deliver(1 - self._index, plaintext)


#: What a hint rule is given (the sender's index and the body) and returns: the body to deliver
#: (perhaps rewritten), or None to withhold it (kept in ``Mailbox.withheld``).
HintRule = Callable[[int, dict[str, Any]], "dict[str, Any] | None"]


class Mailbox:
    """Two Dilators exchanging DILATE-n bodies in memory, in order.

    While ``holding`` is true, each side's messages from its first ``connection-hints`` on are
    held (in order) until :meth:`release`: both listeners are up and advertised to the test,
    but neither peer has connected yet. A ``hint_rule`` may rewrite or withhold each
    ``connection-hints`` body instead (roles are known by the time hints are sent).
    """

    def __init__(self, *, holding: bool = False) -> None:
        self.holding = holding
        self.hint_rule: HintRule | None = None
        self.withheld: list[tuple[int, dict[str, Any]]] = []  # (to, body)
        self.pipes = (_Pipe(self, 0), _Pipe(self, 1))
        self.held: tuple[list[bytes], list[bytes]] = ([], [])
        made = [new_dilator(pipe) for pipe in self.pipes]
        self.dilators = [d for d, _ in made]
        self.terminators = [t for _, t in made]

    def deliver(self, to: int, plaintext: bytes) -> None:
        held = self.held[to]
        is_hints = json.loads(plaintext).get("type") == "connection-hints"
        if self.holding and (held or is_hints):
            held.append(plaintext)
            return
        if is_hints and self.hint_rule is not None:
            body = self.hint_rule(1 - to, json.loads(plaintext))
            if body is None:
                self.withheld.append((to, json.loads(plaintext)))
                return
            plaintext = json.dumps(body).encode("utf-8")
        self.dilators[to].received_dilate(plaintext)

    def deliver_withheld(self) -> None:
        """Deliver the withheld hints now (as they were sent)."""
        withheld, self.withheld = self.withheld, []
        for to, body in withheld:
            self.dilators[to].received_dilate(json.dumps(body).encode("utf-8"))

    def index_of(self, role: Role) -> int:
        """Which side has ``role``."""
        return 0 if self.role(0) is role else 1

    def release(self) -> None:
        """Deliver everything held, and stop holding."""
        self.holding = False
        for to, held in enumerate(self.held):
            while held:
                self.dilators[to].received_dilate(held.pop(0))

    def dilate(self, **kwargs: Any) -> list[Any]:
        """Give both Dilators one key and versions, call ``dilate(**kwargs)``; the APIs."""
        master = os.urandom(32)
        apis = []
        for d in self.dilators:
            d.got_key(master)
            d.got_wormhole_versions({"can-dilate": ["ged"]})
            apis.append(d.dilate(**kwargs))
        return apis

    def ports(self, index: int) -> list[int]:
        """The direct-hint ports side ``index`` advertised so far."""
        return hint_ports(self.pipes[index].sent)

    def role(self, index: int) -> Role | None:
        manager = self.dilators[index]._manager
        return None if manager is None else manager.role

    async def stop(self) -> None:
        """Stop both Dilators and wait until both report stopped."""
        for d in self.dilators:
            d.stop()
        for t in self.terminators:
            await t.stopped


@implementer(ISend)
class RogueMailbox:
    """The mailbox of one real Dilator whose peer is a test (a rogue Leader or Follower).

    ``sent`` holds the Dilator's DILATE-n bodies; :meth:`tell` delivers one body to it.
    """

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.master_key = os.urandom(32)
        self.dilation_key = derive_dilation_key(self.master_key)
        self.dilator, self.terminator = new_dilator(self)

    def send(self, phase: str, plaintext: bytes) -> None:
        assert phase == f"dilate-{len(self.sent)}", (phase, len(self.sent))
        self.sent.append(json.loads(plaintext))

    def tell(self, **body: Any) -> None:
        """Deliver one DILATE-n body (keyword arguments; ``use_version`` means ``use-version``)."""
        if "use_version" in body:
            body["use-version"] = body.pop("use_version")
        self.dilator.received_dilate(json.dumps(body).encode("utf-8"))

    def count(self, kind: str) -> int:
        return sum(1 for body in self.sent if body.get("type") == kind)

    def ports(self) -> list[int]:
        return hint_ports(self.sent)

    def start(self, rogue_side: str, **dilate_kwargs: Any) -> Any:
        """Key, versions, ``dilate()``, and the rogue's ``please`` from ``rogue_side``."""
        d = self.dilator
        d.got_key(self.master_key)
        d.got_wormhole_versions({"can-dilate": ["ged"]})
        api = d.dilate(**dilate_kwargs)
        self.tell(type="please", side=rogue_side, use_version="ged")
        return api

    async def stop(self) -> None:
        self.dilator.stop()
        await self.terminator.stopped


# ---------------------------------------------------------------------------------------------
# raw connections


class RawL2(Protocol):
    """One L2 connection driven by hand: prologue, Noise and records with txdilation's own
    ``Framer`` and ``NoiseSession``, plus raw frames and plaintexts for malformed input.

    As a Follower it sends its KCM right after the handshake (unless ``auto_kcm`` is false); it
    answers PINGs (``auto_pong``). What arrives is parsed into ``records``; a failure to parse
    or decrypt is kept in ``error`` (and the connection is closed), never raised into the
    reactor.
    """

    def __init__(
        self, role: Role, dilation_key: bytes, *, auto_kcm: bool = True, auto_pong: bool = True
    ) -> None:
        self.role = role
        self.framer = Framer(role)
        self.noise = NoiseSession(role, dilation_key)
        self.auto_kcm = auto_kcm
        self.auto_pong = auto_pong
        self.records: list[Record] = []
        self.raw = bytearray()
        self.error: DilationProtocolError | None = None
        self.handshaken: Deferred[RawL2] = Deferred()
        self.closed: Deferred[None] = Deferred()
        self.local_port = 0
        self._waiters: list[tuple[Callable[[Record], bool], Deferred[Record]]] = []

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.local_port = self.transport.getHost().port  # type: ignore[attr-defined]
        self.transport.write(self.framer.our_prologue)

    def dataReceived(self, data: bytes) -> None:
        self.raw += data
        if self.error is not None:
            return
        try:
            self.framer.receive_data(data)
            while (event := self.framer.next_event()) is not None:
                if isinstance(event, PrologueReceived):
                    message = self.noise.start()
                    if message is not None:
                        self.send_frame(message)
                elif isinstance(event, Frame):
                    self._frame(event.payload)
        except DilationProtocolError as e:
            self.error = e
            self.abort()

    def _frame(self, payload: bytes) -> None:
        if not self.noise.handshake_complete:
            reply = self.noise.receive_handshake(payload)
            if reply is not None:
                self.send_frame(reply)
            self.framer.set_max_frame_size(2**32)
            if self.role is FOLLOWER and self.auto_kcm:
                self.send_record(KCM())
            self.handshaken.callback(self)
            return
        record = parse_record(self.noise.decrypt(payload))
        self.records.append(record)
        if self.auto_pong and isinstance(record, Ping):
            self.send_record(Pong(record.ping_id))
        for waiter in list(self._waiters):
            predicate, d = waiter
            if predicate(record):
                self._waiters.remove(waiter)
                d.callback(record)

    def wait_for(self, predicate: Callable[[Record], bool]) -> Deferred[Record]:
        """Fires with the first record (already received or later) that matches."""
        for record in self.records:
            if predicate(record):
                d: Deferred[Record] = Deferred()
                d.callback(record)
                return d
        d = Deferred()
        self._waiters.append((predicate, d))
        return d

    def send_frame(self, payload: bytes) -> None:
        """One length-prefixed frame, as is."""
        if self.transport is not None:
            self.transport.writeSequence(Framer.frame(payload))

    def send_plaintext(self, plaintext: bytes) -> None:
        """Encrypt ``plaintext`` (any bytes, not necessarily a valid record) into one frame."""
        self.send_frame(self.noise.encrypt(plaintext))

    def send_record(self, record: Record) -> None:
        self.send_plaintext(encode_record(record))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abortConnection()

    def connectionLost(self, reason: Failure | None = None) -> None:
        for _, d in self._waiters:
            d.errback(AssertionError(f"connection closed while waiting ({self.error})"))
        self._waiters.clear()
        self.closed.callback(None)


async def connect_raw(port: int, protocol: Protocol) -> Protocol:
    """Connect ``protocol`` to 127.0.0.1:``port``; the connected protocol."""
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=5)
    connected: Protocol = await connectProtocol(endpoint, protocol)
    return connected


async def rogue_connection(
    mailbox: RogueMailbox, role: Role, port: int | None = None, **kwargs: Any
) -> RawL2:
    """A RawL2 connected to the real Dilator's listener and through the Noise handshake."""
    if port is None:
        port = mailbox.ports()[-1]
    raw = RawL2(role, mailbox.dilation_key, **kwargs)
    await connect_raw(port, raw)
    await raw.handshaken
    return raw


async def rogue_follower_selected(mailbox: RogueMailbox, port: int | None = None) -> RawL2:
    """A rogue Follower connection the real Leader selected (its KCM arrived)."""
    raw = await rogue_connection(mailbox, FOLLOWER, port)
    await raw.wait_for(lambda r: isinstance(r, KCM))
    return raw


class Attacker(Protocol):
    """A raw client: sends ``payload`` on connect and notes when the server closed on it."""

    def __init__(self, payload: bytes = b"") -> None:
        self.payload = payload
        self.received = bytearray()
        self.sent_at: float | None = None
        self.closed_at: float | None = None
        self.closed: Deferred[None] = Deferred()
        self.local_port = 0

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.local_port = self.transport.getHost().port  # type: ignore[attr-defined]
        if self.payload:
            self.transport.write(self.payload)
        self.sent_at = time.monotonic()

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.closed_at = time.monotonic()
        self.closed.callback(None)

    @property
    def open(self) -> bool:
        return self.closed_at is None

    def close(self) -> None:
        if self.open and self.transport is not None:
            self.transport.abortConnection()


# ---------------------------------------------------------------------------------------------
# logs


class LogCapture:
    """Collects the log events of txdilation's namespaces while a test runs."""

    def __init__(self, test: Any) -> None:
        self.events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self)
        test.addCleanup(globalLogPublisher.removeObserver, self)

    def __call__(self, event: dict[str, Any]) -> None:
        if str(event.get("log_namespace", "")).startswith("txdilation"):
            self.events.append(event)

    def texts(self) -> list[str]:
        """Every event, formatted."""
        return [formatEvent(e) for e in self.events]

    def drop_reasons(self) -> dict[int, str]:
        """Why the L2 layer dropped each accepted connection, by the client's port."""
        reasons = {}
        for event in self.events:
            desc = str(event.get("desc", ""))
            if event.get("log_namespace") == "txdilation.link.connection" and desc.startswith(
                "<-tcp:"
            ):
                reasons[int(desc.rsplit(":", 1)[1])] = str(event.get("reason"))
        return reasons


# ---------------------------------------------------------------------------------------------
# memory and figures


def vm_status_kib(field: str, pid: int | str = "self") -> int:
    """One ``/proc/PID/status`` figure in KiB (e.g. ``VmRSS``, ``VmHWM``).

    :raises KeyError: when the field is missing (not Linux).
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise KeyError(field)


def record_figures(test: Any, pairing: str = "all", **figures: float) -> None:
    """Record ``figures`` for ``test`` (its id keys the record) with
    ``tests.support.figures.record``.

    Nothing is written unless ``TXDILATION_FIGURES`` names the figures file (so an ordinary run
    never even imports the figures module).
    """
    if not os.environ.get("TXDILATION_FIGURES", "").strip():
        return
    from tests.support import figures as figures_file

    figures_file.record(test.id(), pairing, **figures)


__all__ = [
    "HIGHEST_SIDE",
    "LEADER",
    "LOWEST_SIDE",
    "Attacker",
    "LogCapture",
    "Mailbox",
    "RawL2",
    "RogueMailbox",
    "connect_raw",
    "environment",
    "record_figures",
    "rogue_connection",
    "rogue_follower_selected",
    "use_environment",
    "vm_status_kib",
]
