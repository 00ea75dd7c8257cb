"""L3: when, and with which TTL, to dial a peer's punched hint (I/O-free).

Hole punching (:mod:`txdilation.selection.punch`) is a TCP simultaneous open between two
peers behind NATs. A NAT whose firewall *drops* an unsolicited SYN (many consumer routers) is
easy: each peer's SYN opens its own NAT, the peer's SYN that was dropped is retransmitted and
gets through. A NAT whose firewall answers it with a *RST* (OpenWrt's default ``REJECT``, many
Linux routers; RFC 5382 REQ-4 asks NATs not to) is not: the first SYN to arrive at the other
NAT is refused, the RST fails that dial and, passing back through the dialler's own NAT, closes
the mapping its SYN had opened, so the other peer's SYN is refused in turn.

What this module decides, for each punched hint (a :class:`PunchPlan`):

- **The first dial is a normal one.** Against a NAT that drops, nothing more is needed, and a
  dial that is not refused keeps its socket and its mapping, waiting for the peer's SYN.
- **After a refusal, a first SYN that dies between the two NATs** (STUNT; Guha and Francis,
  IMC 2005; Eppinger 2005): the dial's first SYN carries a small TTL (:data:`LOW_TTLS`),
  enough to pass our own NAT and open its mapping again, too small to reach the peer's NAT,
  which therefore does not refuse it. The TTL is restored as soon as that SYN has left, so the
  kernel's SYN retransmission (one second later) and the SYN-ACK of a simultaneous open
  travel normally: the peer's SYN, whenever it comes, finds our NAT open and a connecting
  socket behind it, and if both peers were refused, whichever retransmission arrives first
  does. How many hops our outermost NAT is away is unknown (1 behind a home router, more
  behind a carrier-grade NAT), so successive low-TTL dials cycle through :data:`LOW_TTLS`,
  smallest first; a TTL too small opens nothing (the peer's SYN is refused at our NAT, and the
  peer tries again: one side's working TTL is enough), one too large reaches the peer's NAT or
  a router that reports its expiry: a refusal that comes before the SYN's retransmission, or
  an expiry reported for it, keeps later low TTLs below it. A low-TTL try is left connecting
  for :data:`LOW_TTL_HOLD` before another replaces it: its retransmission is what crosses.
- **Only where the connecting socket survives the expiry.** The router where that SYN dies
  usually answers with an ICMP time exceeded. BSD, macOS and Windows keep a connecting socket
  on such an error; Linux aborts it (``EHOSTUNREACH``), and a mapping left open with no socket
  behind it is worse than none: our listener then answers the peer's SYN with a SYN-ACK of
  another sequence number, which our NAT's connection tracking refuses, and the pair is stuck.
  So alongside the first punched dial a probe (:data:`PROBE_WAIT`) sends such a SYN from
  another port: a connect that fails at once (:attr:`Verdict.ABORTED`) or that reaches
  something (:attr:`Verdict.REACHED`: the NATs are too close) means normal TTLs only; silence
  (:attr:`Verdict.SURVIVES`) allows low TTLs. A dial with the smallest low TTL aborted all the
  same (:attr:`Outcome.EXPIRED`) gives them up for its hint and dials again at once.
  A low-TTL SYN that Linux aborts cannot be saved by a later dial from the same port either:
  its mapping stays open, and the peer's next SYN passes it to our listener, but the
  listener's SYN-ACK and data carry a sequence number the NAT's connection tracking never saw
  leave (the entry stays in its simultaneous-open state, and what the listener sends is
  dropped as invalid), and the half-open connection it keeps blocks our own dials between
  those two ports (``EADDRNOTAVAIL``) for as long as it retransmits.
- **Retries that line up.** A refused dial (the peer's NAT was still closed) is dialled again
  soon: after :data:`REFUSED_SPACING` or a little more when the next dial has a low TTL; else
  after a random delay of up to about one round trip to the peer's NAT (:func:`refused_delay`),
  so that the two peers' dials, each retried as soon as it is refused, do not keep the same
  phase: a SYN gets through when it crosses the peer's (the libp2p DCUtR idea of SYNs that
  cross, without its synchronisation message, which needs a channel between the peers that
  Dilation does not have before the link is up). Where low TTLs are excluded after a
  refusal, crossing SYNs are the only way through, and two SYNs cross only if they leave
  within one one-way trip between the NATs of each other: such a plan spaces its refused
  tries by :data:`CROSSING_SPACING` instead (plus the random part), so that a round trip as
  short as a LAN's still gives many chances a second (the chance of a crossing grows with the
  square of the rate); a longer round trip spaces them by itself. While the link is relayed,
  a refused try of such a plan is made again the same way for :data:`REFUSED_BURST` after
  each of the upgrade schedule's quick first tries. Other failures within the window are
  retried every :data:`PUNCH_RETRY_DELAY` as before; nothing is dialled after
  :data:`PUNCH_WINDOW` (but for those bursts), or :data:`CROSSING_WINDOW` for a plan that relies
  on crossing SYNs (whose refused background tries are also made again throughout it).

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
