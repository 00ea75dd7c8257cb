"""The rendezvous: offers, answers, and telling a restarted peer from an impostor.

Layer: pairing glue (its decisions are :mod:`.plan`'s and :mod:`.handshake`'s; the meetings are
its host's, the conductor). One :class:`Rendezvous` per paired process: the side with the lower
static public key offers a Noise handshake to each peer process it hears, the other answers.
A message from an unknown, newer peer process is a restart or a copy of the peer's file: asked
through the live meeting (:class:`~.pairing_messages.Check`), an answer
(:class:`~.pairing_messages.Here`) proves an impostor, silence within :data:`CHECK_TIMEOUT` a
restart; a copy of this side's own file is reported and the secret stepped on. In full:
docs/module-notes.md.

Invariants: at most :data:`MAX_OFFERS` offers outstanding; each offer is answered at most once;
a process proven an impostor never gets a meeting.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final, Protocol

from twisted.internet.interfaces import IDelayedCall

from txdilation.pairing import derive
from txdilation.pairing.backoff import Backoff
from txdilation.pairing.handshake import HandshakeFailed, Initiator, Place, prologue, respond
from txdilation.pairing.hello import Hello
from txdilation.pairing.pairing_messages import Check
from txdilation.pairing.plan import Heard, PeerProcess, Planner
from txdilation.pairing.ratchet import acceptable_receipts
from txdilation.pairing.record import Generation, PairingRecord

__all__ = ["CHECK_TIMEOUT", "MAX_OFFERS", "Rendezvous", "RendezvousHost"]

CHECK_TIMEOUT: Final = 3.0
"""Seconds a live meeting's peer has to say that another process claiming it is not it."""
MAX_OFFERS: Final = 8


class RendezvousHost(Protocol):
    """What the rendezvous needs from the conductor."""

    @property
    def record(self) -> PairingRecord | None: ...

    def meeting_peer(self) -> tuple[PeerProcess, int, bool, bool] | None:
        "The current meeting's peer process, offer number, whether met, whether its link is up."

    def meet(self, process: PeerProcess, generation: Generation, place: Place, offer: int) -> None:
        "Meet ``process`` at ``place`` (ending any current meeting)."

    def peer_restarted(self) -> None:
        "The current meeting's peer is gone: end the meeting (its subchannels: PeerRestarted)."

    def post(self, fingerprint: str, message: Hello) -> None:
        "Post an offer or an answer in the lobbies of a generation."

    def send_check(self, check: Check) -> None:
        "Send a pairing message in the current meeting."

    def impostor(self, nonce: str, counter: int, mine: bool, why: str) -> None:
        "Report an impostor (``mine``: a copy of this side) and leave it behind."

    def renewed(self) -> None:
        "This process's nonce changed: post a new hello."


