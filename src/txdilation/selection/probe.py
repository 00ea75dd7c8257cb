"""L3: does a direct path to a stock peer work again? (TCP reachability probes.)

A stock peer stops listening and dialing once its generation selected a link, so a relayed
link cannot move to a direct one within the generation; a txdilation Leader can start a new
generation that prefers the direct path once it knows one works. :class:`ReachabilityProber`
opens, on the :class:`~txdilation.selection.upgrade.RetrySchedule`, a plain TCP connection to
each direct hint (IP literals) of the peer's and closes it at once: a RST or an accept proves
packets flow again (timeouts and other errors prove nothing); the first proof is reported once
(``on_proof``) and the prober stops.

Invariants: nothing is written on a probe connection (it is aborted as soon as it connects);
at most one probe per hint is in flight; after :meth:`ReachabilityProber.stop` no probe is
started and the ones in flight are cancelled; only the reactor's clock and TCP are used.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.selection.hints import DirectTCPV1Hint, Hint
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, RetrySchedule
from txdilation.wire.contracts import IDilationReactor

__all__ = ["ReachabilityProber", "proves_reachable"]

_log = Logger()


def proves_reachable(outcome: object) -> bool:
    """Whether a probe's outcome proves that the peer's host answers: a connection (any
    non-Failure outcome) or a refusal (a RST); never a timeout or another error."""
    if not isinstance(outcome, Failure):
        return True
    if outcome.check(ConnectionRefusedError):  # type: ignore[no-untyped-call]
        return True
    return getattr(outcome.value, "osError", None) == errno.ECONNREFUSED


class _Closer(Protocol):
    """A probe connection: aborted as soon as it exists."""

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.abortConnection()  # type: ignore[attr-defined]


class ReachabilityProber:
    """Probes a stock peer's direct hints until one answers (see the module docstring).

    :param reactor: IReactorTCP and IReactorTime.
    :param hints: the peer's hints of this generation (only direct IP literals are probed).
    :param schedule: when to probe (the link's selection is its origin).
    :param on_proof: called once, with the probed hint's description, on the first proof.
    """

    def __init__(
        self,
        reactor: IDilationReactor,
        hints: Iterable[Hint],
        schedule: RetrySchedule,
        on_proof: Callable[[str], object],
    ) -> None:
        self._reactor = reactor
        self._targets = [h for h in hints if isinstance(h, DirectTCPV1Hint) and _literal(h)]
        self._schedule = schedule
        self._on_proof = on_proof
        self._timer: IDelayedCall | None = None
        self._in_flight: dict[str, Deferred[Any]] = {}
        self._started = False
        self._stopped = False

    @property
    def targets(self) -> int:
        """How many hints are probed."""
        return len(self._targets)

    def start(self) -> None:
        """Probe on the schedule from now on (once there is a hint to probe)."""
        self._started = True
        if self._targets and not self._stopped and self._timer is None:
            _log.debug(
                "probing {n} direct hints of the peer until one answers", n=len(self._targets)
            )
            self._arm()

    def add(self, hints: Iterable[Hint]) -> None:
        """More hints of the peer (they came after the selection): probe them too."""
        for hint in hints:
            if isinstance(hint, DirectTCPV1Hint) and _literal(hint) and hint not in self._targets:
                self._targets.append(hint)
        if self._started:
            self.start()

    def stop(self) -> None:
        """No more probes; those in flight are cancelled. Idempotent."""
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        for d in list(self._in_flight.values()):
            d.cancel()
        self._in_flight.clear()

    def _arm(self) -> None:
        now = self._reactor.seconds()
        self._timer = self._reactor.callLater(self._schedule.next_after(now) - now, self._probe)

    def _probe(self) -> None:
        self._timer = None
        for hint in self._targets:
            key = f"{hint.hostname}:{hint.port}"
            if key not in self._in_flight:
                self._connect(hint, key)
        if not self._stopped:
            self._arm()

    def _connect(self, hint: DirectTCPV1Hint, key: str) -> None:
        version = ipaddress.ip_address(hint.hostname).version
        endpoint_class: Any = TCP6ClientEndpoint if version == 6 else TCP4ClientEndpoint
        endpoint = endpoint_class(
            self._reactor, hint.hostname, hint.port, timeout=BACKGROUND_CONNECT_TIMEOUT
        )
        d: Deferred[Any] = endpoint.connect(Factory.forProtocol(_Closer))
        self._in_flight[key] = d

        def done(outcome: object) -> None:
            self._in_flight.pop(key, None)
            if self._stopped:
                return
            if proves_reachable(outcome):
                _log.info("{key} answers again: a direct path works", key=key)
                self.stop()
                self._on_proof(key)
            else:
                _log.debug("probe of {key}: {why}", key=key, why=outcome)

        d.addBoth(done)


def _literal(hint: DirectTCPV1Hint) -> bool:
    try:
        ipaddress.ip_address(hint.hostname)
    except ValueError:
        return False
    return True
