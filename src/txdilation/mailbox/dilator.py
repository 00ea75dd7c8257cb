"""L1: the Dilator, built by stock's Boss with every wormhole (``IDilator``).

It holds what arrives before the application calls ``dilate()`` (key, peer versions, DILATE-n
messages, a stop) and replays it, in order, into the one
:class:`~txdilation.mailbox.manager.Manager` that ``dilate()`` creates, then only forwards;
settings, side and Tor manager come to ``dilate()`` as typed values (the stock-facing subclass:
``txdilation._stock.manager.Dilator``). :meth:`Dilator.when_flushed` lets the stock-facing edge
hold the application's close (bounded) until the peer acknowledged what we wrote.

Invariants: at most one Manager per Dilator (a second ``dilate()`` raises
``CanOnlyDilateOnceError``); nothing received before ``dilate()`` is lost or reordered;
``stop()`` fires the Terminator's ``stoppedD`` exactly once, after the Manager stopped; no
exception leaves ``got_key``, ``got_wormhole_versions``, ``received_dilate`` or ``stop`` (stock
would end the whole wormhole: a fault is logged, its message dropped; docs/module-notes.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from twisted.internet.defer import Deferred
from twisted.internet.task import Cooperator, LoopingCall
from twisted.logger import Logger
from wormhole._interfaces import IDilator, ISend, ITerminator
from wormhole._status import (
    ConnectedPeer,
    ConnectingPeer,
    DilationStatus,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)
from zope.interface import implementer

from txdilation._version import IMPLEMENTATION, __version__
from txdilation.mailbox.dilate_messages import make_side
from txdilation.mailbox.dilated import DilatedWormhole
from txdilation.mailbox.manager import DILATION_VERSIONS, Manager
from txdilation.path.liveness import normalize_ping_interval
from txdilation.selection.punch import public_addresses
from txdilation.selection.relays import RelayLocation
from txdilation.settings import Settings
from txdilation.wire.contracts import IDilationReactor
from txdilation.wire.dilation_errors import CanOnlyDilateOnceError
from txdilation.wire.keys import derive_dilation_key

__all__ = ["Dilator", "contain_fault"]

_log = Logger()


def _stock_version() -> str:
    """magic-wormhole's version (asked when dilating: stock's package is imported by then,
    while this module may be imported during stock's own ``import wormhole``)."""
    import wormhole

    return str(wormhole.__version__)


FLUSH_CHECK = 0.05
"""Seconds between two looks at what the peer has still to acknowledge, while a close waits."""


def contain_fault(what: str, handle: Callable[..., object], *args: Any) -> bool:
    """``handle(*args)`` for stock's Boss, a fault in it logged (with its traceback) instead of
    raised into the Boss, which would close the whole wormhole with it (module docstring).

    :returns: whether ``handle`` returned (False: it raised, and that was logged).
    """
    try:
        handle(*args)
    except Exception:
        _log.failure("handling {what} failed (a txdilation fault): it is dropped", what=what)
        return False
    return True


