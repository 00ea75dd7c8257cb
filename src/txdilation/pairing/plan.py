"""What one lobby message means to this process: the planner (no I/O).

Layer: pairing core. A :class:`Planner` belongs to one process (one incarnation of one side).
It numbers this process's lobby messages (:mod:`.hello`) and classifies every message heard as
one of :class:`Heard` (``OWN``, ``OLD``, ``COPY``, ``PEER``, ``IGNORED``; the peer's processes
kept in :attr:`processes`), and it chooses the generation to meet on: the newest this side
holds that the peer's process holds too. Counters order one sender's processes, but never
outrank a generation: a copy of an old file with a huge counter gets no preference.

Invariants: memory is bounded (:data:`MAX_PROCESSES` peer processes, :data:`MAX_SEEN` messages
remembered); a message is :attr:`Heard.PEER` at most once.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from txdilation.pairing.hello import Hello, new_nonce

__all__ = ["MAX_PROCESSES", "MAX_SEEN", "Heard", "PeerProcess", "Planner"]

MAX_PROCESSES = 16
MAX_SEEN = 512


class Heard(enum.Enum):
    """What one lobby message meant."""

    OWN = "own"
    OLD = "old"
    COPY = "copy"
    PEER = "peer"
    IGNORED = "ignored"


@dataclass
class PeerProcess:
    """One process of the peer, as its lobby messages tell it."""

    nonce: str
    counter: int
    holds: tuple[str, ...] = ()


class Planner:
    """See the module docstring.

    :param me: this side's pairing id; ``peer``: the peer's.
    :param counter: this incarnation's number (from the pairing file, already advanced).
    :param nonce: this process's nonce (default: a new one).
    """

    def __init__(self, me: bytes, peer: bytes, counter: int, nonce: str | None = None) -> None:
        self.me = me
        self.peer = peer
        self.counter = counter
        self.nonce = nonce if nonce is not None else new_nonce()
        self._seq = 0
        self._posted: set[int] = set()
        self._nonces = {self.nonce}
        self.processes: OrderedDict[str, PeerProcess] = OrderedDict()
        self.impostors: OrderedDict[str, None] = OrderedDict()
        self._seen: OrderedDict[tuple[bytes, str, int], None] = OrderedDict()

    def renew_nonce(self) -> str:
        """Go on with a new nonce (a responder whose meeting failed: the initiator offers to
        the new one at once)."""
        self.nonce = new_nonce()
        self._nonces.add(self.nonce)
        return self.nonce

    def _next(self) -> int:
        self._seq += 1
        self._posted.add(self._seq)
        return self._seq

    def hello(self, holds: Sequence[str]) -> Hello:
        """This process's next hello, saying it holds ``holds`` (fingerprints, newest first)."""
        return Hello(self.me, self.counter, self._next(), self.nonce, tuple(holds))

    def directed(self, kind: str, to: str, generation: str, offer: int, noise: bytes) -> Hello:
        """This process's next offer or answer (``kind``) to the peer's process ``to``."""
        return Hello(
            self.me, self.counter, self._next(), self.nonce, (), kind, to, generation, offer, noise
        )

    def heard(self, message: Hello) -> Heard:
        """Classify one message (what each :class:`Heard` means: docs/module-notes.md)."""
        key = (message.sender, message.nonce, message.seq)
        if key in self._seen:
            return Heard.OWN
        self._seen[key] = None
        while len(self._seen) > MAX_SEEN:
            self._seen.popitem(last=False)
        if message.sender == self.me:
            if message.nonce in self._nonces:
                return Heard.OWN if message.seq in self._posted else Heard.COPY
            return Heard.OLD if message.counter < self.counter else Heard.COPY
        if message.sender != self.peer or message.nonce in self.impostors:
            return Heard.IGNORED
        process = self.processes.get(message.nonce)
        if process is None:
            process = self.processes[message.nonce] = PeerProcess(message.nonce, message.counter)
            while len(self.processes) > MAX_PROCESSES:
                self.processes.popitem(last=False)
        if message.kind == "hello":
            process.holds = message.holds
        return Heard.PEER

    def introduced(self, nonce: str, counter: int, holds: Sequence[str]) -> PeerProcess:
        """The peer's process met in the code meeting."""
        process = PeerProcess(nonce, counter, tuple(holds))
        self.processes[nonce] = process
        return process

    def impostor(self, nonce: str) -> None:
        """``nonce`` is not the peer's: ignore it from now on."""
        self.impostors[nonce] = None
        self.processes.pop(nonce, None)
        while len(self.impostors) > MAX_PROCESSES:
            self.impostors.popitem(last=False)

    def process(self, nonce: str) -> PeerProcess | None:
        """The peer's process ``nonce``, if heard."""
        return self.processes.get(nonce)

    @staticmethod
    def newest_common(mine: Sequence[str], theirs: Sequence[str]) -> str | None:
        """The newest of ``mine`` (newest first) that ``theirs`` holds too, or None."""
        return next((fp for fp in mine if fp in theirs), None)
