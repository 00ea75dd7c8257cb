"""The conductor of a paired wormhole: lobbies, the planner, meetings and the ratchet.

Layer: pairing glue (its decisions are the I/O-free :mod:`.plan` and :mod:`.ratchet`; this
module applies them). One :class:`Conductor` per process and pairing file:

- with no file yet, the code meeting (:meth:`Conductor.start_pairing`): a wormhole with the
  code that announces pairing; once the peer announced it too, each side introduces itself
  (id, name, nonce); once dilated, each writes its file (generation 0) and tells the peer; the
  code meeting goes on as the pairing's first meeting;
- with a file (:meth:`Conductor.start_paired`): one more incarnation, the lobby of each
  generation held, a hello there, and a derived meeting where the planner says (a new one
  whenever the target changes before the meeting is made, or the peer's nonce after: the
  peer restarted);
- in each derived meeting: once met, the generation met with becomes current; once dilated,
  the next secret is staged, the peer told, and it is committed once the peer told the same
  (:mod:`.ratchet`, applied by the :class:`~.keeper.RecordKeeper`).

Invariants: every change of the record is saved (atomically, durably) before anything that
depends on it is sent; a meeting that ends is closed exactly once, and when it ended because
the peer restarted its open subchannels get :class:`~txdilation.pairing.errors.PeerRestarted`;
between meetings nothing of an old meeting is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.python.failure import Failure

from txdilation.pairing import derive, ratchet
from txdilation.pairing.backoff import Backoff
from txdilation.pairing.endpoints import MeetingBoard
from txdilation.pairing.errors import PairingError, PeerCannotPair, PeerRestarted
from txdilation.pairing.hello import Hello, new_nonce
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.lobbies import Lobbies
from txdilation.pairing.meeting import (
    Meeting,
    StatusCallbacks,
    StatusGate,
    create_wormhole,
    dilator,
    open_derived,
)
from txdilation.pairing.messages import Introduce, PairingMessage, Stored
from txdilation.pairing.options import PairingOptions, default_name
from txdilation.pairing.plan import Heard, Planner, Target
from txdilation.pairing.record import Generation, Identity, PairingRecord

__all__ = ["Conductor", "ConductorInputs"]


class ConductorInputs(Protocol):
    """The machine inputs the conductor feeds (see :mod:`.paired`)."""

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
    inputs: ConductorInputs | None = None
    planner: Planner | None = None
    me: Identity | None = None
    nonce: str = field(default_factory=new_nonce)
    lobbies: Lobbies = field(init=False)
    board: MeetingBoard = field(default_factory=MeetingBoard)
    meeting: Meeting | None = None
    target: Target | None = None
    generation: Generation | None = None
    code_meeting: bool = False
    peer_intro: Introduce | None = None
    peer_stored_pairing: bool = False
    staged: str | None = None
    peer_staged: str | None = None
    ending: set[Meeting] = field(default_factory=set)
    started_at: float = 0.0
    down_since: float | None = None
    had_meeting: bool = False
    retry: Backoff = field(init=False)
    copies_seen: set[str] = field(default_factory=set)
    stopped: bool = False

    def __post_init__(self) -> None:
        self.lobbies = Lobbies(self.reactor, self._heard, self._lobby_error)
        self.retry = Backoff(self.reactor)

    # --- helpers ---

    @property
    def record(self) -> PairingRecord | None:
        return self.keeper.record

    def _now(self) -> float:
        return float(self.reactor.seconds())

    def _emit(self, kind: str, **fields: Any) -> None:
        self.on_event(kind, fields)

    def _inputs(self) -> ConductorInputs:
        assert self.inputs is not None
        return self.inputs

    def _fail(self, error: BaseException | Failure) -> None:
        failure = error if isinstance(error, Failure) else Failure(error)  # type: ignore[no-untyped-call]
        self._inputs().failed(failure)

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
        self.staged = self.peer_staged = None
        self.board.publish(meeting.dilated)
        return meeting

    # --- starting ---

    def start_pairing(self) -> None:
        """No pairing file yet: the code meeting."""
        self.started_at = self._now()
        options = self.options
        try:
            self.keeper.store.lock()
            self.me = Identity(os.urandom(derive.ID_LENGTH), options.name or default_name())
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
        w.get_code().addCallbacks(lambda code: self._emit("code", code=code), lambda f: None)
        w.get_verifier().addCallbacks(
            lambda v: self._emit("peer-connected", verifier=v.hex()), lambda f: None
        )

    def start_paired(self) -> None:
        """A pairing file: meet the peer without a code."""
        self.started_at = self._now()
        try:
            record = self.keeper.begin()
        except PairingError as e:
            self._fail(e)
            return
        self.planner = Planner(record.me.id, record.peer.id, record.counter, self.nonce)
        self._emit(
            "waiting", peer=record.peer.name, generation=record.current.number, reason="started"
        )
        self._sync_lobbies()

    # --- lobbies ---

    def _sync_lobbies(self) -> None:
        """The lobbies of the generations held now, each with a new hello saying so."""
        record, planner = self.record, self.planner
        if record is not None and planner is not None and not self.stopped:
            self.lobbies.sync(record, planner.hello(self._held()))

    def _heard(self, hello: Hello) -> None:
        if self.planner is None or self.stopped:
            return
        heard = self.planner.heard(hello)
        if heard is Heard.PEER:
            self._replan()
        elif heard is Heard.COPY and hello.nonce not in self.copies_seen:
            self.copies_seen.add(hello.nonce)
            self._emit(
                "warning",
                message=f"another process is using this side of the pairing with "
                f"{self.peer_name()} (start {hello.counter}): a copy of {self.keeper.store.path}?",
                advice="stop the other process; if you did not start it, the pairing file was "
                "copied: forget the pairing on both sides and pair again with a new code",
            )

    def _lobby_error(self, text: str) -> None:
        if "crowded" in text:
            advice = "a third party holds this pairing's secret: pair again with a new code"
        else:
            advice = "still trying; 'txdilation pairing show' names the mailbox server it uses"
        self._emit("warning", message=f"pairing lobby: {text}", advice=advice)

    # --- planning ---

    def _held(self) -> list[str]:
        return [g.fingerprint for g in self.record.held()] if self.record is not None else []

    def _replan(self) -> None:
        if self.planner is None or self.stopped or self.retry.waiting:
            return
        target = self.planner.target(self._held())
        current, old = self.meeting, self.target
        if current is not None:
            if target == old:
                return
            if current.is_met:
                nonces = None if target is None else (target.my_nonce, target.peer_nonce)
                if old is None or nonces is None or nonces == (old.my_nonce, old.peer_nonce):
                    return  # the meeting stands (only what is held changed)
                if target is not None and target.peer_counter > old.peer_counter:
                    self._emit("peer-restarted", peer=self.peer_name())
                    why = f"the paired peer {self.peer_name()} restarted"
                    lost = Failure(PeerRestarted(why))  # type: ignore[no-untyped-call]
                    self._end_meeting(current, why, lost, renew=False)
                else:  # a nonce renewed after a meeting ended: that meeting is over
                    self._end_meeting(current, "a side left the meeting", None, renew=False)
            else:
                self._end_meeting(current, "the meeting moved", None, renew=False)
        if target is not None and self.meeting is None:
            self._start_meeting(target)

    def _start_meeting(self, target: Target) -> None:
        record = self.record
        assert record is not None
        generation = record.generation_with(target.fingerprint)
        if generation is None:
            return
        gate = StatusGate(self.status())
        try:
            w = create_wormhole(self.reactor, record.appid, record.mailbox, gate.callbacks)
            open_derived(
                w,
                derive.meeting_mailbox(generation.secret, target.nonces),
                derive.meeting_password(generation.secret, target.nonces),
            )
        except Exception as e:
            self._fail(e)
            return
        self.target, self.generation, self.code_meeting = target, generation, False
        self._new_meeting(w, f"generation {generation.number}", gate)
        self._emit("meeting", peer=record.peer.name, generation=generation.number)

    def _end_meeting(
        self, meeting: Meeting, reason: str, lost: Failure | None, *, renew: bool
    ) -> None:
        """Close ``meeting``; with ``renew``, meet with a new nonce if the target would
        otherwise be the meeting that just ended (its mailbox is spent)."""
        ended = self.target
        if meeting is self.meeting:
            self.meeting = None
            self.target = None
            self.staged = self.peer_staged = None
            if self.had_meeting and self.down_since is None:
                self.down_since = self._now()
            self._inputs().meeting_lost()
        self.board.withdraw(meeting.dilated)
        self.ending.add(meeting)
        meeting.close(reason, lost).addBoth(lambda _: self.ending.discard(meeting))
        spent = ended is None or (
            self.planner is not None and self.planner.target(self._held()) == ended
        )
        if renew and self.planner is not None and spent:
            self.planner.renew_nonce()
            self._sync_lobbies()

    # --- MeetingOwner ---

    def met(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        if self.code_meeting and self.record is None:
            me = self.me
            assert me is not None
            meeting.send(Introduce(me.id, me.name, self.nonce))
            return
        if self.target is None:
            return
        try:
            changed = self.keeper.met(self.target.fingerprint)
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        if changed:
            self._sync_lobbies()

    def refused(self, meeting: Meeting) -> None:
        if meeting is self.meeting:
            self._fail(
                PeerCannotPair(
                    "the peer does not pair: it is stock magic-wormhole, or txdilation without "
                    "--pairing; nothing of the pairing was sent to it"
                )
            )

    def message(self, meeting: Meeting, message: PairingMessage) -> None:
        if meeting is not self.meeting:
            return
        if isinstance(message, Introduce):
            if self.code_meeting and self.record is None:
                self.peer_intro = message
                self._finish_pairing(meeting)
        elif self.code_meeting:
            self.peer_stored_pairing = message.generation == 0
            self._confirm_pairing()
        else:
            self.peer_staged = message.fingerprint
            self._commit()

    def dilated(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        if self.code_meeting:
            self._finish_pairing(meeting)
            return
        self.retry.reset()
        self._report_reconnected()
        self._inputs().meeting_dilated()
        self._stage(meeting)

    def link_lost(self, meeting: Meeting) -> None:
        if meeting is self.meeting and self.down_since is None:
            self.down_since = self._now()

    def link_back(self, meeting: Meeting) -> None:
        if meeting is self.meeting:
            self.down_since = None

    def peer_left(self, meeting: Meeting) -> None:
        if meeting is not self.meeting:
            return
        record = self.record
        if record is None:
            self._fail(PairingError("the peer closed its wormhole before the pairing was made"))
            return
        self._emit(
            "waiting", peer=record.peer.name, generation=record.current.number, reason="peer-left"
        )
        if self.planner is not None and self.target is not None:
            self.planner.spend(self.target.peer_nonce)
        self._end_meeting(meeting, "the paired peer left", None, renew=False)

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
        self._end_meeting(meeting, "failed", None, renew=True)
        self.retry.later(self._replan)

    # --- the code meeting ---

    def _finish_pairing(self, meeting: Meeting) -> None:
        intro, me = self.peer_intro, self.me
        if intro is None or me is None or not meeting.is_dilated or self.record is not None:
            return
        peer = Identity(intro.id, intro.name)
        options = self.options
        try:
            secret = derive.initial_secret(meeting.derive(derive.MATERIAL_PURPOSE), me.id, peer.id)
            record = self.keeper.pair(
                ratchet.new_record(
                    me,
                    peer,
                    mailbox=options.mailbox,
                    appid=options.appid,
                    relay=options.relay,
                    secret=secret,
                    counter=1,
                    now=self._now(),
                )
            )
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        self.planner = Planner(me.id, peer.id, record.counter, self.nonce)
        self.planner.introduced(intro.nonce, (record.current.fingerprint,))
        self.generation = record.current
        self.target = self.planner.target(self._held())
        meeting.send(Stored(0, record.current.fingerprint))
        self._emit("paired", peer=peer.name, path=str(self.keeper.store.path), generation=0)
        self._confirm_pairing()
        self._sync_lobbies()
        self.had_meeting = True
        self._inputs().paired()

    def _confirm_pairing(self) -> None:
        if self.record is not None and self.peer_stored_pairing:
            try:
                self.keeper.confirm()
            except PairingError as e:
                self._fail(e)

    # --- the ratchet ---

    def _stage(self, meeting: Meeting) -> None:
        record, generation = self.record, self.generation
        if record is None or generation is None or record.current != generation:
            return
        try:
            secret = derive.next_secret(generation.secret, meeting.derive(derive.NEXT_PURPOSE))
            pending = self.keeper.stage(secret)
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        self.staged = pending.fingerprint
        self._sync_lobbies()
        meeting.send(Stored(pending.number, pending.fingerprint))
        self._commit()

    def _commit(self) -> None:
        staged, peer_staged = self.staged, self.peer_staged
        if staged is None or peer_staged is None:
            return
        self.staged = self.peer_staged = None
        if staged != peer_staged:
            self._emit(
                "warning",
                message="the peer staged another next generation than this side",
                advice="keeping both for now; the next meeting tries again",
            )
            return
        try:
            current = self.keeper.commit(staged)
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        self._sync_lobbies()
        self._emit("ratchet", peer=self.peer_name(), generation=current.number)

    def _report_reconnected(self) -> None:
        now = self._now()
        fields: dict[str, Any] = {"peer": self.peer_name()}
        if self.record is not None:
            fields["generation"] = self.record.current.number
        if self.had_meeting:
            fields["restarted"] = "peer"
            if self.down_since is not None:
                fields["down_s"] = round(now - self.down_since, 3)
        else:
            fields["restarted"] = "self"
            fields["since_start_s"] = round(now - self.started_at, 3)
        self.had_meeting = True
        self.down_since = None
        self._emit("reconnected", **fields)

    # --- stopping ---

    def stop(self) -> Deferred[Any]:
        """Disconnect the lobbies (without closing them), close every meeting, release the
        file; fires once every wormhole is closed."""
        self.stopped = True
        self.retry.cancel()
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