@implementer(IDilator)
class Dilator:
    """Built with every wormhole; becomes a Manager when the application calls dilate()."""

    #: the Manager class ``dilate()`` builds (the stock-facing subclass builds stock's hooks)
    manager_type: ClassVar[type[Manager]] = Manager

    def __init__(
        self,
        reactor: IDilationReactor,
        eventual_queue: Any,
        cooperator: Cooperator | None,
        acceptable_versions: Iterable[str] | None = None,
    ) -> None:
        self._reactor = reactor
        self._eventual_queue = eventual_queue
        self._cooperator = cooperator
        self._acceptable_versions = list(acceptable_versions or DILATION_VERSIONS)
        self._manager: Manager | None = None
        self._pending_key: bytes | None = None
        self._pending_versions: dict[str, Any] | None = None
        self._pending_messages: deque[bytes] = deque()
        self._stop_requested = False
        self._public_addresses: tuple[str, ...] = ()

    def wire(self, sender: Any, terminator: Any) -> None:
        self._S = ISend(sender)
        self._T = ITerminator(terminator)

    def dilate(
        self,
        transit_relay_location: RelayLocation = None,
        no_listen: bool = False,
        wormhole_status: WormholeStatus | None = None,
        status_update: Callable[[DilationStatus], object] | None = None,
        ping_interval: float | int | None = None,
        expected_subprotocols: Iterable[str] | None = None,
        *,
        settings: Settings | None = None,
        side: str | None = None,
        tor: Any = None,
    ) -> DilatedWormhole:
        """Start dilating (once); returns the DilatedWormhole at once.

        :param settings: the limits, network settings and semantics (default: the defaults).
        :param side: our dilation side (default: a new random one).
        :param tor: the wormhole's Tor manager, if any.
        :raises CanOnlyDilateOnceError: on a second call.
        :raises TypeError, ValueError: for a bad ``ping_interval``.
        """
        if self._manager is not None:
            raise CanOnlyDilateOnceError()
        m = self.manager_type(
            self._S,
            make_side() if side is None else side,
            transit_relay_location,
            self._reactor,
            self._eventual_queue,
            self._cooperator,
            self._acceptable_versions,
            normalize_ping_interval(ping_interval),
            expected_subprotocols,
            no_listen,
            status_update,
            initial_mailbox_status=wormhole_status,
            tor=tor,
            settings=settings if settings is not None else Settings(),
        )
        self._manager = m
        _log.info(
            "dilating through {implementation} {version} (in place of magic-wormhole "
            "{stock_version}'s Dilation)",
            implementation=IMPLEMENTATION,
            version=__version__,
            stock_version=_stock_version(),
        )
        m.public_addresses_seen(self._public_addresses)
        if self._pending_key is not None:
            contain_fault("the dilation key", m.got_dilation_key, self._pending_key)
        if self._pending_versions is not None:
            contain_fault("the peer's versions", m.got_wormhole_versions, self._pending_versions)
        while self._pending_messages:
            message = self._pending_messages.popleft()
            contain_fault("a dilation message", m.received_dilation_message, message)
        if self._stop_requested:
            m.stop()
        return m.api

    def announce_closing(self) -> None:
        """The application is closing the wormhole (our mailbox is still open): tell a peer
        that understands it (``Manager.announce_closing``)."""
        if self._manager is not None:
            self._manager.announce_closing()

    def when_flushed(self, timeout: float) -> Deferred[int] | None:
        """The application is closing the wormhole, whose mailbox is still open: wait until
        the peer acknowledged every record we sent, reconnecting if the link is down.

        :returns: None when nothing is to be waited for (not dilated, never connected, the
            peer gone, a stop under way, nothing unacknowledged); else a Deferred firing,
            once everything is acknowledged or after ``timeout`` seconds, with how many
            records are still unacknowledged (0: all delivered; more is logged as lost).
        """
        m = self._manager
        if m is None or self._stop_requested:
            return None
        mux, status = m.multiplexer, m.status
        pending = mux.unacknowledged_records
        peer = status.peer_connection
        reached = isinstance(peer, ConnectedPeer | ReconnectingPeer) or (
            isinstance(peer, ConnectingPeer) and status.generation > 1
        )
        if pending == 0 or not reached:
            return None
        _log.info(
            "closing: waiting up to {timeout} s for the peer to acknowledge {n} record(s)",
            timeout=timeout,
            n=pending,
        )
        done: Deferred[int] = Deferred()
        deadline = self._reactor.seconds() + timeout

        def check() -> None:  # every FLUSH_CHECK s: acknowledged, the peer gone, or too late
            left = mux.unacknowledged_records
            gone = isinstance(m.status.peer_connection, StoppedPeer)
            if left and not gone and self._reactor.seconds() < deadline:
                return
            poll.stop()
            if left:
                _log.warn(
                    "closing with {n} record(s) the peer did not acknowledge: it may miss our "
                    "last data or subchannel close",
                    n=left,
                )
            done.callback(left)

        poll = LoopingCall(check)
        poll.clock = self._reactor
        poll.start(FLUSH_CHECK, now=False)
        return done

    def stop(self) -> None:
        """Called by the Terminator once the mailbox is closed; fires ``T.stoppedD()`` (at
        once if the Manager's stop raised: the wormhole's close must not wait for ever)."""
        if self._stop_requested:
            return
        self._stop_requested = True
        m = self._manager
        if m is None or not contain_fault("the stop", m.stop):
            self._T.stoppedD()
            return
        m.when_stopped().addCallback(lambda _: self._T.stoppedD())

    def got_welcome(self, welcome: Mapping[str, Any]) -> None:
        """The mailbox server's welcome (each time our mailbox connection opens): the address
        it sees us at is kept for hole punching (``selection.punch``)."""
        self._public_addresses = public_addresses(welcome)
        if self._manager is not None:
            self._manager.public_addresses_seen(self._public_addresses)

    def got_key(self, key: bytes) -> None:
        dilation_key = derive_dilation_key(key)
        if self._manager is not None:
            contain_fault("the dilation key", self._manager.got_dilation_key, dilation_key)
        else:
            self._pending_key = dilation_key

    def got_wormhole_versions(self, their_wormhole_versions: dict[str, Any]) -> None:
        if self._manager is not None:
            m = self._manager
            contain_fault("the peer's versions", m.got_wormhole_versions, their_wormhole_versions)
        else:
            self._pending_versions = their_wormhole_versions

    def received_dilate(self, plaintext: bytes) -> None:
        if self._manager is not None:
            m = self._manager
            contain_fault("a dilation message", m.received_dilation_message, plaintext)
        else:
            self._pending_messages.append(plaintext)
