"""The ratchet inside one meeting: receipts, the step at dilation, and steps that evict copies.

Layer: pairing glue (the pure steps are :mod:`.ratchet`'s, saved by the
:class:`~.keeper.RecordKeeper` before anything that depends on them is sent). One
:class:`Stepper` per conductor follows its current meeting: the receipt kept and told
(:class:`~.pairing_messages.Met`), confirmed by the peer's ``Met``, the next generation staged once
dilated and confirmed and committed by the peer's :class:`~.pairing_messages.Stored` (either side
may start a step); :meth:`Stepper.evict` asks for one more step when an impostor was found. The
steps: docs/module-notes.md.

Invariants: one step at a time; a meeting steps once by itself (the code meeting only to
evict); nothing is staged before the record is confirmed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.python.failure import Failure

from txdilation.pairing import derive
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.meeting import Meeting
from txdilation.pairing.pairing_errors import PairingError
from txdilation.pairing.pairing_messages import Met, Stored
from txdilation.pairing.record import Generation

__all__ = ["Stepper"]


class Stepper:
    """See the module docstring.

    :param keeper: the record keeper.
    :param sync: called when what this side holds changed (the lobbies follow).
    :param emit: status events (``ratchet``, ``warning``).
    :param fail: a fatal error (the file cannot be written).
    """

    def __init__(
        self,
        keeper: RecordKeeper,
        sync: Callable[[], object],
        emit: Callable[..., object],
        fail: Callable[[BaseException | Failure], object],
    ) -> None:
        self._keeper = keeper
        self._sync = sync
        self._emit = emit
        self._fail = fail
        self.begin(None)

    def begin(self, meeting: Meeting | None, *, code: bool = False) -> None:
        """A new meeting (the code meeting steps only to evict)."""
        self.meeting = meeting
        self.written = False
        self.peer_confirmed = False
        self.is_dilated = False
        self.steps = 1 if code else 0
        self.evicting = False
        self.staged: str | None = None
        self.peer_staged: str | None = None

    def end(self) -> None:
        """The meeting is over."""
        self.begin(None)

    def met(self, generation: Generation) -> bool:
        """The meeting on ``generation`` met: keep its receipt; True when what is held changed."""
        meeting = self.meeting
        if meeting is None:
            return False
        try:
            changed = self._keeper.met(
                generation.fingerprint, meeting.derive(derive.RECEIPT_PURPOSE)
            )
        except (PairingError, ValueError) as e:
            self._fail(e)
            return False
        meeting.send(Met())
        self.written_now()
        return changed

    def written_now(self) -> None:
        """This side's receipt of the meeting is in the file (met, or the code pairing)."""
        self.written = True
        if self.peer_confirmed:
            self.confirmed()

    def confirmed(self) -> None:
        """The peer holds this meeting's receipt (its ``Met``, or the code meeting's ``Stored``)."""
        self.peer_confirmed = True
        if not self.written:
            return
        try:
            self._keeper.confirm()
        except PairingError as e:
            self._fail(e)
            return
        self._step()

    def dilated(self) -> None:
        self.is_dilated = True
        self._step()

    def evict(self) -> None:
        """One more step in this meeting (an impostor was found)."""
        self.evicting = True
        self._step()

    def stored(self, message: Stored) -> None:
        """The peer stored the next generation ``message`` names."""
        self.peer_staged = message.fingerprint
        self._step()
        self._commit()

    def _step(self) -> None:
        record, meeting = self._keeper.record, self.meeting
        if record is None or meeting is None or not self.is_dilated or not record.confirmed:
            return
        wanted = self.steps == 0 or self.evicting or self.peer_staged is not None
        if not wanted or self.staged is not None or record.pending is not None:
            return
        self.evicting = False
        try:
            material = meeting.derive(derive.next_purpose(record.current.number))
            pending = self._keeper.stage(derive.next_secret(record.current.secret, material))
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        self.staged = pending.fingerprint
        self._sync()
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
            current = self._keeper.commit(staged)
        except (PairingError, ValueError) as e:
            self._fail(e)
            return
        self.steps += 1
        self._sync()
        record: Any = self._keeper.record
        self._emit("ratchet", peer=record.peer.name, generation=current.number)
        self._step()
