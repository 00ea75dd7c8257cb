"""L4 inbound: the lifecycle of :class:`~txdilation.durable.inbound.Inbound`, the module-level
Automat machine ``inbound_machine``: which connection ACKs go to, and whether it is read.

States: ``idle`` (no connection), ``reading``, ``throttled`` (reading paused: paused
subchannels hold more than ``max_buffered_inbound_bytes``), ``idle_throttled`` (no connection,
and the next one starts paused), ``stopped``. Inbound tells the machine when what paused
subchannels hold crosses the bound (``buffer_full``) or half of it on the way down
(``buffer_drained``); a crossing the machine already follows is a no-op, so whether reading is
paused is recorded here only.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); the core's two fields are the per-record path's gates, set only
by transitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder

from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.machines import complete

__all__ = ["InboundCore", "InboundEvents", "inbound_machine"]


class InboundEvents(TypingProtocol):
    """Lifecycle inputs of :class:`Inbound` (connection and read throttling)."""

    def connection_made(self, connection: IDilatedConnection) -> None:
        "A connection was selected."

    def connection_lost(self) -> None:
        "The connection is gone."

    def buffer_full(self) -> None:
        "Paused subchannels hold more than the bound: stop reading the connection."

    def buffer_drained(self) -> None:
        "They are back under half of the bound: read again."

    def stop(self) -> None:
        "The wormhole is closing."


@dataclass
class InboundCore:
    """The per-record path's two gates, set only by the machine's transitions: the connection
    to acknowledge on (None: none now), and whether the wormhole stopped."""

    connection: IDilatedConnection | None = None
    stopped: bool = False


def _build_inbound_machine() -> TypeMachine[InboundEvents, InboundCore]:
    b = TypeMachineBuilder(InboundEvents, InboundCore)
    idle = b.state("idle")
    idle_throttled = b.state("idle_throttled")
    reading = b.state("reading")
    throttled = b.state("throttled")
    stopped = b.state("stopped")
    I = InboundEvents  # noqa: E741 (a short alias keeps the transition table readable)

    @idle.upon(I.connection_made).to(reading)
    @reading.upon(I.connection_made).to(reading)
    def read_from(m: InboundEvents, c: InboundCore, connection: IDilatedConnection) -> None:
        c.connection = connection

    @idle_throttled.upon(I.connection_made).to(throttled)
    @throttled.upon(I.connection_made).to(throttled)
    def hold_reading(m: InboundEvents, c: InboundCore, connection: IDilatedConnection) -> None:
        c.connection = connection
        connection.pause_reading()

    @reading.upon(I.buffer_full).to(throttled)
    def pause_reading(m: InboundEvents, c: InboundCore) -> None:
        assert c.connection is not None
        c.connection.pause_reading()

    @throttled.upon(I.buffer_drained).to(reading)
    def resume_reading(m: InboundEvents, c: InboundCore) -> None:
        assert c.connection is not None
        c.connection.resume_reading()

    @reading.upon(I.connection_lost).to(idle)
    @throttled.upon(I.connection_lost).to(idle_throttled)
    def forget_connection(m: InboundEvents, c: InboundCore) -> None:
        c.connection = None

    idle.upon(I.buffer_full).to(idle_throttled).returns(None)
    idle_throttled.upon(I.buffer_drained).to(idle).returns(None)

    for state in (idle, idle_throttled, reading, throttled):

        @state.upon(I.stop).to(stopped)
        def finish(m: InboundEvents, c: InboundCore) -> None:
            c.connection = None
            c.stopped = True

    # Everything else is a harmless repeat (a crossing reported where reading already is as
    # it should be, a lost connection reported twice) or comes after stop: a no-op.
    complete(b, [idle, idle_throttled, reading, throttled, stopped])
    return b.build()


inbound_machine = _build_inbound_machine()
