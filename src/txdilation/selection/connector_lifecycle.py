"""L3: the selection policy of one generation's race, the module-level Automat machine
``connector_machine`` over a :class:`~txdilation.selection.race.ConnectorCore` (its inputs
``ConnectorEvents`` and the ``holding`` state's :class:`~txdilation.selection.race.Holding`
are there too), fed by the facade :class:`~txdilation.selection.connector.Connector`;
state-diagrams/connector_lifecycle.svg. The policy in full: docs/module-notes.md.

States: ``connecting``, ``holding`` (a Leader holds relay candidates for a grace period),
``connected``, ``upgrading`` (a relayed link is selected; looking for a direct one),
``stopped``. "State first, then events" (docs/architecture.md): a follow-up input is made by
the behaviour, and Automat runs it once the transition is done.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); a candidate that completes after the selection or the stop is
aborted at once; while upgrading, a relayed candidate is refused.
"""

from __future__ import annotations

from collections.abc import Callable

from automat import TypeMachineBuilder

from txdilation.selection.hints import Hint, encode_hint
from txdilation.selection.race import Candidate, ConnectorCore, ConnectorEvents, Holding
from txdilation.wire.machines import complete

__all__ = ["connector_machine"]


def _start_holding(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> Holding:
    """Enter ``holding`` with ``candidate``: the grace starts now."""
    since = c.reactor.seconds()
    timer = c.reactor.callLater(c.relay_grace(), events.grace_expired)
    return Holding([candidate], since, timer)


def _take(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
    """Select ``candidate``. A relayed start with a peer that moves links goes on to
    ``upgrading``: the behaviour makes that ``keep_looking`` follow-up first, and Automat runs
    it once this transition is done (docs/architecture.md, "state first, then events")."""
    if c.upgrades(candidate):
        events.keep_looking()
    c.select(candidate)


def _build_connector_machine() -> Callable[[ConnectorCore], ConnectorEvents]:
    b = TypeMachineBuilder(ConnectorEvents, ConnectorCore)
    connecting = b.state("connecting")
    holding = b.state("holding", _start_holding)
    connected = b.state("connected")
    upgrading = b.state("upgrading")
    stopped = b.state("stopped")
    E = ConnectorEvents

    @connecting.upon(E.listener_ready).loop()
    @holding.upon(E.listener_ready, nodata=True).loop()
    @upgrading.upon(E.listener_ready).loop()
    def publish_hints(events: ConnectorEvents, c: ConnectorCore, hints: list[Hint]) -> None:
        c.owner.send_hints([encode_hint(h) for h in hints])

    @connecting.upon(E.hints_received).loop()
    @holding.upon(E.hints_received, nodata=True).loop()
    @upgrading.upon(E.hints_received).loop()
    def use_hints(events: ConnectorEvents, c: ConnectorCore, hints: list[Hint]) -> None:
        c.dialer.use_hints(hints)

    @connecting.upon(E.candidate_ready).loop()
    @holding.upon(E.candidate_ready, nodata=True).loop()
    def count_and_line_up(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.count += 1
        c.line_up(events, candidate)

    @upgrading.upon(E.candidate_ready).loop()
    def line_up_for_the_move(
        events: ConnectorEvents, c: ConnectorCore, candidate: Candidate
    ) -> None:
        c.line_up(events, candidate)

    @connected.upon(E.candidate_ready).loop()
    @stopped.upon(E.candidate_ready).loop()
    def line_up_late(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.line_up(events, candidate)  # to be dropped on its turn

    @connecting.upon(E.decisive_candidate).to(connected)
    @connecting.upon(E.relay_candidate).to(connected)
    def select(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        _take(events, c, candidate)

    @holding.upon(E.decisive_candidate).to(connected)
    @holding.upon(E.relay_candidate).to(connected)
    def select_instead(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        holding.stop_timer()
        _take(events, c, candidate)

    @connecting.upon(E.tentative_candidate).to(holding)
    def hold(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        """(The state's data holds it: see ``_start_holding``.)"""

    @holding.upon(E.tentative_candidate).loop()
    def hold_another(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        holding.held.append(candidate)

    @holding.upon(E.candidate_gone).loop()
    def forget_held(
        events: ConnectorEvents, c: ConnectorCore, holding: Holding, candidate: Candidate
    ) -> None:
        if candidate in holding.held:
            holding.held.remove(candidate)
            if not holding.held:
                events.tentative_gone()  # (a follow-up: runs once this transition is done)

    @holding.upon(E.grace_expired).to(connected)
    def select_held(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        _take(events, c, holding.held[0])

    @connected.upon(E.keep_looking).to(upgrading)
    @connecting.upon(E.keep_looking).to(upgrading)
    def look_for_direct(events: ConnectorEvents, c: ConnectorCore) -> None:
        """The relayed link is the owner's (selected here, or by an earlier connector of the
        generation: ``Purpose.UPGRADE``); this connector goes on with direct paths."""

    @upgrading.upon(E.decisive_candidate).to(connected)
    def upgrade(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.upgrade(candidate)

    @upgrading.upon(E.tentative_candidate).loop()
    @upgrading.upon(E.relay_candidate).loop()
    def refuse_relay(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        c.candidates.pop(candidate.connection, None)
        candidate.connection.abort()  # (never a relay again once one carries the link)

    @holding.upon(E.tentative_gone).to(connecting)
    def release(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        holding.stop_timer()

    @connecting.upon(E.stop).to(stopped)
    @connected.upon(E.stop).to(stopped)
    @upgrading.upon(E.stop).to(stopped)
    def stop_everything(events: ConnectorEvents, c: ConnectorCore) -> None:
        c.stop_looking()
        c.close_others(keep=c.selected)

    @holding.upon(E.stop).to(stopped)
    def stop_holding(events: ConnectorEvents, c: ConnectorCore, holding: Holding) -> None:
        holding.stop_timer()
        c.close_others(keep=c.selected)

    # Late arrivals after selection are closed at once (stock defect 9); a direct one that
    # completed while a stock peer's link is relayed proves a direct path first.
    @connected.upon(E.decisive_candidate).loop()
    @connected.upon(E.tentative_candidate).loop()
    @connected.upon(E.relay_candidate).loop()
    def drop_late(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        connection, selected = candidate.connection, c.selected
        if c.looking and connection.is_direct and selected is not None and not selected.is_direct:
            c.proven(f"{connection.description} completed its handshake")
        connection.abort()

    @stopped.upon(E.decisive_candidate).loop()
    @stopped.upon(E.tentative_candidate).loop()
    @stopped.upon(E.relay_candidate).loop()
    def drop_after_stop(events: ConnectorEvents, c: ConnectorCore, candidate: Candidate) -> None:
        candidate.connection.abort()

    # Everything else is a documented no-op: hints and listener news after selection or
    # stop, stray timer inputs, candidates gone while none is held, a repeated stop.
    every = (connecting, holding, connected, upgrading, stopped)
    complete(b, every)
    return b.build()


connector_machine = _build_connector_machine()