class Rendezvous:
    """See the module docstring."""

    def __init__(self, host: RendezvousHost, clock: Any, planner: Planner, initiator: bool) -> None:
        self._host = host
        self._clock = clock
        self.planner = planner
        self.initiator = initiator
        self._offers: OrderedDict[tuple[str, int], tuple[Initiator, str]] = OrderedDict()
        self._offer_number = 0
        self._checks: dict[str, IDelayedCall] = {}
        self._held: dict[str, list[Hello]] = {}
        self.gone: set[str] = set()
        self.refusals: set[str] = set()
        self._retry = Backoff(clock)

    # --- from the lobbies ---

    def heard(self, message: Hello) -> None:
        heard = self.planner.heard(message)
        if heard is Heard.COPY:
            self._host.impostor(message.nonce, message.counter, True, "copy")
        elif heard is Heard.PEER:
            self._peer(message)

    def _peer(self, message: Hello) -> None:
        nonce = message.nonce
        if nonce in self._checks:
            self._hold(message)
            return
        current = self._host.meeting_peer()
        if current is not None:
            process, _, met, link_up = current
            if nonce != process.nonce and met:
                if message.counter < process.counter:
                    return  # an older process of the peer than the one met: gone
                if link_up:
                    self._hold(message)
                    self._check(nonce)
                    return
                self._host.peer_restarted()
        self._act(message)

    def _hold(self, message: Hello) -> None:
        self._held.setdefault(message.nonce, []).append(message)
        del self._held[message.nonce][:-4]

    def _act(self, message: Hello) -> None:
        process = self.planner.process(message.nonce)
        if process is None or message.nonce in self.gone:
            return
        if message.kind == "hello" and self.initiator:
            current = self._host.meeting_peer()
            if current is None or current[0].nonce != process.nonce:
                self.offer(process)
        elif message.to != self.planner.nonce:
            return
        elif message.kind == "offer" and not self.initiator:
            self._answer(process, message)
        elif message.kind == "answer" and self.initiator:
            self._finish(process, message)

    # --- checks ---

    def _check(self, nonce: str) -> None:
        self._host.send_check(Check(nonce))
        self._checks[nonce] = self._clock.callLater(CHECK_TIMEOUT, self._unanswered, nonce)

    def here(self, nonce: str) -> None:
        """The live peer says the process ``nonce`` is not it."""
        call = self._checks.pop(nonce, None)
        if call is None:
            return
        if call.active():
            call.cancel()
        process = self.planner.process(nonce)
        self._held.pop(nonce, None)
        self.planner.impostor(nonce)
        counter = process.counter if process is not None else 0
        self._host.impostor(nonce, counter, False, "the paired peer is alive and says so")

    def _unanswered(self, nonce: str) -> None:
        self._checks.pop(nonce, None)
        current = self._host.meeting_peer()
        if current is not None and current[0].nonce != nonce:
            self._host.peer_restarted()
        for message in self._held.pop(nonce, []):
            self._act(message)

    def link_lost(self) -> None:
        """The current meeting's link is down: pending checks are restarts."""
        for nonce, call in list(self._checks.items()):
            if call.active():
                call.cancel()
            self._unanswered(nonce)

    # --- the handshake ---

    def offer(self, process: PeerProcess) -> None:
        """Offer a meeting to ``process`` (initiator), on the newest generation both hold."""
        record = self._host.record
        if record is None or process.nonce in self.gone:
            return
        fingerprint = self.planner.newest_common(
            [g.fingerprint for g in record.held()], process.holds
        )
        generation = record.generation_with(fingerprint) if fingerprint else None
        if generation is None:
            return
        self._offer_number += 1
        number = self._offer_number
        ids = (record.me.id, record.peer.id)
        bound = prologue(generation.fingerprint, ids, (self.planner.nonce, process.nonce), number)
        psk = derive.psk(generation.secret)
        start = Initiator(record.key, record.peer_key, psk, bound, record.receipts)
        self._offers[(process.nonce, number)] = (start, generation.fingerprint)
        while len(self._offers) > MAX_OFFERS:
            self._offers.popitem(last=False)
        message = self.planner.directed(
            "offer", process.nonce, generation.fingerprint, number, start.message
        )
        self._host.post(generation.fingerprint, message)

    def _answer(self, process: PeerProcess, message: Hello) -> None:
        record = self._host.record
        generation = record.generation_with(message.generation) if record is not None else None
        if record is None or generation is None:
            return
        current = self._host.meeting_peer()
        if current is not None:
            met_process, offer, met, _ = current
            if met_process.nonce == process.nonce and message.offer <= offer:
                return  # that offer, or an older one, is what the meeting came from
            older = process.counter < met_process.counter
            if met_process.nonce != process.nonce and not met and older:
                return  # an older process than the one being met
        ids = (record.peer.id, record.me.id)
        bound = prologue(
            generation.fingerprint, ids, (message.nonce, self.planner.nonce), message.offer
        )
        try:
            reply, place = respond(
                record.key,
                record.peer_key,
                derive.psk(generation.secret),
                bound,
                message.noise,
                record.receipts,
                acceptable_receipts(record),
            )
        except HandshakeFailed as e:
            self._refused(process, str(e))
            return
        answer = self.planner.directed(
            "answer", message.nonce, generation.fingerprint, message.offer, reply
        )
        self._host.post(generation.fingerprint, answer)
        self._host.meet(process, generation, place, message.offer)

    def _finish(self, process: PeerProcess, message: Hello) -> None:
        record = self._host.record
        entry = self._offers.pop((process.nonce, message.offer), None)
        if record is None or entry is None:
            return
        start, fingerprint = entry
        generation = record.generation_with(fingerprint)
        if generation is None:
            return
        try:
            place = start.finish(message.noise, acceptable_receipts(record))
        except HandshakeFailed as e:
            self._refused(process, str(e))
            return
        current = self._host.meeting_peer()
        if current is not None and not current[2] and process.counter < current[0].counter:
            return  # already meeting a later process
        self._host.meet(process, generation, place, message.offer)

    def _refused(self, process: PeerProcess, why: str) -> None:
        if process.nonce not in self.refusals:
            self.refusals.add(process.nonce)
            self._host.impostor(process.nonce, process.counter, False, why)

    def failed(self, process: PeerProcess) -> None:
        """The meeting with ``process`` failed by itself: the initiator offers again, later
        and later; the responder takes a new nonce (the initiator offers to it at once)."""
        if self.initiator:
            self._retry.later(lambda: self.offer(process))
        else:
            self.planner.renew_nonce()
            self._host.renewed()

    def met(self) -> None:
        """A meeting is dilated: the next failure retries at once again."""
        self._retry.reset()
        self._retry.cancel()

    def stop(self) -> None:
        self._retry.cancel()
        for call in self._checks.values():
            if call.active():
                call.cancel()
        self._checks.clear()
        self._held.clear()
