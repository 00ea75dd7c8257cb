"""L3: noticing a dead path from the traffic itself, in seconds (I/O-free).

:class:`DeadPathDetector` watches the link's own records (no wire change): an RFC 6298 RTT
estimate (:class:`RttEstimator`) from PONGs and from the ACKs that retire records in the
link's ``SentLog``; a record unacknowledged within ``rto`` sends a probe (a PING); a probe left
unanswered too long ends the path, unless the check came late, we paused reading, or the kernel
says the peer's TCP is alive. With a warm standby ready the timeouts follow the round trip more
closely (:data:`STANDBY_MIN_RTO`). Why and the figures: docs/reliability.md, docs/module-notes.md.

Invariants: ``on_dead`` is called at most once, and never after :meth:`stop`; one timer at
most is pending; every method is O(1) amortised (the link's ``SentLog``, which L4 feeds,
holds one entry per write, retired by ACKs) and no timer is rescheduled per ACK.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from txdilation.durable.sent_log import SentLog
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.timer import RestartableTimer

__all__ = [
    "DATA_PROBE_FACTOR",
    "INITIAL_RTO",
    "LATE_SLACK",
    "MAX_RTO",
    "MIN_RTO",
    "PING_PROBE_FACTOR",
    "STANDBY_MIN_RTO",
    "STANDBY_PROBE_WAIT",
    "DeadPathDetector",
    "RttEstimator",
    "unanswered",
]

#: seconds: the floor of the retransmission-style timeout (TCP's, RFC 6298)
MIN_RTO = 1.0
#: seconds: the timeout before any RTT sample (TCP's initial RTO)
INITIAL_RTO = 1.0
#: seconds: the ceiling (a path slower than that is left to the liveness check)
MAX_RTO = 20.0
#: a probe sent because records went unacknowledged waits this many RTOs for an answer
DATA_PROBE_FACTOR = 1.5
#: the periodic PING (an idle link's probe) waits this many RTOs for its PONG
PING_PROBE_FACTOR = 3.0
#: seconds: the floor of the timeout while a standby path is ready (QUIC-style, see above)
STANDBY_MIN_RTO = 0.2
#: seconds: the shortest wait for a data probe's answer while a standby path is ready
STANDBY_PROBE_WAIT = 0.3
#: seconds: a verdict due this much earlier than the check that finds it (we were not
#: running: a busy host) waits one more probe timeout, once: the answer may be unread yet
LATE_SLACK = 0.1

_log = Logger()


class RttEstimator:
    """Smoothed RTT and RTT variation (RFC 6298, alpha 1/8, beta 1/4) and the RTO."""

    def __init__(self) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.samples = 0

    def sample(self, rtt: float) -> None:
        """One measured round trip, in seconds (negative ones are ignored)."""
        if rtt < 0:
            return
        self.samples += 1
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    @property
    def rto(self) -> float:
        """``srtt + 4 rttvar`` within [MIN_RTO, MAX_RTO] (INITIAL_RTO before any sample)."""
        return self.floored(MIN_RTO)

    def floored(self, floor: float) -> float:
        """``srtt + 4 rttvar`` within [``floor``, MAX_RTO] (INITIAL_RTO before any sample)."""
        if self.srtt is None:
            return INITIAL_RTO
        return min(MAX_RTO, max(floor, self.srtt + 4 * self.rttvar))


class DeadPathDetector:
    """Probes a link whose records go unanswered and ends it when the probe is unanswered too
    (see the module docstring).

    :param clock: the reactor's time.
    :param send_probe: writes one PING (ours, so its PONG is reported to :meth:`pong`).
    :param on_dead: called once with the reason (``PROBE_UNANSWERED``, or ``NETWORK_CHANGE``
        for the probe of :meth:`probe_now`) when the path is dead.
    :param kernel_alive: given the probe's timeout in seconds, True when the kernel says the
        peer's TCP is alive, False when it says not, None when it cannot tell.
    :param reading_paused: True while we deliberately stopped reading.
    """

    def __init__(
        self,
        clock: IReactorTime,
        *,
        send_probe: Callable[[], None],
        on_dead: Callable[[LinkLoss], None],
        kernel_alive: Callable[[float], bool | None] = lambda timeout: None,
        reading_paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self._clock = clock
        self._send_probe = send_probe
        self._on_dead = on_dead
        self._kernel_alive = kernel_alive
        self._reading_paused = reading_paused
        self.rtt = RttEstimator()
        self.sent_log = SentLog(clock, on_write=self._wrote)
        """This link's writes (noted by L4's Outbound as it writes), retired by its ACKs."""
        self._writes = self.sent_log.writes
        self._probe_deadline: float | None = None  # a probe waits for its answer until then
        self._probe_timeout = 0.0
        self._cause = Cause.PROBE_UNANSWERED  # the verdict's cause (or a network change)
        self._quiet_until = 0.0  # no data probe before then
        self._extended = False  # the probe's deadline was pushed back once (a late check)
        self._timer = RestartableTimer(clock, self._check)
        self._stopped = False
        self.probes = 0  # probes sent, for logs and tests
        self.kernel_saves = 0  # unanswered probes the kernel vouched for
        self.standby_ready = False
        """A standby path is ready to take over: shorter timeouts (see the module docstring)."""

    # --- what the link reports ---

    def _wrote(self) -> None:
        """A write was noted in ``sent_log`` (never after stop: the log is closed then)."""
        pending = self._timer.due
        if pending is None:
            self._arm()
        elif self._probe_deadline is None and len(self._writes) == 1:
            # the timer may wait for an answered probe's old deadline: not past this one's
            due = self._next_deadline()
            if due is not None and pending > due:
                self._arm()

    def acked(self, resp_seqnum: int) -> None:
        """An ACK for everything up to ``resp_seqnum`` arrived."""
        newest = self.sent_log.retire(resp_seqnum)
        if newest is not None:
            self.rtt.sample(self._clock.seconds() - newest)
            self._answered()

    def pong(self, rtt: float | None) -> None:
        """A PONG arrived (``rtt`` when it answered one of our PINGs)."""
        if rtt is not None:
            self.rtt.sample(rtt)
        self._answered()

    def pinged(self) -> None:
        """The periodic PING went out: it is a probe too (unless one is out already)."""
        if self._stopped or self._probe_deadline is not None:
            return
        self._start_probe(
            max(PING_PROBE_FACTOR * self.rtt.rto, PING_PROBE_FACTOR * MIN_RTO), send=False
        )

    def probe_now(self) -> None:
        """Probe at once because our addresses or routes changed: an unanswered probe's
        verdict is a ``NETWORK_CHANGE``. Nothing happens while a probe is out already."""
        if self._stopped or self._probe_deadline is not None:
            return
        self._cause = Cause.NETWORK_CHANGE
        self._start_probe(self._data_probe_wait())

    def stop(self) -> None:
        """No more probes or verdicts (idempotent)."""
        self._stopped = True
        self._timer.cancel()
        self.sent_log.close()

    # --- internals ---

    @property
    def probing(self) -> bool:
        """True while a probe waits for its answer."""
        return self._probe_deadline is not None

    def _answered(self) -> None:
        if self._probe_deadline is not None:
            self._probe_deadline = None
            self._cause = Cause.PROBE_UNANSWERED
            self._quiet_until = self._clock.seconds() + self._rto()
        # the pending timer fires at the old deadline and re-arms for the new one: no
        # timer churn per ACK

    def _start_probe(self, timeout: float, *, send: bool = True) -> None:
        """A probe waits ``timeout`` for its answer (``send``: write a PING for it; the
        periodic PING is one already)."""
        self.probes += 1
        self._extended = False
        self._probe_timeout = timeout
        self._probe_deadline = self._clock.seconds() + timeout
        self._arm()
        if send:
            self._send_probe()

    def _next_deadline(self) -> float | None:
        if self._probe_deadline is not None:
            return self._probe_deadline
        if self._writes:
            return max(self._writes[0][1] + self._rto(), self._quiet_until)
        return None

    def _arm(self) -> None:
        self._timer.cancel()
        when = self._next_deadline()
        if when is not None:
            self._timer.start(max(0.0, when - self._clock.seconds()))

    def _check(self) -> None:
        if self._stopped:
            return
        now = self._clock.seconds()
        if self._probe_deadline is not None:
            if now < self._probe_deadline:
                self._arm()
                return
            if now - self._probe_deadline > LATE_SLACK and not self._extended:
                self._extended = True  # (reset by the next answer or probe)
                self._probe_deadline = now + self._probe_timeout
                self._arm()
                return
            if not self._reading_paused() and self._kernel_alive(self._probe_timeout) is not True:
                self._stopped = True
                self.sent_log.close()
                self._on_dead(unanswered(self._cause, self._probe_timeout))
                return
            self.kernel_saves += 1
            self._cause = Cause.PROBE_UNANSWERED
            _log.debug("probe unanswered but the peer's TCP is alive (or we are not reading)")
            self._probe_deadline = None
            self._quiet_until = now + self._probe_timeout
            self._arm()
            return
        if self._writes and now >= self._writes[0][1] + self._rto() and now >= self._quiet_until:
            self._start_probe(self._data_probe_wait())
            return
        self._arm()

    def _rto(self) -> float:
        return self.rtt.floored(STANDBY_MIN_RTO if self.standby_ready else MIN_RTO)

    def _data_probe_wait(self) -> float:
        if self.standby_ready:
            return max(DATA_PROBE_FACTOR * self._rto(), STANDBY_PROBE_WAIT)
        rto = self.rtt.rto
        return max(DATA_PROBE_FACTOR * rto, DATA_PROBE_FACTOR * MIN_RTO)


def unanswered(cause: Cause, timeout: float) -> LinkLoss:
    """The verdict on a probe unanswered for ``timeout`` seconds (``cause``:
    ``PROBE_UNANSWERED``, or ``NETWORK_CHANGE`` for a probe sent because of one)."""
    prefix = "network change: " if cause is Cause.NETWORK_CHANGE else ""
    return LinkLoss(cause, f"{prefix}probe unanswered for {timeout:.3g}s")
