"""L4 outbound: the lifecycle of :class:`~txdilation.durable.outbound.Outbound`, the module-level
Automat machine ``outbound_machine``: which connection records are written to, and whether now.

States (``state-diagrams/outbound_lifecycle.svg``): ``disconnected``, ``producing``, ``paused``
(the transport paused us), ``stopped``. ``connection_made`` and ``resume`` return whether the
facade writes what is queued: it does so with the machine at rest, so the transport's
``pauseProducing`` during a replay is an ordinary input, never a re-entry.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); the core's ``sink`` (where a record may be written at once) is
set only by transitions: the connection while ``producing``, else None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.interfaces import IPushProducer

from txdilation.durable.queue import SendQueue
from txdilation.wire.contracts import IDilatedConnection, ISentLog
from txdilation.wire.machines import complete

__all__ = ["OutboundCore", "OutboundEvents", "outbound_machine"]


class OutboundEvents(TypingProtocol):
    """Lifecycle inputs of :class:`Outbound`."""

    def connection_made(self, connection: IDilatedConnection, log: ISentLog) -> bool:
        "A connection was selected (writes noted in ``log``): True, the facade replays."

    def connection_lost(self) -> None:
        "The connection is gone: queue from now on."

    def pause(self) -> None:
        "The connection's transport asks us to stop writing."

    def resume(self) -> bool:
        "The connection's transport can take more: True when the facade may flush now."

    def stop(self) -> None:
        "The wormhole is closing."


@dataclass
class OutboundCore:
    """What the machine's transitions set and Outbound's per-record path reads."""

    push_producer: IPushProducer
    queue: SendQueue = field(default_factory=SendQueue)
    connection: IDilatedConnection | None = None
    #: where new records may be written at once: the connection while ``producing``, else None
    sink: IDilatedConnection | None = None
    #: the log of writes to the connection (its link's, read by its dead-path detector)
    sent_log: ISentLog | None = None
    stopped: bool = False

    def release(self) -> None:
        if self.connection is not None:
            self.connection.unregisterProducer()
        self.connection = self.sink = self.sent_log = None


def no_write(m: OutboundEvents, c: OutboundCore, *args: object) -> bool:
    return False


def _build_outbound_machine() -> TypeMachine[OutboundEvents, OutboundCore]:
    b = TypeMachineBuilder(OutboundEvents, OutboundCore)
    disconnected = b.state("disconnected")
    producing = b.state("producing")
    paused = b.state("paused")
    stopped = b.state("stopped")
    alive = (disconnected, producing, paused)
    everywhere = (*alive, stopped)
    I = OutboundEvents  # noqa: E741 (a short alias keeps the transition table readable)

    @disconnected.upon(I.connection_made).to(producing)
    @producing.upon(I.connection_made).to(producing)
    @paused.upon(I.connection_made).to(producing)
    def use_connection(
        m: OutboundEvents, c: OutboundCore, connection: IDilatedConnection, log: ISentLog
    ) -> bool:
        c.release()  # a second connection_made without connection_lost replaces the first
        c.queue.rewind()
        c.connection = c.sink = connection
        c.sent_log = log
        connection.registerProducer(c.push_producer, True)
        return True  # the replay: the facade writes it, this machine at rest

    @producing.upon(I.connection_lost).to(disconnected)
    @paused.upon(I.connection_lost).to(disconnected)
    def stop_using(m: OutboundEvents, c: OutboundCore) -> None:
        c.release()

    @producing.upon(I.pause).to(paused)
    def hold(m: OutboundEvents, c: OutboundCore) -> None:
        c.sink = None

    @paused.upon(I.resume).to(producing)
    def go_on(m: OutboundEvents, c: OutboundCore) -> bool:
        c.sink = c.connection
        return True

    for state in alive:

        @state.upon(I.stop).to(stopped)
        def finish(m: OutboundEvents, c: OutboundCore) -> None:
            c.release()
            c.queue.clear()
            c.stopped = True

    # Harmless repeats: a transport that pauses/resumes twice or after we let it go, a
    # connection_lost without a connection, anything after stop (documented as ignored).
    complete(b, everywhere, (I.connection_made, I.resume), otherwise=lambda _input: no_write)
    complete(b, everywhere)
    return b.build()


outbound_machine = _build_outbound_machine()
