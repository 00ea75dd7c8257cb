"""Pairing facade: the lifecycle of :class:`~txdilation.pairing.paired_wormhole.PairedWormhole`, the
module-level Automat machine ``paired_machine`` over a :class:`PairedCore`
(state-diagrams/paired_lifecycle.svg).

States: ``idle``, ``pairing`` (the code meeting), ``waiting`` (for a meeting without a code),
``connected`` (a meeting is dilated), ``closing``, ``closed``. The core's
:class:`~txdilation.pairing.conduct.Conductor` runs the meetings and is told the machine's
inputs when it starts one.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); the ``when_dilated()`` waiters fire on each dilation and fail
once on a fatal error or a close; a fatal error is reported once (``on_failed``); the close
waiters fire once everything is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.python.failure import Failure

from txdilation.pairing.conduct import Conductor
from txdilation.pairing.pairing_errors import PairingError
from txdilation.wire.machines import complete
from txdilation.wire.waiting import Waiters

__all__ = ["PairedCore", "PairedEvents", "paired_machine"]


class PairedEvents(TypingProtocol):
    """Inputs of the paired wormhole's lifecycle machine."""

    def start_pairing(self) -> None:
        "No pairing file: run the code meeting."

    def start_paired(self) -> None:
        "A pairing file: meet the peer without a code."

    def paired(self) -> None:
        "The code meeting wrote the pairing (and is dilated)."

    def meeting_dilated(self) -> None:
        "A derived meeting is dilated."

    def meeting_lost(self) -> None:
        "The current meeting ended."

    def failed(self, failure: Failure) -> None:
        "A fatal error: the paired wormhole cannot go on."

    def close(self) -> None:
        "Close everything (the facade registered a waiter)."

    def stopped(self) -> None:
        "Everything is closed."


@dataclass
class PairedCore:
    """What the machine's behaviours work on."""

    conductor: Conductor
    on_failed: Callable[[Failure], object] | None
    dilated_waiters: Waiters[None] = field(default_factory=Waiters)
    close_waiters: Waiters[None] = field(default_factory=Waiters)
    failure: Failure | None = None

    def release_dilated(self) -> None:
        self.dilated_waiters.fire(None)

    def fail_dilated(self, failure: Failure) -> None:
        self.dilated_waiters.fire(failure)

    def release_closed(self) -> None:
        self.close_waiters.fire(None)


def _build_paired_machine() -> TypeMachine[PairedEvents, PairedCore]:
    b = TypeMachineBuilder(PairedEvents, PairedCore)
    idle = b.state("idle")
    pairing = b.state("pairing")
    waiting = b.state("waiting")
    connected = b.state("connected")
    closing = b.state("closing")
    closed = b.state("closed")
    I = PairedEvents  # noqa: E741 (a short alias keeps the table readable)

    @idle.upon(I.start_pairing).to(pairing)
    def run_code_meeting(inputs: PairedEvents, core: PairedCore) -> None:
        core.conductor.inputs = inputs
        core.conductor.start_pairing()

    @idle.upon(I.start_paired).to(waiting)
    def meet(inputs: PairedEvents, core: PairedCore) -> None:
        core.conductor.inputs = inputs
        core.conductor.start_paired()

    @pairing.upon(I.paired).to(connected)
    @waiting.upon(I.meeting_dilated).to(connected)
    @connected.upon(I.meeting_dilated).loop()
    def dilated(inputs: PairedEvents, core: PairedCore) -> None:
        core.release_dilated()

    @connected.upon(I.meeting_lost).to(waiting)
    def lost(inputs: PairedEvents, core: PairedCore) -> None:
        pass  # when_dilated() waits for the next meeting from now on

    def stop(inputs: PairedEvents, core: PairedCore) -> None:
        core.conductor.stop().addBoth(lambda _: inputs.stopped())

    @pairing.upon(I.failed).to(closing)
    @waiting.upon(I.failed).to(closing)
    @connected.upon(I.failed).to(closing)
    def failed(inputs: PairedEvents, core: PairedCore, failure: Failure) -> None:
        core.failure = failure
        core.fail_dilated(failure)
        if core.on_failed is not None:
            core.on_failed(failure)
        stop(inputs, core)

    @pairing.upon(I.close).to(closing)
    @waiting.upon(I.close).to(closing)
    @connected.upon(I.close).to(closing)
    def close(inputs: PairedEvents, core: PairedCore) -> None:
        core.fail_dilated(_closed())
        stop(inputs, core)

    @idle.upon(I.close).to(closed)
    @closed.upon(I.close).loop()
    def already_closed(inputs: PairedEvents, core: PairedCore) -> None:
        core.fail_dilated(_closed())
        core.release_closed()

    @closing.upon(I.stopped).to(closed)
    def finished(inputs: PairedEvents, core: PairedCore) -> None:
        core.release_closed()

    every = [idle, pairing, waiting, connected, closing, closed]
    names = (
        "start_pairing",
        "start_paired",
        "paired",
        "meeting_dilated",
        "meeting_lost",
        "failed",
        "close",
        "stopped",
    )
    complete(b, every, [getattr(I, n) for n in names])
    return b.build()


def _closed() -> Failure:
    return Failure(PairingError("the paired wormhole was closed"))  # type: ignore[no-untyped-call]


paired_machine = _build_paired_machine()
