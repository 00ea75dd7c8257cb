"""The conductor of a paired wormhole: lobbies, the rendezvous, meetings and the ratchet.

Layer: pairing glue (decisions: :mod:`.plan`, :mod:`.handshake`, :mod:`.ratchet`; the lobby
side: :mod:`.rendezvous`; the ratchet in a meeting: :mod:`.stepping`). One :class:`Conductor`
per process and pairing file: with no file yet, the code meeting (:meth:`Conductor.start_pairing`:
the sides introduce themselves, static public keys included, and each writes generation 0 once
dilated); with a file (:meth:`Conductor.start_paired`): the file locked then loaded, one more
incarnation, the rendezvous of each generation held, and a meeting wherever it finds the peer.

Invariants: every change of the record is saved (atomically, durably) before anything that
depends on it is sent; a meeting that ends is closed exactly once, and when it ended because
the peer restarted its open subchannels get
:class:`~txdilation.pairing.pairing_errors.PeerRestarted`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.python.failure import Failure

from txdilation.pairing import derive
from txdilation.pairing.downtime import Downtime
from txdilation.pairing.first import check_code, first_record
from txdilation.pairing.handshake import Place
from txdilation.pairing.hello import Hello, new_nonce
from txdilation.pairing.identity_keys import new_private, public_of
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.lobbies import Lobbies
from txdilation.pairing.lobby import LobbyTrouble
from txdilation.pairing.meeting import (
    Meeting,
    StatusCallbacks,
    StatusGate,
    create_wormhole,
    dilator,
    open_derived,
)
from txdilation.pairing.paired_endpoints import MeetingBoard
from txdilation.pairing.pairing_errors import PairingError, PeerCannotPair, PeerRestarted
from txdilation.pairing.pairing_messages import Check, Here, Introduce, Met, PairingMessage, Stored
from txdilation.pairing.pairing_options import PairingOptions, default_name
from txdilation.pairing.plan import PeerProcess, Planner
from txdilation.pairing.record import Generation, Identity, PairingRecord
from txdilation.pairing.rendezvous import Rendezvous
from txdilation.pairing.stepping import Stepper
from txdilation.pairing.warnings import Warnings

__all__ = ["NOT_PAIRING", "Conductor", "ConductorEvents"]

NOT_PAIRING = (
    "the peer does not pair: it is stock magic-wormhole, or txdilation without --pairing; "
    "nothing of the pairing was sent to it"
)


class ConductorEvents(Protocol):
    """The paired machine's events the conductor feeds (see :mod:`.paired_wormhole`)."""

    def paired(self) -> None: ...
    def meeting_dilated(self) -> None: ...
    def meeting_lost(self) -> None: ...
    def failed(self, failure: Failure) -> None: ...


