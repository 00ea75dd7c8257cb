"""L4: how many bytes may be in flight: written to the link, not yet acknowledged (I/O-free).

An interactive record waits behind every byte written before it that the peer has not
processed; :class:`InFlightLimit` bounds those bytes from the peer's ACKs alone (stock's wire
carries nothing else): ``limit = clamp(GAIN x delivery rate x round trip, floor, ceiling)``.

Invariants: one sample at a time (a marker record, a batch's first, stamped when the link's
log of writes ``durable.sent_log`` noted it, ended by the first ACK covering it on any link;
BBR's rate rule); the rate is the largest of the last :data:`RATE_SAMPLES`; the round trip the
smallest on the connection, only ever falling; :meth:`reset` on a new connection starts again
from ``floor``; ``floor`` <= limit <= ``ceiling`` (``max_unacked_bytes``). Why:
docs/module-notes.md.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: the limit is this many times the measured bandwidth-delay product (room for ACKs that come
#: in bursts, as BBR's congestion window gain)
GAIN = 2.0
#: delivery-rate samples the limit takes the largest of
RATE_SAMPLES = 8
#: default floor: what a CPU-bound receiver on loopback needs to never wait for our data (two
#: of txdilation's 1 MiB ACK steps)
DEFAULT_IN_FLIGHT_FLOOR = 2 * 2**20


@dataclass(slots=True, frozen=True)
class _Sample:
    seqnum: int
    delivered: int  # bytes acknowledged when the marker was written
    sent_at: float
    interval_from: float  # the last ACK before the marker was written (or its writing)


class InFlightLimit:
    """The adaptive bound on bytes in flight (see the module docstring).

    :param floor: the smallest limit (bytes); at most ``ceiling``.
    :param ceiling: the largest limit (bytes).
    """

    def __init__(self, floor: int = DEFAULT_IN_FLIGHT_FLOOR, *, ceiling: int) -> None:
        self.ceiling = ceiling
        self.floor = min(floor, ceiling)
        self.limit = self.floor
        """Bytes that may be in flight now."""
        self.min_rtt: float | None = None
        """The smallest round trip on this connection (seconds), None before the first."""
        self._rates: deque[float] = deque(maxlen=RATE_SAMPLES)
        self._sample: _Sample | None = None
        self.sampling = False
        """True while a sample's marker awaits its ACK (an attribute: read per record)."""
        self._last_ack_at: float | None = None

    @property
    def delivery_rate(self) -> float:
        """The delivery rate the limit is computed from (bytes per second; 0 before any)."""
        return max(self._rates, default=0.0)

    def reset(self) -> None:
        """A new connection (maybe another path): forget every sample; back to ``floor``."""
        self.limit = self.floor
        self.min_rtt = None
        self._rates.clear()
        self._sample = None
        self.sampling = False
        self._last_ack_at = None

    def sent(self, seqnum: int, delivered: int, now: float) -> None:
        """A record numbered ``seqnum`` was written, ``delivered`` bytes acknowledged so far:
        it becomes the marker of a new sample unless one is outstanding."""
        if self._sample is None:
            since = now if self._last_ack_at is None else self._last_ack_at
            self._sample = _Sample(seqnum, delivered, now, since)
            self.sampling = True

    def acked(self, resp_seqnum: int, delivered: int, now: float) -> None:
        """An ACK for every seqnum up to ``resp_seqnum`` arrived, ``delivered`` bytes
        acknowledged in all: ends the sample if it covers the marker (and updates the limit)."""
        self._last_ack_at = now
        sample = self._sample
        if sample is None or resp_seqnum < sample.seqnum:
            return
        self._sample = None
        self.sampling = False
        rtt = now - sample.sent_at
        interval = now - sample.interval_from
        if rtt <= 0 or interval <= 0:
            return  # a clock that did not move measures nothing
        self._rates.append((delivered - sample.delivered) / interval)
        if self.min_rtt is None or rtt < self.min_rtt:
            self.min_rtt = rtt
        wanted = GAIN * max(self._rates) * self.min_rtt
        self.limit = int(min(self.ceiling, max(self.floor, wanted)))


__all__ = ["DEFAULT_IN_FLIGHT_FLOOR", "GAIN", "RATE_SAMPLES", "InFlightLimit"]
