"""Telemetry's traffic records: the counters they sample (:class:`TrafficStats`, the
Multiplexer's), their fields, and their periodic schedule (:class:`PeriodicTraffic`).

Invariants: counters are recorded as non-negative integers (``vocabulary.as_count``); at most
one periodic sample is scheduled, the next one before the current one is emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime

from txdilation.telemetry.vocabulary import Record, as_count
from txdilation.wire.timer import RestartableTimer

__all__ = ["PeriodicTraffic", "TrafficStats", "traffic_fields"]


@dataclass(frozen=True, slots=True)
class TrafficStats:
    """Cumulative counters of one session's durable record stream (all generations)."""

    records_sent: int = 0
    bytes_sent: int = 0
    records_acked: int = 0
    bytes_retransmitted: int = 0
    records_received: int = 0
    bytes_received: int = 0
    queue_bytes: int = 0


def traffic_fields(stats: TrafficStats, final: bool) -> Record:
    """The fields of a ``traffic`` record (``final``: the session's last one)."""
    return {
        "records_sent": as_count(stats.records_sent),
        "bytes_sent": as_count(stats.bytes_sent),
        "records_acked": as_count(stats.records_acked),
        "bytes_retransmitted": as_count(stats.bytes_retransmitted),
        "records_received": as_count(stats.records_received),
        "bytes_received": as_count(stats.bytes_received),
        "queue_bytes": as_count(stats.queue_bytes),
        "final": bool(final),
    }


class PeriodicTraffic:
    """Hands ``emit`` a sample every interval, while started (see the module docstring)."""

    def __init__(self, clock: IReactorTime, emit: Callable[[TrafficStats], None]) -> None:
        self._emit = emit
        self._timer = RestartableTimer(clock, self._tick)
        self._interval = 0.0
        self._sample: Callable[[], TrafficStats] = TrafficStats

    @property
    def active(self) -> bool:
        """Whether samples are scheduled."""
        return self._timer.pending

    def start(self, interval: float, sample: Callable[[], TrafficStats]) -> None:
        """``emit(sample())`` every ``interval`` seconds from now, instead of any schedule."""
        self._interval, self._sample = interval, sample
        self._timer.start(interval)

    def stop(self) -> None:
        """No more samples (idempotent)."""
        self._timer.cancel()

    def _tick(self) -> None:
        self._timer.start(self._interval)
        self._emit(self._sample())
