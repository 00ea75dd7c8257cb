"""Where two paired sides meet: the planner (no I/O).

Layer: pairing core. A :class:`Planner` belongs to one process (one incarnation of one side).
It numbers this side's hellos, keeps the peer's latest hello (the greatest
:attr:`~txdilation.pairing.hello.Hello.order` heard in any lobby), and computes the
:class:`Target`: the meeting both sides go to, a pure function of what each side holds and of
the two nonces they meet with now:

- the secret: the newest generation held by both (this side's held generations, newest first,
  against the peer's latest ``holds``);
- the mailbox and password: derived from that secret and the two nonces, the lower pairing
  id's first (:func:`~txdilation.pairing.derive.meeting_mailbox`).

Since each side posts a new hello whenever what it holds or its nonce changes, both sides
compute the same target once each has heard the other's latest hello: they converge whatever
order hellos arrive in, and whichever side starts first.

Invariants: an older hello of the peer never replaces a newer one; a hello with this side's id
and a nonce this incarnation never used, from an incarnation not older than this one, is
:attr:`Heard.COPY` (another process uses this side's pairing: a copied file); hellos from
anyone else are :attr:`Heard.STRANGER` and change nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from txdilation.pairing.hello import Hello, new_nonce

__all__ = ["Heard", "Planner", "Target"]


class Heard(enum.Enum):
    """What one hello meant."""

    PEER = "peer"
    """The peer's newest hello so far: the target may have changed."""
    OLD = "old"
    """The peer's, or this side's, but not newer than what is known."""
    COPY = "copy"
    """This side's id, but not this process: another process uses a copy of the pairing."""
    STRANGER = "stranger"
    """Neither side's id (cannot happen without the lobby's key)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One meeting: the generation (by fingerprint) and the two nonces.

    :ivar nonces: the lower pairing id's nonce first (the order both sides derive with).
    :ivar peer_counter: the peer's incarnation (a later one means the peer restarted).
    """

    fingerprint: str
    my_nonce: str
    peer_nonce: str
    nonces: tuple[str, str]
    peer_counter: int = 0


class Planner:
    """See the module docstring.

    :param me: this side's pairing id.
    :param peer: the peer's.
    :param counter: this incarnation's number (from the pairing file, already advanced).
    :param nonce: the nonce to meet with (default: a new one).
    """

    def __init__(self, me: bytes, peer: bytes, counter: int, nonce: str | None = None) -> None:
        self.me = me
        self.peer = peer
        self.counter = counter
        self.nonce = nonce if nonce is not None else new_nonce()
        self._my_nonces = {self.nonce}
        self._seq = 0
        self.peer_hello: Hello | None = None
        self._spent: str | None = None

    def renew_nonce(self) -> str:
        """Meet with a new nonce from now on (after a meeting that failed or ended while both
        processes live): the next target is a new meeting."""
        self.nonce = new_nonce()
        self._my_nonces.add(self.nonce)
        return self.nonce

    def spend(self, peer_nonce: str) -> None:
        """The peer's process with ``peer_nonce`` left the meeting: meet again only once the
        peer says something new (a process that stays posts a new nonce when it leaves a
        meeting; a new process has one anyway)."""
        self._spent = peer_nonce

    def hello(self, holds: Sequence[str]) -> Hello:
        """This side's next hello, saying it holds ``holds`` (fingerprints, newest first)."""
        self._seq += 1
        return Hello(self.me, self.counter, self._seq, self.nonce, tuple(holds))

    def heard(self, hello: Hello) -> Heard:
        """Take in a hello from a lobby."""
        if hello.sender == self.me:
            if hello.nonce in self._my_nonces or hello.counter < self.counter:
                return Heard.OLD
            return Heard.COPY
        if hello.sender != self.peer:
            return Heard.STRANGER
        if self.peer_hello is not None and hello.order <= self.peer_hello.order:
            return Heard.OLD
        self.peer_hello = hello
        return Heard.PEER

    def introduced(self, nonce: str, holds: Sequence[str], counter: int = 1) -> None:
        """The peer introduced itself in the code meeting with ``nonce``, holding ``holds``,
        in its incarnation ``counter`` (the pairing's first: 1); older than any hello it posts
        later."""
        if self.peer_hello is None:
            self.peer_hello = Hello(self.peer, counter, 0, nonce, tuple(holds))

    def target(self, holds: Sequence[str]) -> Target | None:
        """Where to meet now, or None (no hello from the peer yet, or no generation in common).

        :param holds: this side's held fingerprints, newest first.
        """
        peer = self.peer_hello
        if peer is None or peer.nonce == self._spent:
            return None
        common = next((fp for fp in holds if fp in peer.holds), None)
        if common is None:
            return None
        nonces = (self.nonce, peer.nonce) if self.me < self.peer else (peer.nonce, self.nonce)
        return Target(common, self.nonce, peer.nonce, nonces, peer.counter)
