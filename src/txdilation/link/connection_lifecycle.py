"""L2: the lifecycle machine of one candidate connection, and its core.

The module-level Automat machine ``l2_machine`` over an :class:`L2Core`
(state-diagrams/connection_lifecycle.svg); the connection
(:class:`~txdilation.link.connection.DilatedConnectionProtocol`, the Twisted glue with the byte
path) feeds it inputs and is driven by it through the narrow :class:`L2Connection` protocol.
The ``selected`` state's data is the record sink.

Invariants: every (state, input) pair is a transition or a documented rejection
(``wire.machines.complete``): an input the protocol has no place for drops the connection (a
``PROTOCOL_ERROR``), and every input is a no-op once closed; ``kcm_received`` returns whether
the owner may select the connection now (the first KCM), the state updated first, so the
owner's ``select`` is never an input queued behind the transition it causes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import cast

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall

from txdilation.wire.contracts import ICandidateOwner, IDilatedConnection, IRecordSink
from txdilation.wire.machines import complete
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import KCM, Record
from txdilation.wire.roles import FOLLOWER, LEADER, Role

__all__ = ["L2Connection", "L2Core", "L2Events", "Selected", "l2_machine"]


class L2Events(TypingProtocol):
    """Lifecycle inputs of one L2 connection."""

    def connected_via_relay(self) -> None:
        """TCP connected to a transit relay: send the relay line, wait for ``ok``."""

    def connected_directly(self) -> None:
        """TCP connected (either direction) without a relay: send our prologue."""

    def relay_accepted(self) -> None:
        """The relay answered ``ok``: the peer is on the other end now."""

    def prologue_received(self) -> None:
        """The peer's prologue arrived intact."""

    def handshake_completed(self) -> None:
        """The Noise handshake finished; transport messages may flow."""

    def kcm_received(self) -> bool:
        """The peer's KCM arrived (before selection); True when the owner may now select
        this connection (the first KCM), False when it was refused."""

    def select(self, sink: IRecordSink) -> None:
        """The connector chose this connection: deliver records to ``sink`` from now on."""

    def lost(self, reason: LinkLoss) -> None:
        """The TCP connection is gone."""


class L2Connection(TypingProtocol):
    """What the machine has its connection do (the connection's side of the machine; the
    connection is also the ``IDilatedConnection`` its owner and sink know)."""

    def send_relay_line(self) -> None: ...

    def send_prologue(self) -> None: ...

    def start_handshake(self) -> None: ...

    def await_kcm(self) -> None: ...

    def deliver_to(self, sink: IRecordSink) -> None: ...

    def send_record(self, record: Record) -> None: ...

    def fail(self, reason: LinkLoss) -> None: ...


@dataclass(eq=False)
class L2Core:
    """What every state of one L2 connection's machine shares (its core): the connection whose
    bytes it steers, who hears about it before selection, its handshake timer, and the
    records held between the peer's KCM and our selection. The ``selected`` state's data is
    the record sink."""

    connection: L2Connection
    role: Role
    owner: ICandidateOwner
    timer: IDelayedCall | None = None
    #: records that followed the peer's KCM before we were selected (a list from then on)
    held: list[Record] | None = None

    def cancel_timer(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None


def _build_l2_machine() -> Callable[[L2Core], L2Events]:
    b = TypeMachineBuilder(L2Events, L2Core)
    idle = b.state("idle")
    relaying = b.state("relaying")
    prologuing = b.state("prologuing")
    handshaking = b.state("handshaking")
    confirming = b.state("confirming")
    nominated = b.state("nominated")
    selected = b.state("selected", _selected)
    closed = b.state("closed")

    @idle.upon(L2Events.connected_via_relay).to(relaying)
    def send_relay_line(events: L2Events, c: L2Core) -> None:
        c.connection.send_relay_line()

    @idle.upon(L2Events.connected_directly).to(prologuing)
    @relaying.upon(L2Events.relay_accepted).to(prologuing)
    def send_prologue(events: L2Events, c: L2Core) -> None:
        c.connection.send_prologue()

    @prologuing.upon(L2Events.prologue_received).to(handshaking)
    def start_handshake(events: L2Events, c: L2Core) -> None:
        c.connection.start_handshake()

    @handshaking.upon(L2Events.handshake_completed).to(confirming)
    def await_kcm(events: L2Events, c: L2Core) -> None:
        c.connection.await_kcm()
        if c.role is FOLLOWER:
            c.connection.send_record(KCM())

    @confirming.upon(L2Events.kcm_received).to(nominated)
    def nominate(events: L2Events, c: L2Core) -> bool:
        c.held = []  # records may come right behind the KCM, before the owner selects us
        return True  # the owner may select us now

    @nominated.upon(L2Events.select).to(selected)
    def become_selected(events: L2Events, c: L2Core, sink: IRecordSink) -> None:
        c.cancel_timer()
        c.connection.deliver_to(sink)
        if c.role is LEADER:
            c.connection.send_record(KCM())

    @nominated.upon(L2Events.kcm_received).to(nominated)
    def second_kcm(events: L2Events, c: L2Core) -> bool:
        c.connection.fail(LinkLoss(Cause.PROTOCOL_ERROR, "second KCM before selection"))
        return False

    for state in (idle, relaying, prologuing, handshaking, confirming, nominated):

        @state.upon(L2Events.lost).to(closed)
        def lost_candidate(events: L2Events, c: L2Core, reason: LinkLoss) -> None:
            c.cancel_timer()
            c.owner.candidate_failed(c.connection, reason)

    @selected.upon(L2Events.lost).to(closed)
    def lost_selected(events: L2Events, c: L2Core, s: Selected, reason: LinkLoss) -> None:
        s.sink.connection_lost(cast(IDilatedConnection, c.connection), reason)

    # Documented rejections: inputs that can only come from a confused caller or a peer that
    # broke the protocol. They drop the connection (or are ignored once closed) instead of
    # raising NoTransition into the reactor.
    def reject(event: Callable[..., object]) -> Callable[..., None]:
        why = LinkLoss(Cause.PROTOCOL_ERROR, _REJECTED[event.__name__])

        def rejected(events: L2Events, c: L2Core, *args: object) -> None:
            c.connection.fail(why)

        return rejected

    every = (idle, relaying, prologuing, handshaking, confirming, nominated, selected)
    complete(b, every, [getattr(L2Events, n) for n in _REJECTED], reject)
    complete(b, [closed])
    return b.build()


@dataclass(frozen=True)
class Selected:
    """The ``selected`` state's data: where its records go."""

    sink: IRecordSink


def _selected(events: L2Events, c: L2Core, sink: IRecordSink) -> Selected:
    return Selected(sink)


#: why each input is refused where the protocol has no place for it (``lost`` never is)
_REJECTED = {
    "connected_via_relay": "connected twice",
    "connected_directly": "connected twice",
    "relay_accepted": "relay ok at the wrong time",
    "prologue_received": "prologue at the wrong time",
    "handshake_completed": "handshake completed twice",
    "kcm_received": "KCM at the wrong time",
    "select": "selected before the KCM exchange",
}
l2_machine = _build_l2_machine()
