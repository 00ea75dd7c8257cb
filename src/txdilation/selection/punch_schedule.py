"""L3: when, and with which TTL, to dial a peer's punched hint (I/O-free).

For each punched hint (a :class:`PunchPlan`): the first dial is a normal one; after a refusal
(a NAT that answers an unsolicited SYN with a RST), dials whose first SYN carries a low TTL
(:data:`LOW_TTLS`, cycled smallest first) where the probe (:class:`Verdict`) found that a
connecting socket survives the SYN's expiry; refused dials retried after a random delay so
that the peers' SYNs cross (:func:`refused_delay`, :data:`CROSSING_SPACING` where only
crossing works), within :data:`PUNCH_WINDOW` or :data:`CROSSING_WINDOW` and the upgrade's
:data:`REFUSED_BURST`. The why (STUNT, Linux's abort on ICMP, measurements): docs/connectivity.md,
"NATs that refuse with a RST".

Invariants: nothing here does I/O or reads a clock (times are passed in; the randomness is the
``rng`` given); a plan never asks for a low TTL after its hint's dial was aborted by an expiry,
nor for a dial after its window but within a path upgrade's :data:`REFUSED_BURST`.
"""

from __future__ import annotations

import enum
import errno
import random
from dataclasses import dataclass, field

from twisted.internet.error import ConnectBindError, ConnectionRefusedError
from twisted.python.failure import Failure

from txdilation.selection.punch import PUNCH_RETRY_DELAY, PUNCH_WINDOW

__all__ = [
    "CROSSING_SPACING",
    "LOW_TTLS",
    "LOW_TTL_HOLD",
    "PROBE_WAIT",
    "REFUSED_BURST",
    "REFUSED_SPACING",
    "SYN_RETRANSMISSION",
    "Outcome",
    "PunchPlan",
    "Verdict",
    "outcome_of",
    "refused_delay",
]

LOW_TTLS = (2, 3, 4)
"""The TTLs (hop limits) of low-TTL first SYNs, in the order they are tried: 2 passes a home
router and dies at the first router beyond it; 3 and 4 pass a carrier-grade NAT behind it."""

PROBE_WAIT = 0.1
"""Seconds the expiry probe waits for its low-TTL connect to fail: an ICMP time exceeded from
the first routers beyond our NAT comes back well within this."""

SYN_RETRANSMISSION = 1.0
"""Seconds after which the kernel sends a connecting socket's SYN again (the initial RTO of
RFC 6298): a low-TTL try crosses the peer's with that retransmission, so it is given
:data:`LOW_TTL_HOLD` before another try replaces it."""

LOW_TTL_HOLD = 1.5
"""Seconds a low-TTL try is left connecting before a new try of the same hint replaces it (a
path upgrade's background schedule tries again sooner than that early on)."""

REFUSED_SPACING = 0.025
"""Seconds: the least delay before a refused punched dial is made again, and the least span of
its random part (a refusal on a nearby network comes back in well under a millisecond)."""

CROSSING_SPACING = 0.001
"""Seconds: the least delay before a refused try of a plan that relies on crossing SYNs alone is
made again, and the least span of its random part (about 300 tries a second between NATs a
tenth of a millisecond apart, where a try costs about as much again in the process)."""

REFUSED_BURST = 2.0
#: seconds: how long refused tries that rely on crossing SYNs go on (the foreground window, and
#: the bursts of a path upgrade's background tries), instead of :data:`PUNCH_WINDOW`: two NATs
#: a tenth of a millisecond apart let a crossing through only rarely
CROSSING_WINDOW = 15.0
"""Seconds after a path upgrade's background try (one of its quick first retries) during which
a refused try of a plan that relies on crossing SYNs is made again as in the foreground: the
bursts of the tries at 0.5, 1.5 and 3.5 s cover the first five and a half seconds."""

#: a dial failing with these: our listener already accepted the peer's dial between the same two
#: ports, and the kernel refuses a second socket for them
_TAKEN = (errno.EADDRNOTAVAIL, errno.EADDRINUSE, errno.EISCONN)
#: a connect failing with these right after a low-TTL SYN: an ICMP time exceeded came back and the
#: kernel gave up the connecting socket (Linux)
_EXPIRED = (errno.EHOSTUNREACH, errno.ENETUNREACH)


class Outcome(enum.Enum):
    """How a punched dial failed."""

    REFUSED = "refused"
    """A RST came back: the peer's NAT (or host) refused our SYN."""
    EXPIRED = "expired"
    """A low-TTL dial ended by host/network unreachable: its SYN's expiry was reported and the
    kernel gave the socket up."""
    TAKEN = "taken"
    """The connection exists already (our listener accepted it), or our port cannot be bound."""
    FAILED = "failed"
    """Anything else (a timeout, an unreachable network for a normal dial...)."""


class Verdict(enum.Enum):
    """What the expiry probe found about low-TTL SYNs on this path and host."""

    SURVIVES = "survives"
    """Its connect neither failed nor completed within the wait: a low-TTL SYN dies quietly or
    the kernel keeps the socket; low-TTL first SYNs can be used."""
    ABORTED = "aborted"
    """Its connect failed at once (the expiry was reported and the kernel aborted it)."""
    REACHED = "reached"
    """Its SYN reached a host (connected or refused): no TTL dies between the NATs."""


