"""L4: the queue of records the peer has not acknowledged yet (I/O-free bookkeeping).

:class:`SendQueue` is what :class:`~txdilation.durable.outbound.Outbound` numbers, replays and
retires records with. Invariants: seqnums from 0, +1 per record, never reused; ``sent`` and
``unsent`` are both in seqnum order and every unsent seqnum is above every sent one; a
cumulative ACK retires every record up to its seqnum, from either; ``queued_bytes`` and
``sent_bytes`` (written to the current connection, not yet acknowledged: the bytes in flight)
are kept with every change, never recounted.
"""

from __future__ import annotations

from collections import deque

from txdilation.wire.records import Data, SequencedRecord


class SendQueue:
    """I/O-free bookkeeping of the records not yet acknowledged by the peer.

    Records are split in two deques, both in seqnum order: ``sent`` (written to the current
    connection) and ``unsent`` (not yet written to it). Every unsent seqnum is higher than every
    sent one.
    """

    def __init__(self) -> None:
        self.next_seqnum = 0
        self.queued_bytes = 0
        #: bytes of the records written to the current connection and not yet acknowledged
        self.sent_bytes = 0
        #: the largest record the last :meth:`take_unsent` returned (bytes)
        self.largest_taken = 0
        #: DATA payload bytes that were written to a connection and are queued to be sent again
        #: on a later one (summed at each :meth:`rewind`)
        self.retransmitted_bytes = 0
        self._sent: deque[tuple[SequencedRecord, int]] = deque()
        self._unsent: deque[tuple[SequencedRecord, int]] = deque()

    def __len__(self) -> int:
        return len(self._sent) + len(self._unsent)

    @property
    def has_unsent(self) -> bool:
        """True when some queued record was not written to the current connection."""
        return bool(self._unsent)

    def oldest_seqnum(self) -> int | None:
        """The seqnum of the oldest record still queued (None: nothing is)."""
        if self._sent:
            return self._sent[0][0].seqnum
        return self._unsent[0][0].seqnum if self._unsent else None

    def last_seqnum_of(self, scid: int) -> int | None:
        """The seqnum of the newest record still queued for subchannel ``scid`` (None: none
        is). Scans the queue from its newest end: for a subchannel's close, not per record."""
        for queued in (self._unsent, self._sent):
            for record, _ in reversed(queued):
                if record.scid == scid:
                    return record.seqnum
        return None

    def allocate(self) -> int:
        """Return the next seqnum (never reused)."""
        seqnum = self.next_seqnum
        self.next_seqnum = seqnum + 1
        return seqnum

    def add(self, record: SequencedRecord, size: int, *, sent: bool) -> None:
        """Queue ``record`` (already numbered by :meth:`allocate`) of ``size`` bytes.

        :param sent: True when the caller writes it to the connection right now; only allowed
            while nothing is unsent, which keeps the order.
        """
        assert not (sent and self._unsent), "sending out of order"
        if sent:
            self._sent.append((record, size))
            self.sent_bytes += size
        else:
            self._unsent.append((record, size))
        self.queued_bytes += size

    def take_unsent(self, limit: int | None = None) -> list[SequencedRecord]:
        """Mark the oldest unsent records as sent and return them in seqnum order: all of
        them, or (with ``limit``) as many as fit in ``limit`` bytes, at least one. The size of
        the largest is kept in ``largest_taken``."""
        taken: list[SequencedRecord] = []
        size = largest = 0
        unsent, sent = self._unsent, self._sent
        while unsent and (limit is None or not taken or size + unsent[0][1] <= limit):
            entry = unsent.popleft()
            sent.append(entry)
            taken.append(entry[0])
            size += entry[1]
            largest = max(largest, entry[1])
        self.sent_bytes += size
        self.largest_taken = largest
        return taken

    def rewind(self) -> None:
        """A new connection: everything queued must be sent (again)."""
        self.retransmitted_bytes += sum(
            len(record.data) for record, _ in self._sent if type(record) is Data
        )
        self._sent.extend(self._unsent)
        self._sent, self._unsent = deque(), self._sent
        self.sent_bytes = 0

    def ack(self, resp_seqnum: int) -> int:
        """Retire every queued record with ``seqnum <= resp_seqnum`` (cumulative); returns the
        bytes retired."""
        retired = 0
        sent = self._sent
        while sent and sent[0][0].seqnum <= resp_seqnum:
            retired += sent.popleft()[1]
        self.sent_bytes -= retired
        unsent = self._unsent
        while unsent and unsent[0][0].seqnum <= resp_seqnum:
            retired += unsent.popleft()[1]
        self.queued_bytes -= retired
        return retired

    def clear(self) -> None:
        """Forget everything queued (the wormhole is closing)."""
        self._sent.clear()
        self._unsent.clear()
        self.queued_bytes = self.sent_bytes = 0


__all__ = ["SendQueue"]
