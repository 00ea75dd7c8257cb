"""L4: the producers subchannels register, paused and resumed together, served in turn.

:class:`ProducerSet` is what :class:`~txdilation.durable.outbound.Outbound` pauses when the
connection's transport, the durable queue's bound or the in-flight limit says so, and resumes
one producer at a time (round-robin) while they allow. Pull producers are driven from a
cooperator so that they look like push producers (:class:`_PullDriver`). Calls into an
application's producer never raise into us: a missing method or an exception is logged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from twisted.internet.interfaces import IPullProducer, IPushProducer
from twisted.internet.task import CooperativeTask, Cooperator
from twisted.logger import Logger
from zope.interface import implementer


@implementer(IPushProducer)
class _PullDriver:
    """Drive an IPullProducer from a Cooperator so that it looks like an IPushProducer.

    Each cooperator step calls the producer's ``resumeProducing`` once; the cooperator itself
    interleaves the steps of all pull producers (round-robin).
    """

    def __init__(
        self,
        producer: IPullProducer,
        cooperator: Cooperator,
        on_failure: Callable[[], None],
        log: Logger,
    ) -> None:
        self._producer = producer
        self._on_failure = on_failure
        self._log = log
        self._done = False
        self._paused = False
        self._task: CooperativeTask[Iterator[None]] = cooperator.cooperate(self._pull())

    def _pull(self) -> Iterator[None]:
        while True:
            try:
                self._producer.resumeProducing()
            except Exception:
                self._log.failure("pull producer {producer!r} failed", producer=self._producer)
                self._done = True
                self._on_failure()
                return
            yield None

    def pauseProducing(self) -> None:
        if not self._done and not self._paused:
            self._paused = True
            self._task.pause()

    def resumeProducing(self) -> None:
        if not self._done and self._paused:
            self._paused = False
            self._task.resume()

    def stopProducing(self) -> None:
        self.stop_streaming()
        stop = getattr(self._producer, "stopProducing", None)
        if stop is not None:
            stop()

    def stop_streaming(self) -> None:
        """Stop calling the producer (it was unregistered)."""
        if not self._done:
            self._done = True
            self._task.stop()


@dataclass(eq=False)
class _Registered:
    producer: IPushProducer
    paused: bool
    driver: _PullDriver | None


class ProducerSet:
    """The producers registered by subchannels, paused and resumed together, served fairly.

    Keys are whatever identifies a subchannel (its scid). Push producers are paused/resumed
    directly; pull producers get a :class:`_PullDriver`. Exceptions raised by an application's
    producer are logged and do not stop the others.
    """

    def __init__(self, cooperator: Cooperator, log: Logger) -> None:
        self._cooperator = cooperator
        self._log = log
        self._by_key: dict[Hashable, _Registered] = {}
        self._turns: deque[Hashable] = deque()  # left gets the next turn

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._by_key

    def add(
        self,
        key: Hashable,
        producer: IPushProducer | IPullProducer,
        streaming: bool,
        running: bool,
    ) -> None:
        """Register ``producer`` for ``key``; it starts paused unless ``running``.

        :raises ValueError: when ``key`` already has a producer.
        """
        if key in self._by_key:
            raise ValueError(f"a producer is already registered for subchannel {key!r}")
        driver = None
        push: IPushProducer
        if streaming:
            push = producer  # type: ignore[assignment]
        else:
            driver = push = _PullDriver(
                producer,  # type: ignore[arg-type]
                self._cooperator,
                lambda: self.remove(key),
                self._log,
            )
        self._by_key[key] = _Registered(push, paused=False, driver=driver)
        self._turns.append(key)
        if not running:
            self._pause(self._by_key[key])

    def remove(self, key: Hashable, *, stop: bool = False) -> None:
        """Forget ``key``'s producer (no-op if none); ``stop`` also calls its stopProducing()."""
        entry = self._by_key.pop(key, None)
        if entry is None:
            return
        self._turns.remove(key)
        if entry.driver is not None:
            entry.driver.stop_streaming()
        if stop:
            self._call(entry.producer, "stopProducing")

    def pause_all(self) -> None:
        """Pause every running producer."""
        for entry in list(self._by_key.values()):
            if not entry.paused:
                self._pause(entry)

    def resume_fairly(self, may_continue: Callable[[], bool]) -> None:
        """Resume paused producers one at a time, in turn order, while ``may_continue()``.

        A producer that writes enough to make the connection pause us ends the round; the next
        round starts with the producer after it.
        """
        for _ in range(len(self._turns)):
            if not may_continue() or not self._turns:
                return
            key = self._turns[0]
            self._turns.rotate(-1)
            entry = self._by_key[key]
            if entry.paused:
                entry.paused = False
                self._call(entry.producer, "resumeProducing")

    def _pause(self, entry: _Registered) -> None:
        entry.paused = True
        self._call(entry.producer, "pauseProducing")

    def _call(self, producer: object, method: str) -> None:
        """Call the application's ``producer.method()``: a missing method (fowl's push
        producers have no ``stopProducing``) or an exception is logged, never raised."""
        try:
            getattr(producer, method)()
        except Exception:
            self._log.failure(
                "producer {producer!r}.{method}() failed", producer=producer, method=method
            )


__all__ = ["ProducerSet"]
