"""In-memory stand-ins for a selected L2 connection.

- :class:`FakeDilatedConnection` provides ``IDilatedConnection`` and records everything done to
  it (records sent, one entry per send call, the registered producer, read pausing, closing).
  Like the real one, it sends nothing after ``disconnect()``/``abort()``.
- :class:`FakePushProducer` / :class:`FakePullProducer` record what a consumer asks of them;
  each may run an ``on_resume`` callable (e.g. write to its consumer) when resumed.
- :func:`record_sink` delivers records to a Multiplexer as the selected link does.
- :class:`RecordLink` puts two of them back to back: records sent on ``link.a`` reach side B's
  ``deliver`` callable and vice versa, but only when :meth:`RecordLink.pump` runs, and never
  while the receiving side has paused reading. :meth:`RecordLink.drop` loses everything in
  flight, like a dead TCP connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from twisted.internet.interfaces import IPullProducer, IPushProducer
from twisted.internet.task import Clock
from zope.interface import implementer

from txdilation.wire.contracts import IDilatedConnection, IRecordReceiver
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.records import Ack, Close, Data, Open, Record

__all__ = [
    "FakeDilatedConnection",
    "FakePullProducer",
    "FakePushProducer",
    "RecordLink",
    "dispatch_by_type",
    "record_sink",
]


@implementer(IDilatedConnection)
class FakeDilatedConnection:
    """An ``IDilatedConnection`` that records what it is asked to do.

    :param on_send: called with each record sent (after it is recorded), e.g. by a link.
    :ivar sent: every record sent, in order.
    :ivar send_calls: one list per ``send_record``/``send_records`` call (batching checks).
    :ivar producer: the producer registered with ``registerProducer`` (None if none).
    :ivar reading_paused: True between ``pause_reading()`` and ``resume_reading()``.
    :ivar failed_reason: the first reason given to ``fail()`` (which also aborts).
    """

    def __init__(
        self,
        description: str = "fake",
        is_direct: bool = True,
        on_send: Callable[[Record], None] | None = None,
    ) -> None:
        self.description = description
        self.is_direct = is_direct
        self._on_send = on_send
        self.sent: list[Record] = []
        self.send_calls: list[list[Record]] = []
        self.producer: IPushProducer | None = None
        self.streaming: bool | None = None
        self.reading_paused = False
        self.pause_reading_calls = 0
        self.disconnected = False
        self.aborted = False
        self.failed_reason: LinkLoss | None = None

    @property
    def closed(self) -> bool:
        """True after ``disconnect()`` or ``abort()``."""
        return self.disconnected or self.aborted

    def send_record(self, record: Record) -> None:
        self.send_records([record])

    def send_records(self, records: Iterable[Record]) -> None:
        batch = list(records)
        if self.closed or not batch:
            return
        self.send_calls.append(batch)
        for record in batch:
            self.sent.append(record)
            if self._on_send is not None:
                self._on_send(record)

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        if self.producer is not None:
            raise RuntimeError(f"producer {self.producer!r} was never unregistered")
        self.producer = producer
        self.streaming = streaming

    def unregisterProducer(self) -> None:
        self.producer = None
        self.streaming = None

    def pause_reading(self) -> None:
        self.reading_paused = True
        self.pause_reading_calls += 1

    def resume_reading(self) -> None:
        self.reading_paused = False

    def disconnect(self) -> None:
        self.disconnected = True

    def abort(self) -> None:
        self.aborted = True

    def fail(self, reason: LinkLoss) -> None:
        if self.failed_reason is None:
            self.failed_reason = reason
        self.abort()

    def of_type(self, kind: type[Record]) -> list[Record]:
        """The records sent so far that are instances of ``kind``."""
        return [r for r in self.sent if isinstance(r, kind)]


def record_sink(receiver: IRecordReceiver) -> Callable[[Record], None]:
    """A record sink handing each OPEN, DATA, CLOSE and ACK to ``receiver`` (a Multiplexer),
    as the selected link does; records of any other type are dropped."""

    def deliver(record: Record) -> None:
        if isinstance(record, Data):
            receiver.got_data(record)
        elif isinstance(record, Ack):
            receiver.got_ack(record)
        elif isinstance(record, Open):
            receiver.got_open(record)
        elif isinstance(record, Close):
            receiver.got_close(record)

    return deliver


def dispatch_by_type(
    handlers: Mapping[type[Any], Callable[[Any], object]],
) -> Callable[[Record], None]:
    """A record sink calling the handler of each record's type (for tests that watch some
    types only; :func:`record_sink` feeds a Multiplexer); records of any other type are
    dropped."""

    def deliver(record: Record) -> None:
        handler = handlers.get(type(record))
        if handler is not None:
            handler(record)

    return deliver


class RecordLink:
    """Two fake connections back to back, delivering only when pumped.

    :param deliver_to_a: receives what is sent on ``b`` (side A's record sink).
    :param deliver_to_b: receives what is sent on ``a`` (side B's record sink).
    :param clock: when given, :meth:`pump` also runs what is due on it (e.g. coalesced ACKs).
    :ivar a: the connection side A sends on. :ivar b: the one side B sends on.
    """

    def __init__(
        self,
        deliver_to_a: Callable[[Record], None],
        deliver_to_b: Callable[[Record], None],
        clock: Clock | None = None,
    ) -> None:
        self._to_a: deque[Record] = deque()
        self._to_b: deque[Record] = deque()
        self._deliver_to_a = deliver_to_a
        self._deliver_to_b = deliver_to_b
        self._clock = clock
        self.a = FakeDilatedConnection("->fake:b", on_send=self._to_b.append)
        self.b = FakeDilatedConnection("<-fake:a", on_send=self._to_a.append)
        self.dropped = False

    @property
    def in_flight(self) -> int:
        """Records sent and not yet delivered, both directions."""
        return len(self._to_a) + len(self._to_b)

    def pump(self, max_rounds: int = 10_000) -> int:
        """Deliver until nothing moves (and nothing is due on the clock); return records moved.

        :raises RuntimeError: when traffic has not settled after ``max_rounds`` rounds.
        """
        moved = 0
        for _ in range(max_rounds):
            step = self._move(self._to_b, self.b, self._deliver_to_b)
            step += self._move(self._to_a, self.a, self._deliver_to_a)
            if self._clock is not None and self._due(self._clock):
                self._clock.advance(0)
                step += 1
            moved += step
            if not step:
                return moved
        raise RuntimeError("the link did not settle")

    def _move(
        self,
        queue: deque[Record],
        receiver: FakeDilatedConnection,
        deliver: Callable[[Record], None],
    ) -> int:
        moved = 0
        while queue and not receiver.reading_paused and not self.dropped:
            deliver(queue.popleft())
            moved += 1
        return moved

    @staticmethod
    def _due(clock: Clock) -> bool:
        now = clock.seconds()
        return any(call.getTime() <= now for call in clock.getDelayedCalls())

    def drop(self) -> None:
        """Lose everything in flight; both connections stop sending (like an abort)."""
        self.dropped = True
        self._to_a.clear()
        self._to_b.clear()
        self.a.abort()
        self.b.abort()

    def deliver_some(self, to_b: int = 0, to_a: int = 0) -> None:
        """Deliver the first ``to_b``/``to_a`` records in flight, or all if fewer (partial
        progress: nothing else moves, the clock is not advanced)."""
        for _ in range(min(to_b, len(self._to_b))):
            self._deliver_to_b(self._to_b.popleft())
        for _ in range(min(to_a, len(self._to_a))):
            self._deliver_to_a(self._to_a.popleft())


@implementer(IPushProducer)
class FakePushProducer:
    """An IPushProducer recording calls; ``paused`` is the state the consumer left it in.

    :param on_resume: called on each ``resumeProducing`` (e.g. to write to the consumer).
    :ivar calls: ``"pause"``, ``"resume"``, ``"stop"`` in call order.
    """

    def __init__(self, on_resume: Callable[[], object] | None = None) -> None:
        self.calls: list[str] = []
        self.paused = False
        self.stopped = False
        self._on_resume = on_resume

    def pauseProducing(self) -> None:
        self.calls.append("pause")
        self.paused = True

    def resumeProducing(self) -> None:
        self.calls.append("resume")
        self.paused = False
        if self._on_resume is not None:
            self._on_resume()

    def stopProducing(self) -> None:
        self.calls.append("stop")
        self.stopped = True


@implementer(IPullProducer)
class FakePullProducer:
    """An IPullProducer: each ``resumeProducing`` runs ``on_resume`` (and is counted).

    :ivar resumed: how many times ``resumeProducing`` was called.
    """

    def __init__(self, on_resume: Callable[[], object] | None = None) -> None:
        self.resumed = 0
        self.stopped = False
        self._on_resume = on_resume

    def resumeProducing(self) -> None:
        self.resumed += 1
        if self._on_resume is not None:
            self._on_resume()

    def stopProducing(self) -> None:
        self.stopped = True