def outcome_of(failure: Failure, *, low_ttl: bool) -> Outcome:
    """Classify a failed punched dial (``low_ttl``: its first SYN had a low TTL)."""
    if failure.check(ConnectBindError):  # type: ignore[no-untyped-call]
        return Outcome.TAKEN
    if failure.check(ConnectionRefusedError):  # type: ignore[no-untyped-call]
        return Outcome.REFUSED
    code = getattr(failure.value, "osError", None)
    if code in _TAKEN:
        return Outcome.TAKEN
    if low_ttl and code in _EXPIRED:
        return Outcome.EXPIRED
    return Outcome.FAILED


def refused_delay(took: float, rng: random.Random, spacing: float = REFUSED_SPACING) -> float:
    """Seconds before a dial refused after ``took`` seconds is made again: at least
    ``spacing``, plus a random part of up to the larger of ``took`` (about a round trip to the
    peer's NAT, for a normal dial) and ``spacing``."""
    return spacing + rng.uniform(0.0, max(min(took, 1.0), spacing))


@dataclass
class PunchPlan:
    """The dials to one punched hint of the peer's; see the module docstring.

    :ivar started: when its first dial started (the window runs from there).
    :ivar low_ttl: whether low-TTL first SYNs may still be used (no probe or expiry has
        excluded them).
    :ivar refused: whether a dial of this hint was refused (the peer's NAT resets unsolicited
        SYNs): only then do dials start with a low-TTL SYN.
    :ivar verdict: the expiry probe's, once known.
    """

    started: float
    rng: random.Random = field(default_factory=random.Random)
    window: float = PUNCH_WINDOW
    low_ttl: bool = True
    refused: bool = False
    verdict: Verdict | None = None
    _ttls: tuple[int, ...] = LOW_TTLS
    _low_dials: int = 0
    _last_ttl: int | None = None
    _last_dial: float = 0.0
    _burst_until: float = 0.0

    @property
    def last_ttl(self) -> int | None:
        """The TTL of the last dial's first SYN (``None``: the system's)."""
        return self._last_ttl

    @property
    def crossing_only(self) -> bool:
        """Whether only crossing SYNs can get through: refused, and low TTLs excluded (by the
        probe's verdict or an expiry)."""
        return self.refused and not self.low_ttl

    @property
    def wants_verdict(self) -> bool:
        """Whether the next dial waits for the expiry probe: it would start with a low-TTL
        SYN if such a connect survives here, and that is not known yet."""
        return self.refused and self.low_ttl and self.verdict is None

    def probed(self, verdict: Verdict) -> None:
        """The expiry probe's verdict: low TTLs only if a low-TTL connect survives."""
        self.verdict = verdict
        if verdict is not Verdict.SURVIVES:
            self.low_ttl = False

    def dial(self, now: float) -> int | None:
        """A dial starts ``now``: the TTL of its first SYN (``None``: the system's)."""
        self._last_dial = now
        self._last_ttl = None
        if self.refused and self.low_ttl and self.verdict is Verdict.SURVIVES:
            self._last_ttl = self._ttls[self._low_dials % len(self._ttls)]
            self._low_dials += 1
        return self._last_ttl

    def burst(self, now: float) -> None:
        """A path upgrade's background try starts ``now``: refused tries of a plan that relies
        on crossing SYNs are made again soon until :data:`REFUSED_BURST` later."""
        self._burst_until = now + REFUSED_BURST

    def retries_in_background(self, outcome: Outcome, now: float) -> bool:
        """Whether a background try that failed with ``outcome`` at ``now`` is made again
        before the upgrade schedule's next try (:meth:`again` says when): within a burst, or
        throughout :data:`CROSSING_WINDOW` from the first dial (only crossing SYNs help, and
        the more there are the likelier one crosses)."""
        if outcome is not Outcome.REFUSED or not self.crossing_only:
            return False
        return now < self._burst_until or now - self.started < CROSSING_WINDOW

    def holds(self, now: float) -> bool:
        """Whether the last try, a low-TTL one, should be left connecting at ``now`` rather
        than replaced by a new try (:data:`LOW_TTL_HOLD`)."""
        return self._last_ttl is not None and now - self._last_dial < LOW_TTL_HOLD

    def _too_high(self, ttl: int) -> None:
        """``ttl`` reached farther than our NATs (an expiry reported beyond the first hops, or
        a refusal before the SYN's retransmission): low TTLs stay below it from now on."""
        lower = tuple(t for t in self._ttls if t < ttl)
        if lower:
            self._ttls, self._low_dials = lower, 0
        else:
            self.low_ttl = False

    def again(self, outcome: Outcome, now: float) -> float | None:
        """The last dial failed with ``outcome`` at ``now``: seconds before the next one, or
        ``None`` for no more. What the outcome says (a refusal, an expiry) is kept either way,
        for tries that something else schedules (a path upgrade's background dials)."""
        ttl, took = self._last_ttl, now - self._last_dial
        if outcome is Outcome.EXPIRED and ttl is not None:
            self._too_high(ttl)  # the smallest: expiries are reported after all
        elif outcome is Outcome.REFUSED:
            self.refused = True
            if ttl is not None and took < SYN_RETRANSMISSION:
                self._too_high(ttl)  # that SYN itself reached the peer's NAT
        if outcome is Outcome.TAKEN:
            return None
        window = max(self.window, CROSSING_WINDOW) if self.crossing_only else self.window
        if now - self.started >= window and not self.retries_in_background(outcome, now):
            return None
        if outcome is Outcome.EXPIRED:
            return 0.0
        if outcome is Outcome.REFUSED:
            if self.crossing_only:
                return refused_delay(took, self.rng, CROSSING_SPACING)
            low_next = self.low_ttl and self.verdict is not Verdict.ABORTED
            return refused_delay(0.0 if low_next else took, self.rng)
        return PUNCH_RETRY_DELAY
