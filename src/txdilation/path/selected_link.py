"""L3: the selected link, the one connection a generation selected, while it carries records.

A :class:`SelectedLink` is its L2 connection's record sink (``IRecordSink``); it owns what lives
as long as the link: the dispatch of received records, the liveness check and the dead-path
detector, which reads the ``sent_log`` L4 notes its writes in (SelectedLink is not on the
write path).

Invariants: every record is dispatched once, by type (OPEN, DATA, CLOSE, ACK and PING to L4,
PONG to the :class:`~txdilation.path.liveness.PingTracker`, others dropped); nothing
blocks or queues; the owner hears ``link_silent`` and ``link_lost`` once each, then nothing;
a dead path aborts the connection at once, and so does a network change that took its local
address (any other is probed); a retired link dispatches what
still arrives until :data:`RETIRE_GRACE`; a standby link carries only keepalives until the peer
moves there (``standby_used``) or :meth:`promote`. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from txdilation.durable.sent_log import SentLog
from txdilation.path.dead_path import DeadPathDetector
from txdilation.path.liveness import Liveness, PingTracker
from txdilation.path.netwatch import address_is_local
from txdilation.path.tcp_info import peer_tcp_alive
from txdilation.wire.contracts import IDilatedConnection, IRecordReceiver, IRecordSink
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ack, Close, Data, Open, Ping, Pong, Record

#: Seconds a retired link stays open for what is still in flight on it: the peer moves to the
#: new link within about one round trip of the old path, and anything still unacknowledged
#: is replayed on the new link anyway.
RETIRE_GRACE = 2.0
RETIRED = LinkLoss(Cause.PATH_UPGRADE, "retired: the wormhole moved to another path")
#: seconds between the Leader's keepalives on a standby link
STANDBY_PING_INTERVAL = 15.0
#: the PING id that says "I moved to this standby link" (only ever sent on a standby link)
MOVED = b"\xffmov"


def _transport(connection: IDilatedConnection) -> Any:
    return getattr(connection, "transport", None)


def _local_host(transport: Any) -> str | None:
    """The local IP address of a TCP transport (None for anything else)."""
    try:
        host = transport.getHost().host
    except Exception:
        return None
    return host if isinstance(host, str) else None


__all__ = ["MOVED", "RETIRE_GRACE", "STANDBY_PING_INTERVAL", "LinkOwner", "SelectedLink"]

_log = Logger()


class LinkOwner(Protocol):
    """What a selected link reports to (``mailbox.selection_reports.LinkReports``)."""

    def link_lost(self, link: SelectedLink, reason: LinkLoss) -> None:
        """The connection is gone, because of ``reason``. Called once."""

    def link_silent(self, link: SelectedLink) -> None:
        """Nothing arrived for 1.5 ping intervals. Called at most once."""

    def standby_used(self, link: SelectedLink) -> None:
        """(a standby link) the peer moved the wormhole to it."""


@implementer(IRecordSink)
class SelectedLink:
    """One selected connection while it carries records (see the module docstring).

    :param connection: the selected L2 connection.
    :param owner: told when the link is lost or silent.
    :param receiver: L4, which takes the OPEN, DATA, CLOSE and ACK records and answers PINGs.
    :param pings: the wormhole's ping tracker (shared with the links before and after).
    :param clock: the reactor's time.
    :param ping_interval: seconds between our PINGs.
    :param on_alive: called with the RTT (or None) after each PING or PONG received.
    :param standby: a standby link (see the module docstring) until :meth:`promote`.
    :param leads: we are the Leader (on a standby link only the Leader pings).
    """

    def __init__(
        self,
        connection: IDilatedConnection,
        *,
        owner: LinkOwner,
        receiver: IRecordReceiver,
        pings: PingTracker,
        clock: IReactorTime,
        ping_interval: float,
        on_alive: Callable[[float | None], object],
        standby: bool = False,
        leads: bool = True,
    ) -> None:
        self.connection: IDilatedConnection = connection
        self._owner = owner
        self._pings = pings
        self._on_alive = on_alive
        self._clock = clock
        self.last_received_at: float | None = None
        """``clock.seconds()`` when the last record arrived (None before the first)."""
        self._lost = False
        self.retired = False
        """True once the wormhole moved to another link (see :meth:`retire`)."""
        self._retire_call: IDelayedCall | None = None
        self._receiver = receiver
        reading_paused = lambda: bool(connection.reading_paused)  # noqa: E731
        self.dead_path = DeadPathDetector(
            clock,
            send_probe=self._send_probe,
            on_dead=self._dead,
            kernel_alive=lambda within: peer_tcp_alive(_transport(connection), within),
            reading_paused=reading_paused,
        )
        self.standby = standby
        """A standby link, not carrying the wormhole (yet)."""
        self._reading_paused = reading_paused
        self._liveness = self._start_liveness(
            STANDBY_PING_INTERVAL if standby else ping_interval, pinging=leads or not standby
        )

    def _start_liveness(self, interval: float, pinging: bool) -> Liveness:
        return Liveness(
            self._clock,
            interval,
            send_ping=self._send_ping if pinging else lambda: None,
            on_silent=self._silent,
            reading_paused=self._reading_paused,
        )

    def promote(self, ping_interval: float) -> None:
        """A standby link now carries the wormhole: an ordinary link from here on (both sides
        ping every ``ping_interval``)."""
        if not self.standby or self._lost:
            return
        self.standby = False
        self._liveness.stop()
        self._liveness = self._start_liveness(ping_interval, pinging=True)

    def announce_move(self) -> None:
        """Tell the peer that the wormhole moved to this (standby) link."""
        self.connection.send_record(Ping(MOVED))

    def __repr__(self) -> str:
        return f"<SelectedLink {self.description}>"

    @property
    def description(self) -> str:
        """How the connection was made, e.g. ``->tcp:127.0.0.1:4001``."""
        return str(self.connection.description)

    @property
    def is_direct(self) -> bool:
        """False when the connection goes through a transit relay."""
        return bool(self.connection.is_direct)

    @property
    def silence_limit(self) -> float:
        """Seconds of silence after which the link is reported silent (at the latest)."""
        return self._liveness.silence_limit

    # --- IRecordSink (from the L2 connection) ---

    def got_record(self, record: Record) -> None:
        self._liveness.received += 1
        self.last_received_at = self._clock.seconds()
        if self.standby and not self._lost:
            if isinstance(record, Ping) and record.ping_id == MOVED:
                self._owner.standby_used(self)
                return
            if not isinstance(record, Ping | Pong):
                self._owner.standby_used(self)
        if isinstance(record, Data):
            self._receiver.got_data(record)
        elif isinstance(record, Ack):
            self.dead_path.acked(record.resp_seqnum)
            self._receiver.got_ack(record)
        elif isinstance(record, Ping):
            self._got_ping(record)
        elif isinstance(record, Pong):
            self._got_pong(record)
        elif isinstance(record, Open):
            self._receiver.got_open(record)
        elif isinstance(record, Close):
            self._receiver.got_close(record)
        else:
            _log.warn("unexpected record {record!r} on {link!r}", record=record, link=self)

    def connection_lost(self, connection: IDilatedConnection, reason: LinkLoss) -> None:
        if self._lost:
            return
        self._lost = True
        self._stop_checks()
        if self._retire_call is not None and self._retire_call.active():
            self._retire_call.cancel()
        self._retire_call = None
        self._owner.link_lost(self, reason)

    @property
    def sent_log(self) -> SentLog:
        """Where L4 notes its writes to this link (``Multiplexer.connection_made``)."""
        return self.dead_path.sent_log

    # --- PING / PONG ---

    def _send_ping(self) -> None:
        self.connection.send_record(Ping(self._pings.next_ping()))
        self.dead_path.pinged()

    def _send_probe(self) -> None:
        self.connection.send_record(Ping(self._pings.next_ping()))

    def network_changed(self) -> bool:
        """The host's addresses or routes changed: a connection bound to an address we no
        longer have is dropped at once (True); any other is probed now (False)."""
        host = _local_host(_transport(self.connection))
        if host is not None and not address_is_local(host):
            self.fail(LinkLoss(Cause.NETWORK_CHANGE, f"network change: our address {host} is gone"))
            return True
        self.dead_path.probe_now()
        return False

    def _dead(self, reason: LinkLoss) -> None:
        _log.info(
            "{link!r}: {reason}: abandoning it",
            link=self,
            reason=reason.message,
            cause=reason.cause.value,
        )
        self.fail(reason)

    def send_app_ping(self, ping_id: bytes) -> None:
        """Send the application's PING (already registered with the tracker)."""
        self.connection.send_record(Ping(ping_id))

    def _got_ping(self, record: Ping) -> None:
        self._receiver.answer_ping(self.connection, record)
        self._on_alive(None)

    def _got_pong(self, record: Pong) -> None:
        rtt = self._pings.pong(record.ping_id)
        self.dead_path.pong(rtt)
        self._on_alive(rtt)

    def _silent(self) -> None:
        _log.info(
            "nothing heard on {link!r} for 1.5 ping intervals ({s:.3g}s): abandoning it",
            link=self,
            s=self._liveness.silence_limit,
        )
        self._owner.link_silent(self)

    # --- closing ---

    def _stop_checks(self) -> None:
        self._liveness.stop()
        self.dead_path.stop()

    def stop(self) -> None:
        """No more liveness checks (the link is being closed on purpose)."""
        self._stop_checks()

    def fail(self, reason: LinkLoss) -> None:
        """Drop the connection now because of ``reason`` (logged by the L2 layer)."""
        self._stop_checks()
        self.connection.fail(reason)

    def abort(self) -> None:
        """Drop the connection now (``abortConnection``)."""
        self._stop_checks()
        self.connection.abort()

    def retire(self, grace: float = RETIRE_GRACE) -> None:
        """The wormhole moved to another link: no more checks (its silence means nothing
        now); abort the connection ``grace`` seconds from now (whatever it still holds is
        replayed on the new link: no reason to wait for a slow or dead path to drain). What
        arrives meanwhile is still dispatched. Idempotent."""
        if self.retired or self._lost:
            return
        self.retired = True
        self._stop_checks()
        self._retire_call = self._clock.callLater(grace, self._close_retired)

    def _close_retired(self) -> None:
        self._retire_call = None
        if not self._lost:
            self.connection.fail(RETIRED)

    def disconnect(self) -> None:
        """Close the connection politely (``loseConnection``): only for a link whose peer
        acknowledged everything (closing drains first); a dead path is aborted instead."""
        self._stop_checks()
        self.connection.disconnect()
