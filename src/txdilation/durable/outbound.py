"""L4 outbound: sequence numbers, the durable queue of unacked records, replay, producers.

Every OPEN, DATA and CLOSE a subchannel sends passes through :class:`Outbound`, which writes
it to the connection and notes the write in the link's ``SentLog``
(:mod:`txdilation.durable.sent_log`); so do the PONGs it gates (:meth:`Outbound.answer_ping`);
ACK and PING never do. Lifecycle: the machine of :mod:`txdilation.durable.outbound_lifecycle`
(state-diagrams/outbound_lifecycle.svg); the per-record path is plain code.

Invariants: one seqnum counter per wormhole, from 0, never reset; a record stays queued until
a cumulative ACK covers it; each new connection gets every queued record again, in seqnum
order, before anything newer, in batches of about :data:`WRITE_BATCH_BYTES` while the
transport takes them; nothing is sent without a connection, while paused, or after
:meth:`Outbound.stop`; producers run only within ``max_unacked_bytes`` and the in-flight limit
(:mod:`txdilation.durable.window`); counters only grow. In full: docs/module-notes.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IPullProducer, IPushProducer, IReactorTime
from twisted.internet.task import Cooperator
from twisted.logger import Logger
from zope.interface import implementer

from txdilation.durable.outbound_lifecycle import OutboundCore, outbound_machine
from txdilation.durable.producers import ProducerSet
from txdilation.durable.queue import SendQueue
from txdilation.durable.sent_log import SentLog
from txdilation.durable.window import DEFAULT_IN_FLIGHT_FLOOR, InFlightLimit
from txdilation.wire.contracts import IDilatedConnection, ISentLog
from txdilation.wire.limits import DEFAULT_MAX_UNACKED_BYTES, RECORD_OVERHEAD
from txdilation.wire.records import Ack, Close, Data, Open, Ping, Pong, SequencedRecord
from txdilation.wire.waiting import Waiters

#: Bytes of queued records written per ``send_records`` call while the transport takes them.
WRITE_BATCH_BYTES = 256 * 1024


_log = Logger()


@implementer(IPushProducer)
class Outbound:
    """The sending half of L4 (see the module docstring for its invariants).

    It is the IPushProducer registered with each selected connection.

    :param cooperator: drives pull producers (one cooperator shared by all).
    :param clock: times the round trips that size the in-flight limit.
    :param max_unacked_bytes: queued bytes above which every registered producer is paused.
    :param in_flight_floor: the smallest in-flight limit (see :mod:`txdilation.durable.window`).
    :param log: where rejected or failing producers are reported.
    """

    def __init__(
        self,
        *,
        cooperator: Cooperator,
        clock: IReactorTime,
        max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES,
        in_flight_floor: int = DEFAULT_IN_FLIGHT_FLOOR,
        log: Logger | None = None,
    ) -> None:
        self._log = log if log is not None else _log
        self._clock = clock
        self._max_bytes = max_unacked_bytes
        self._over_budget = False
        self.window = InFlightLimit(in_flight_floor, ceiling=max_unacked_bytes)
        """The in-flight limit (read by tests and status)."""
        self._window_full = False
        self._last_write = 0  # bytes of the last record written (the largest of a batch)
        self.bytes_acked = 0
        """Bytes of records (payload and header) the peer acknowledged."""
        self.bytes_sent = 0
        """DATA payload bytes handed to us (each counted once, however often replayed)."""
        self.records_acked = 0
        """Records retired by the peer's ACKs."""
        self._pong_sent_while_paused = False
        self._own_log: SentLog | None = None  # the log of writes when no link gave one
        self._acknowledged: Waiters[None] = Waiters()
        #: when_retired()'s waiters by seqnum, and those seqnums as a heap (the lowest first)
        self._retired: dict[int, Waiters[None]] = {}
        self._retired_seqnums: list[int] = []
        self._producers = ProducerSet(cooperator, self._log)
        self._core = OutboundCore(push_producer=self)
        self._machine = outbound_machine(self._core)

    # --- introspection (tests, status) ---

    @property
    def queued_bytes(self) -> int:
        """Bytes of the records not yet acknowledged (sent or not)."""
        return self._core.queue.queued_bytes

    @property
    def queued_records(self) -> int:
        """How many records are not yet acknowledged (sent or not)."""
        return len(self._core.queue)

    @property
    def next_seqnum(self) -> int:
        """The seqnum the next record will get (also: how many records were sent)."""
        return self._core.queue.next_seqnum

    @property
    def sent_log(self) -> ISentLog | None:
        """The log of writes to the connection (its link's, or our own), None without one."""
        return self._core.sent_log

    @property
    def bytes_retransmitted(self) -> int:
        """DATA payload bytes queued for replay on a new connection after an earlier one
        carried them unacknowledged."""
        return self._core.queue.retransmitted_bytes

    # --- the record path (plain code) ---

    def send_open(self, scid: int, subprotocol: str) -> None:
        """Queue and (when possible) send OPEN for ``scid``."""
        queue = self._core.queue
        size = RECORD_OVERHEAD + len(subprotocol.encode("utf-8"))
        self._send(Open(queue.allocate(), scid, subprotocol), size)

    def send_data(self, scid: int, data: bytes) -> None:
        """Queue and (when possible) send one DATA record carrying ``data``."""
        self.bytes_sent += len(data)
        self._send(Data(self._core.queue.allocate(), scid, data), RECORD_OVERHEAD + len(data))

    def send_close(self, scid: int) -> int:
        """Queue and (when possible) send CLOSE for ``scid``; returns its seqnum."""
        seqnum = self._core.queue.allocate()
        self._send(Close(seqnum, scid), RECORD_OVERHEAD)
        return seqnum

    def _send(self, record: SequencedRecord, size: int) -> None:
        core = self._core
        if core.stopped:
            return
        sink = core.sink
        queue = core.queue
        immediately = sink is not None and not queue.has_unsent
        if immediately:
            assert sink is not None and core.sent_log is not None
            self._last_write = size  # _sent(), inlined: this is the per-record path
            now = core.sent_log.sent(record.seqnum)
            window = self.window
            if not window.sampling:
                window.sent(record.seqnum, self.bytes_acked, now)
            queue.add(record, size, sent=True)
            sink.send_record(record)
        else:
            queue.add(record, size, sent=False)
        if not self._over_budget and queue.queued_bytes > self._max_bytes:
            self._over_budget = True
            self._producers.pause_all()
        if not self._window_full and queue.sent_bytes >= max(
            self.window.limit, 2 * self._last_write
        ):
            self._window_full = True
            self._producers.pause_all()

    def _sent(self, batch: list[SequencedRecord], size: int) -> None:
        """``batch`` (its largest has ``size`` bytes) is written now: the link's log notes it
        by its last seqnum (an ACK retires it once it covers all of it); a sample of the window
        starts at its first (as for one record: the peer's first ACK after it ends the sample),
        at the time the log noted."""
        self._last_write = size
        log = self._core.sent_log
        assert log is not None  # there is one while there is a connection to write to
        now = log.sent(batch[-1].seqnum)
        window = self.window
        if not window.sampling:
            window.sent(batch[0].seqnum, self.bytes_acked, now)

    def _flush(self) -> None:
        """Write what is queued and unsent, batch by batch, while the transport takes it: its
        pauseProducing closes the gate between two batches (the machine is at rest here)."""
        core, queue = self._core, self._core.queue
        while core.sink is not None and queue.has_unsent:
            batch = queue.take_unsent(WRITE_BATCH_BYTES)
            self._sent(batch, queue.largest_taken)
            core.sink.send_records(batch)

    def _in_flight_limit(self) -> int:
        """The window's limit, or room for two of the latest writes when they are larger
        (one arriving while the peer processes the other: a record is processed whole)."""
        return max(self.window.limit, 2 * self._last_write)

    def _check_window(self) -> None:
        """Producers wait once the limit is in flight, until a quarter of it drained (not at
        every ACK)."""
        in_flight, limit = self._core.queue.sent_bytes, self._in_flight_limit()
        if self._window_full:
            self._window_full = in_flight > limit - limit // 4
        else:
            self._window_full = in_flight >= limit

    def got_ack(self, record: Ack) -> None:
        """An ACK record arrived (see :meth:`handle_ack`)."""
        self.handle_ack(record.resp_seqnum)

    def handle_ack(self, resp_seqnum: int) -> None:
        """An ACK arrived: retire every record with ``seqnum <= resp_seqnum``.

        An ACK for something never sent or already retired is harmless.
        """
        queue = self._core.queue
        before = len(queue)
        self.bytes_acked += queue.ack(resp_seqnum)
        self.records_acked += before - len(queue)
        self.window.acked(resp_seqnum, self.bytes_acked, self._clock.seconds())
        if self._own_log is not None:
            self._own_log.retire(resp_seqnum)
        release = False
        if self._over_budget and queue.queued_bytes <= self._max_bytes // 2:
            self._over_budget = False
            release = True
        if self._window_full:
            self._check_window()
            release = release or not self._window_full
        if release:
            self._run_producers()
        if self._retired:
            self._fire_retired()
        if not queue:
            self._acknowledged.fire(None)

    def last_queued(self, scid: int) -> int | None:
        """The seqnum of the newest record of subchannel ``scid`` not acknowledged yet."""
        return self._core.queue.last_seqnum_of(scid)

    def when_retired(self, seqnum: int) -> Deferred[None]:
        """Fires once the peer acknowledged the record numbered ``seqnum`` (at once if it
        did); never after :meth:`stop` dropped the queue."""
        if self._core.stopped:
            return Deferred()
        waiters = self._retired.get(seqnum)
        if waiters is None:
            waiters = self._retired[seqnum] = Waiters()
            heapq.heappush(self._retired_seqnums, seqnum)
        d = waiters.wait()
        self._fire_retired()
        return d

    def _fire_retired(self) -> None:
        queue = self._core.queue
        oldest = queue.oldest_seqnum()
        below = queue.next_seqnum if oldest is None else oldest  # every seqnum below: retired
        seqnums = self._retired_seqnums
        while seqnums and seqnums[0] < below:
            self._retired.pop(heapq.heappop(seqnums)).fire(None)

    def when_acknowledged(self) -> Deferred[None]:
        """Fires once the peer acknowledged every record queued so far and since (at once
        when nothing is queued; cancelling it meanwhile forgets it); never after :meth:`stop`
        dropped the queue."""
        if not self._core.queue:
            return succeed(None)
        return self._acknowledged.wait()

    # --- lifecycle ---

    def connection_made(self, connection: IDilatedConnection, log: ISentLog | None = None) -> None:
        """Use ``connection``: register as its producer, replay everything queued, go on;
        note each write in ``log`` (its link's, read by the dead-path detector and retired by
        the link's own ACKs) or, without one, in a log of our own that every ACK retires."""
        self._pong_sent_while_paused = False
        self.window.reset()
        self._last_write = 0
        if log is None:
            log = self._own_log = SentLog(self._clock)
        else:
            self._own_log = None
        if self._machine.connection_made(connection, log):
            self._flush()
        self._check_window()
        self._run_producers()

    def answer_ping(self, connection: IDilatedConnection, ping: Ping) -> None:
        """Answer ``ping`` with a PONG on ``connection`` (the link it came on): always while the
        transport takes more, but once per pause while it has paused us, so a peer that sends
        PINGs and never reads cannot make our PONGs pile up in its connection's buffer (a peer
        that reads gets one PONG per pause, enough for stock's Leader: one per two intervals)."""
        if self._core.sink is None:
            if self._pong_sent_while_paused:
                return
            self._pong_sent_while_paused = True
        connection.send_record(Pong(ping.ping_id))

    def connection_lost(self) -> None:
        """The connection is gone: pause producers, queue records until the next one."""
        self._machine.connection_lost()
        self._run_producers()

    def stop(self) -> None:
        """The wormhole is closing: drop the queue; later records are discarded. Idempotent."""
        self._acknowledged.clear()
        self._retired.clear()
        self._retired_seqnums.clear()
        self._machine.stop()
        self._producers.pause_all()

    # --- producers registered by subchannels ---

    def register_producer(
        self, key: Hashable, producer: IPushProducer | IPullProducer, streaming: bool
    ) -> None:
        """A subchannel's IConsumer.registerProducer.

        :raises ValueError: when ``key`` already has a producer registered.
        """
        self._producers.add(key, producer, streaming, running=self._may_produce())

    def unregister_producer(self, key: Hashable, *, stop: bool = False) -> None:
        """Forget ``key``'s producer (no-op if none); ``stop`` calls its stopProducing()."""
        self._producers.remove(key, stop=stop)

    def _may_produce(self) -> bool:
        return self._core.sink is not None and not (self._over_budget or self._window_full)

    def _run_producers(self) -> None:
        if self._may_produce():
            self._producers.resume_fairly(self._may_produce)
        else:
            self._producers.pause_all()

    # --- IPushProducer, called by the connection's transport ---

    def pauseProducing(self) -> None:
        self._machine.pause()  # at once, between two batches of a flush too (never inside one)
        self._run_producers()

    def resumeProducing(self) -> None:
        self._pong_sent_while_paused = False
        if self._machine.resume():
            self._flush()
        self._check_window()
        self._run_producers()

    def stopProducing(self) -> None:
        # The transport is going away; connection_lost follows from the manager.
        self.pauseProducing()


__all__ = [
    "DEFAULT_MAX_UNACKED_BYTES",
    "RECORD_OVERHEAD",
    "WRITE_BATCH_BYTES",
    "Outbound",
    "ProducerSet",
    "SendQueue",
]
