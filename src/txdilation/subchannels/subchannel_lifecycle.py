"""L5: one subchannel's lifecycle, the module-level Automat machine ``subchannel_machine``.

States (state-diagrams/subchannel_lifecycle.svg): ``open``, ``closing``, ``closed`` for
full-close protocols; ``open_half``, ``read_closed``, ``write_closed``, ``closed`` for
``IHalfCloseableProtocol`` ones. Each input sets the state and the core's two gates
(``readable``, ``writable``) and returns the :data:`Steps` that follow, which the facade
(:class:`~txdilation.subchannels.subchannel.SubChannel`) performs once the machine is at rest
("state first, then events", docs/architecture.md); the
:class:`~txdilation.semantics.Semantics` decisions are the machine's.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); nothing in a transition calls the application or L4;
``Finished`` is returned at most once (``closed`` ends the machine); CLOSE is sent at most
once; a refusal changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import TypeAlias

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProducer
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.semantics import STOCK, Semantics
from txdilation.wire.dilation_errors import (
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
)
from txdilation.wire.machines import TypedState, complete

__all__ = [
    "OPEN",
    "OPEN_HALF",
    "Finished",
    "ReadLost",
    "Refused",
    "RegisterProducer",
    "SendClose",
    "Step",
    "Steps",
    "StopProducer",
    "SubchannelCore",
    "SubchannelEvents",
    "WriteLost",
    "subchannel_machine",
]


@dataclass(frozen=True, slots=True)
class SendClose:
    """Send our CLOSE (``awaits_answer``: we closed first, a full-close protocol waiting for
    the peer's CLOSE: ``txdilation.subchannels.unanswered`` may give up on it)."""

    awaits_answer: bool = False


@dataclass(frozen=True, slots=True)
class ReadLost:
    """Call the protocol's ``readConnectionLost()`` (guarded: if it raises, ``fail``)."""


@dataclass(frozen=True, slots=True)
class WriteLost:
    """Call the protocol's ``writeConnectionLost()`` (guarded: if it raises, ``fail``)."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The subchannel is closed: forget its producer and its route (``expect_close``: the
    peer's CLOSE is still to come), then ``connectionLost(reason)`` when ``deliver``."""

    reason: Failure
    expect_close: bool
    deliver: bool = True


@dataclass(frozen=True, slots=True)
class Refused:
    """Raise ``error`` to the caller (nothing changed)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class RegisterProducer:
    """Let L4 pause and resume ``producer`` (``streaming``: a push producer)."""

    producer: IProducer
    streaming: bool


@dataclass(frozen=True, slots=True)
class StopProducer:
    """Stop ``producer`` at once (guarded): registered on a closed subchannel."""

    producer: IProducer


Step: TypeAlias = (
    SendClose | ReadLost | WriteLost | Finished | Refused | RegisterProducer | StopProducer
)
Steps: TypeAlias = tuple[Step, ...]

_NONE: Steps = ()


class SubchannelEvents(TypingProtocol):
    """Inputs of one subchannel's lifecycle; each returns the steps that follow."""

    def remote_close(self) -> Steps:
        "The peer's CLOSE."

    def answer_overdue(self, reason: Failure) -> Steps:
        "The answer to our CLOSE will not come (no link, the peer gone): connectionLost(reason)."

    def late_data(self) -> Steps:
        "DATA from the peer after its CLOSE (dropped)."

    def close(self) -> Steps:
        "The application's loseConnection()."

    def close_write(self) -> Steps:
        "The application's loseWriteConnection()."

    def abandon(self, reason: Failure) -> Steps:
        "The wormhole is closing: connectionLost(reason), nothing sent."

    def fail(self, reason: Failure) -> Steps:
        "The protocol raised: close this subchannel with that failure."

    def register_producer(self, producer: IProducer, streaming: bool) -> Steps:
        "The application's registerProducer()."


@dataclass(slots=True)
class SubchannelCore:
    """What every state shares: the subchannel's id, its kind (``half_closeable``: the
    protocol provides ``IHalfCloseableProtocol``), what its application is promised
    (``semantics``), and the two gates of the byte path, which only transitions change."""

    scid: int
    log: Logger
    semantics: Semantics = STOCK
    half_closeable: bool = False
    readable: bool = True
    writable: bool = True

    def send_close(self, *, awaits_answer: bool = False) -> SendClose:
        """Our write side closes: CLOSE is to be sent."""
        self.writable = False
        return SendClose(awaits_answer)

    def finish(self, reason: Failure, *, expect_close: bool, deliver: bool = True) -> Finished:
        """Both gates close: the close is to be finished."""
        self.readable = self.writable = False
        return Finished(reason, expect_close, deliver)

    def finish_half(self) -> Finished:
        """Both directions of a half-closeable protocol are closed (``connectionLost``
        follows only with the semantics that deliver it)."""
        deliver = self.semantics.half_close_ends_with_connection_lost
        return self.finish(done(), expect_close=False, deliver=deliver)

    def refuse_repeated_close(self, what: str) -> Steps:
        """Our CLOSE went, the peer's has not come: stock refuses another close."""
        if self.semantics.idempotent_close:
            return _NONE
        return (Refused(AlreadyClosedError(f"{what} not allowed on closed subchannel")),)


def done() -> Failure:
    """A clean close (``ConnectionDone()``, as stock's has no message)."""
    return Failure(ConnectionDone())  # type: ignore[no-untyped-call]


_State = TypedState[SubchannelEvents, SubchannelCore]


def _build_subchannel_machine() -> tuple[
    TypeMachine[SubchannelEvents, SubchannelCore], _State, _State
]:
    b = TypeMachineBuilder(SubchannelEvents, SubchannelCore)
    open_ = b.state("open")
    closing = b.state("closing")
    open_half = b.state("open_half")
    read_closed = b.state("read_closed")
    write_closed = b.state("write_closed")
    closed = b.state("closed")
    E = SubchannelEvents

    # --- full-close protocols ---

    @open_.upon(E.remote_close).to(closed)
    def answer_close(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (c.send_close(), c.finish(done(), expect_close=False))

    @open_.upon(E.close).to(closing)
    def start_closing(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (c.send_close(awaits_answer=True),)

    @closing.upon(E.remote_close).to(closed)
    def closed_by_peer(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (c.finish(done(), expect_close=False),)

    @closing.upon(E.answer_overdue).to(closed)
    def answer_given_up(m: SubchannelEvents, c: SubchannelCore, reason: Failure) -> Steps:
        """Closed as if the peer's CLOSE had come (it may still: it is absorbed then)."""
        return (c.finish(reason, expect_close=True),)

    @closing.upon(E.close).loop()
    def close_again(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return c.refuse_repeated_close("loseConnection")

    @open_.upon(E.close_write).loop()
    @closing.upon(E.close_write).loop()
    def refuse_half_close(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (Refused(HalfCloseUsedOnNonHalfCloseable()),)

    # --- half-closeable protocols ---

    @open_half.upon(E.remote_close).to(read_closed)
    def read_side_closed(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        c.readable = False
        return (ReadLost(),)

    @open_half.upon(E.close_write).to(write_closed)
    def write_side_closed(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (c.send_close(), WriteLost())

    @read_closed.upon(E.close_write).to(closed)
    def both_sides_closed(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (c.send_close(), WriteLost(), c.finish_half())

    @write_closed.upon(E.remote_close).to(closed)
    def both_sides_closed_by_peer(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        c.readable = False
        return (ReadLost(), c.finish_half())

    @read_closed.upon(E.remote_close).loop()
    def second_close(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        c.log.warn("subchannel {scid}: second CLOSE from the peer ignored", scid=c.scid)
        return _NONE

    @read_closed.upon(E.late_data).loop()
    def drop_late_data(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        c.log.warn("subchannel {scid}: DATA after the peer's CLOSE", scid=c.scid)
        return _NONE

    @open_half.upon(E.close).loop()
    @read_closed.upon(E.close).loop()
    def refuse_normal_close(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return (Refused(NormalCloseUsedOnHalfCloseable()),)

    @write_closed.upon(E.close).loop()
    def normal_close_after_half_close(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        if c.semantics.idempotent_close:
            return _NONE
        return (Refused(NormalCloseUsedOnHalfCloseable()),)

    @write_closed.upon(E.close_write).loop()
    def close_write_again(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        return c.refuse_repeated_close("loseWriteConnection")

    # --- endings shared by both kinds ---

    for state in (open_, closing, open_half, read_closed, write_closed):

        @state.upon(E.abandon).to(closed)
        def abandoned(m: SubchannelEvents, c: SubchannelCore, reason: Failure) -> Steps:
            deliver = c.semantics.close_delivers_connection_lost
            return (c.finish(reason, expect_close=False, deliver=deliver),)

        @state.upon(E.register_producer).loop()
        def register(
            m: SubchannelEvents, c: SubchannelCore, producer: IProducer, streaming: bool
        ) -> Steps:
            return (RegisterProducer(producer, streaming),)

    @open_.upon(E.fail).to(closed)
    @open_half.upon(E.fail).to(closed)
    def failed_while_open(m: SubchannelEvents, c: SubchannelCore, reason: Failure) -> Steps:
        return (c.send_close(), c.finish(reason, expect_close=True))

    @closing.upon(E.fail).to(closed)
    @write_closed.upon(E.fail).to(closed)
    def failed_after_our_close(m: SubchannelEvents, c: SubchannelCore, reason: Failure) -> Steps:
        return (c.finish(reason, expect_close=True),)

    @read_closed.upon(E.fail).to(closed)
    def failed_after_their_close(m: SubchannelEvents, c: SubchannelCore, reason: Failure) -> Steps:
        return (c.send_close(), c.finish(reason, expect_close=False))

    # --- closed: the kinds differ only in what a close call gets ---

    @closed.upon(E.close).loop()
    def close_when_closed(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        """A no-op for a full-close protocol; refused for a half-closeable one (stock's rule)
        unless closes are idempotent."""
        if c.half_closeable and not c.semantics.idempotent_close:
            return (Refused(NormalCloseUsedOnHalfCloseable()),)
        return _NONE

    @closed.upon(E.close_write).loop()
    def close_write_when_closed(m: SubchannelEvents, c: SubchannelCore) -> Steps:
        """A no-op for a half-closeable protocol; refused for a full-close one."""
        if not c.half_closeable:
            return (Refused(HalfCloseUsedOnNonHalfCloseable()),)
        return _NONE

    @closed.upon(E.register_producer).loop()
    def producer_after_close(
        m: SubchannelEvents, c: SubchannelCore, producer: IProducer, streaming: bool
    ) -> Steps:
        """Nothing is registered: the producer is ignored (stock), or stopped at once (as a
        TCP transport does) with ``producer_stopped_on_close``."""
        if c.semantics.producer_stopped_on_close:
            return (StopProducer(producer),)
        return _NONE

    # Everything else is a documented no-op: the peer's CLOSE or DATA once closed, DATA in a
    # state that still reads (the byte path delivers it there), a second abandon or failure.
    complete(b, [open_, closing, open_half, read_closed, write_closed, closed], otherwise=_no_steps)
    return b.build(), open_, open_half


def _no_steps(event: Callable[..., object]) -> Callable[..., Steps]:
    """The behaviour of every documented no-op: nothing follows."""

    def nothing(m: SubchannelEvents, c: SubchannelCore, *args: object) -> Steps:
        return _NONE

    return nothing


subchannel_machine, OPEN, OPEN_HALF = _build_subchannel_machine()
"""The machine, and its two initial states (full-close and half-closeable protocols)."""
