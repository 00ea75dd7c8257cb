"""Session: the lifecycle of :class:`~txdilation.session.service.Session`, the module-level
Automat machine ``session_machine`` over a :class:`~txdilation.session.core.SessionCore` (its
inputs ``SessionEvents`` are there too); state-diagrams/service_lifecycle.svg.

States: ``idle``, ``running``, ``draining`` (the grace period of a clean stop), ``closing``
(the wormhole is closing), ``stopped``. The behaviours call the core's start, stop and end.

Invariants: every (state, input) pair is a transition or a documented no-op
(``wire.machines.complete``); a fatal error is reported only while running (afterwards it is
logged); every stop waiter is released once stopped.
"""

from __future__ import annotations

from automat import TypeMachine, TypeMachineBuilder
from twisted.logger import Logger

from txdilation.reporting.status_log import NAMESPACE
from txdilation.session.core import SessionCore, SessionEvents
from txdilation.wire.machines import complete

__all__ = ["session_machine"]

#: the session's lines are "[txdilation.session] ..." (users and docs/plugin.md read them)
_log = Logger(namespace=NAMESPACE)


def _build_session_machine() -> TypeMachine[SessionEvents, SessionCore]:
    b = TypeMachineBuilder(SessionEvents, SessionCore)
    idle = b.state("idle")
    running = b.state("running")
    draining = b.state("draining")
    closing = b.state("closing")
    stopped = b.state("stopped")
    I = SessionEvents  # noqa: E741 (a short alias keeps the transition table readable)

    @idle.upon(I.start).to(running)
    def begin(inputs: SessionEvents, core: SessionCore) -> None:
        core.inputs = inputs
        core.begin()

    @idle.upon(I.stop).to(stopped)
    @idle.upon(I.stop_now).to(stopped)
    @stopped.upon(I.stop).loop()
    @stopped.upon(I.stop_now).loop()
    def already_stopped(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.release_waiters()

    @running.upon(I.stop).to(draining)
    def drain(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.stop_accepting(reason, core.config.drain_timeout)
        core.wait_for_drain()

    @running.upon(I.stop_now).to(closing)
    def stop_at_once(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.stop_accepting(reason, 0)
        core.cut_and_close(f"stopped at once ({reason})")

    @draining.upon(I.stop_now).to(closing)
    def force(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        core.writer.emit("stopping", reason=reason, open=core.forwarder.live, forced=True)
        core.cut_and_close(f"the stop was forced ({reason})")

    @running.upon(I.failed).to(closing)
    def fail(
        inputs: SessionEvents, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        core.writer.emit("error", message=message, where=where, fatal=True, advice=advice)
        core.outcome = "failed"
        core.stop_accepting("", 0)
        core.cut_and_close("the session failed")

    @running.upon(I.peer_left).to(closing)
    def peer_closed(inputs: SessionEvents, core: SessionCore) -> None:
        core.outcome = "peer-closed"
        core.stop_accepting("peer-closed", 0)
        core.cut_and_close("the peer stopped with it open")

    @draining.upon(I.stop).loop()
    @closing.upon(I.stop).loop()
    @closing.upon(I.stop_now).loop()
    def wait(inputs: SessionEvents, core: SessionCore, reason: str) -> None:
        pass  # the waiter is registered; finish() releases it

    @draining.upon(I.drained).to(closing)
    def close(inputs: SessionEvents, core: SessionCore) -> None:
        core.cut_and_close(f"the {core.config.drain_timeout:g} s grace period ended")

    @closing.upon(I.closed).to(stopped)
    def finish(inputs: SessionEvents, core: SessionCore, mood: str) -> None:
        core.finish(mood)

    @idle.upon(I.failed).loop()
    @draining.upon(I.failed).loop()
    @closing.upon(I.failed).loop()
    @stopped.upon(I.failed).loop()
    def log_failure(
        inputs: SessionEvents, core: SessionCore, message: str, where: str, advice: str
    ) -> None:
        _log.info("after the stop began ({where}): {message}", where=where, message=message)

    # documented no-ops: a second start; the peer leaving or drain/close results in states
    # where the session is not running or already ending
    complete(b, (idle, running, draining, closing, stopped))
    return b.build()


session_machine = _build_session_machine()