@dataclass
class Conductor:
    """See the module docstring."""

    reactor: Any
    keeper: RecordKeeper
    options: PairingOptions
    on_event: Callable[[str, dict[str, Any]], object]
    status: Callable[[], StatusCallbacks | None]
    inputs: ConductorEvents | None = None
    rendezvous: Rendezvous | None = None
    me: Identity | None = None
    key: bytes = field(default_factory=new_private)
    nonce: str = field(default_factory=new_nonce)
    lobbies: Lobbies = field(init=False)
    board: MeetingBoard = field(default_factory=MeetingBoard)
    meeting: Meeting | None = None
    peer: PeerProcess | None = None
    offer: int = 0
    generation: Generation | None = None
    stepper: Stepper = field(init=False)
    warnings: Warnings = field(init=False)
    code_meeting: bool = False
    code: str | None = None
    peer_intro: Introduce | None = None
    ending: set[Meeting] = field(default_factory=set)
    downtime: Downtime = field(default_factory=Downtime)
    stopped: bool = False

    def __post_init__(self) -> None:
        self.lobbies = Lobbies(self.reactor, self._heard, self._lobby_trouble)
        self.stepper = Stepper(self.keeper, self._sync_lobbies, self._emit, self._fail)
        self.warnings = Warnings(self._emit, self.peer_name, str(self.keeper.store.path))

    @property
    def record(self) -> PairingRecord | None:
        return self.keeper.record

    def _now(self) -> float:
        return float(self.reactor.seconds())

    def _emit(self, kind: str, **fields: Any) -> None:
        self.on_event(kind, fields)

    def _inputs(self) -> ConductorEvents:
        assert self.inputs is not None
        return self.inputs

    def _fail(self, error: BaseException | Failure) -> None:
        self._inputs().failed(error if isinstance(error, Failure) else Failure(error))  # type: ignore[no-untyped-call]

    def peer_name(self) -> str:
        if self.record is not None:
            return self.record.peer.name
        return self.peer_intro.name if self.peer_intro is not None else "?"

    @property
    def relay(self) -> tuple[str, ...]:
        if self.options.relay or self.record is None:
            return self.options.relay
        return self.record.relay

    def _new_meeting(self, w: Any, label: str, gate: StatusGate) -> Meeting:
        meeting = Meeting(w, dilator(w, self.options, self.relay), self, label, gate)
        self.meeting = meeting
        self.stepper.begin(meeting, code=self.code_meeting)
        self.board.publish(meeting.dilated)
        return meeting

    # --- starting ---

    def start_pairing(self) -> None:
        """No pairing file yet: the code meeting (never with a code this side paired from)."""
        self.downtime.started_at = self._now()
        options = self.options
        try:
            self.keeper.store.lock()
            check_code(options)
            self.me = Identity(os.urandom(derive.ID_LENGTH), options.name or default_name())
            self.warnings.plaintext(options.mailbox)
            gate = StatusGate(self.status())
            w = create_wormhole(self.reactor, options.appid, options.mailbox, gate.callbacks)
            self.code_meeting = True
            self._new_meeting(w, "code", gate)
            if options.code is not None:
                w.set_code(options.code)
            else:
                w.allocate_code()
        except Exception as e:
            self._fail(e)
            return
        w.get_code().addCallbacks(self._got_code, lambda f: None)
        w.get_verifier().addCallbacks(self._got_verifier, lambda f: None)

    def _got_code(self, code: str) -> None:
        self.code = code
        self._emit("code", code=code)

    def _got_verifier(self, verifier: bytes) -> None:
        self._emit("peer-connected", verifier=verifier.hex())

    def start_paired(self) -> None:
        """A pairing file: meet the peer without a code."""
        self.downtime.started_at = self._now()
        try:
            record = self.keeper.begin()
        except PairingError as e:
            self._fail(e)
            return
        self._rendezvous(Planner(record.me.id, record.peer.id, record.counter, self.nonce))
        self.warnings.plaintext(record.mailbox)
        self._emit(
            "waiting", peer=record.peer.name, generation=record.current.number, reason="started"
        )
        self._sync_lobbies()

    def _rendezvous(self, planner: Planner) -> None:
        record = self.keeper.record
        assert record is not None
        initiator = public_of(record.key) < record.peer_key
        self.rendezvous = Rendezvous(self, self.reactor, planner, initiator)

    # --- lobbies ---

    def _sync_lobbies(self) -> None:
        """The lobbies of the generations held now, each with a new hello saying so."""
        record, rendezvous = self.record, self.rendezvous
        if record is not None and rendezvous is not None and not self.stopped:
            held = [g.fingerprint for g in record.held()]
            self.lobbies.sync(record, rendezvous.planner.hello(held))

    def _heard(self, hello: Hello) -> None:
        if self.rendezvous is not None and not self.stopped:
            self.rendezvous.heard(hello)

    def _lobby_trouble(self, trouble: LobbyTrouble) -> None:
        self.warnings.lobby(trouble, self.record.mailbox if self.record else self.options.mailbox)

    # --- RendezvousHost ---

    def meeting_peer(self) -> tuple[PeerProcess, int, bool, bool] | None:
        meeting, peer = self.meeting, self.peer
        if meeting is None or peer is None or meeting.closing:
            return None
        return (peer, self.offer, meeting.is_met, meeting.link_up)

    def meet(self, process: PeerProcess, generation: Generation, place: Place, offer: int) -> None:
        record = self.record
        if record is None or self.stopped:
            return
        if self.meeting is not None:
            self._end_meeting(self.meeting, "the meeting moved", None)
        gate = StatusGate(self.status())
        try:
            w = create_wormhole(self.reactor, record.appid, record.mailbox, gate.callbacks)
            open_derived(w, place.mailbox, place.password)
        except Exception as e:
            self._fail(e)
            return
        self.peer, self.offer, self.generation = process, offer, generation
        self.code_meeting = False
        self._new_meeting(w, f"generation {generation.number}", gate)
        self._emit("meeting", peer=record.peer.name, generation=generation.number)

    def renewed(self) -> None:
        self._sync_lobbies()

    def peer_restarted(self) -> None:
        meeting = self.meeting
        if meeting is None:
            return
        if meeting.is_met:
            self._emit("peer-restarted", peer=self.peer_name())
            why = f"the paired peer {self.peer_name()} restarted"
            self._end_meeting(meeting, why, Failure(PeerRestarted(why)))  # type: ignore[no-untyped-call]
        else:
            self._end_meeting(meeting, "the meeting moved", None)

    def post(self, fingerprint: str, message: Hello) -> None:
        self.lobbies.post(fingerprint, message)

    def send_check(self, check: Check) -> None:
        if self.meeting is not None:
            self.meeting.send(check)

    def impostor(self, nonce: str, counter: int, mine: bool, why: str) -> None:
        if self.warnings.impostor(nonce, counter, mine, why):
            self.stepper.evict()

    # --- meetings ---

    def _end_meeting(self, meeting: Meeting, reason: str, lost: Failure | None) -> None:
        if meeting is self.meeting:
            self.meeting = None
            self.peer = None
            self.stepper.end()
            self.downtime.lost(self._now(), only_after_a_meeting=True)
            self._inputs().meeting_lost()
        self.board.withdraw(meeting.dilated)
        self.ending.add(meeting)
        meeting.close(reason, lost).addBoth(lambda _: self.ending.discard(meeting))

    def met(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        if self.code_meeting and self.record is None:
            assert self.me is not None
            meeting.send(Introduce(self.me.id, self.me.name, self.nonce, public_of(self.key)))
        elif self.generation is not None and self.stepper.met(self.generation):
            self._sync_lobbies()

    def refused(self, meeting: Meeting) -> None:
        if meeting is self.meeting:
            self._fail(PeerCannotPair(NOT_PAIRING))

    def message(self, meeting: Meeting, message: PairingMessage) -> None:
        if meeting is not self.meeting:
            return
        if isinstance(message, Introduce):
            if self.code_meeting and self.record is None:
                self.peer_intro = message
                self._finish_pairing(meeting)
        elif isinstance(message, Check):
            meeting.send(Here(message.nonce))
            self.impostor(message.nonce, -1, True, "the peer heard it in the lobby")
        elif isinstance(message, Here) and self.rendezvous is not None:
            self.rendezvous.here(message.nonce)
        elif isinstance(message, Met) or (
            isinstance(message, Stored) and self.code_meeting and message.generation == 0
        ):
            self.stepper.confirmed()
        elif isinstance(message, Stored):
            self.stepper.stored(message)

    def dilated(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        if self.code_meeting:
            self._finish_pairing(meeting)
            return
        if self.rendezvous is not None:
            self.rendezvous.met()
        fields = self.downtime.reconnected(self._now())
        if self.record is not None:
            fields["generation"] = self.record.current.number
        self._emit("reconnected", peer=self.peer_name(), **fields)
        self._inputs().meeting_dilated()
        self.stepper.dilated()

    def link_lost(self, meeting: Meeting) -> None:
        if meeting is self.meeting:
            self.downtime.lost(self._now())
            if self.rendezvous is not None:
                self.rendezvous.link_lost()

    def link_back(self, meeting: Meeting) -> None:
        if meeting is self.meeting:
            self.downtime.back()

    def peer_left(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        record = self.record
        if record is None:
            self._fail(PairingError("the peer closed its wormhole before the pairing was made"))
            return
        generation = record.current.number
        self._emit("waiting", peer=record.peer.name, generation=generation, reason="peer-left")
        if self.rendezvous is not None and self.peer is not None:
            self.rendezvous.gone.add(self.peer.nonce)
        self._end_meeting(meeting, "the paired peer left", None)

    def ended(self, meeting: Meeting, failure: Failure) -> None:
        if meeting is not self.meeting:
            self.ending.discard(meeting)
            return
        if self.code_meeting and self.record is None:
            self._fail(failure)
            return
        self._emit(
            "warning",
            message=f"the meeting with {self.peer_name()} failed: {failure.getErrorMessage()}",
            advice="meeting again",
        )
        process = self.peer
        self._end_meeting(meeting, "failed", None)
        if self.rendezvous is not None and process is not None:
            self.rendezvous.failed(process)

    # --- the code meeting ---

    def _finish_pairing(self, meeting: Meeting) -> None:
        intro, me = self.peer_intro, self.me
        if intro is None or me is None or not meeting.is_dilated or self.record is not None:
            return
        try:
            code = self.options.code if self.options.code is not None else self.code
            record = first_record(self.keeper, meeting, me, self.key, intro, self.options, code)
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        peer = record.peer
        planner = Planner(me.id, peer.id, record.counter, self.nonce)
        self.peer = planner.introduced(intro.nonce, 1, (record.current.fingerprint,))
        self._rendezvous(planner)
        self.generation = record.current
        meeting.send(Stored(0, record.current.fingerprint))
        self._emit("paired", peer=peer.name, path=str(self.keeper.store.path), generation=0)
        self._sync_lobbies()
        self.downtime.paired()
        self.stepper.written_now()
        self.stepper.dilated()
        self._inputs().paired()

    def stop(self) -> Deferred[Any]:
        """Disconnect the lobbies (without closing them), close every meeting, release the
        file; fires once every wormhole is closed."""
        self.stopped = True
        if self.rendezvous is not None:
            self.rendezvous.stop()
        stops = [self.lobbies.stop()]
        meeting, self.meeting = self.meeting, None
        if meeting is not None:
            stops.append(meeting.close("stopping", silence=False))
        stops += [m.close("stopping") for m in list(self.ending)]
        self.ending.clear()
        self.board.close(PairingError("the paired wormhole is closed"))
        done: Deferred[Any] = DeferredList(stops, consumeErrors=True)
        done.addBoth(lambda _: self.keeper.store.unlock())
        return done
