"""L1 glue facing stock magic-wormhole: the Dilator, built by stock's Boss with every wormhole.

It holds what arrives before the application calls ``dilate()`` (the dilation key, the peer's
versions, DILATE-n messages, a stop) and replays it, in order, into the one
:class:`~txdilation.manager.Manager` that ``dilate()`` creates; afterwards it only forwards.
It also watches the wormhole's Terminator so that a txdilation peer hears of the
application's close while our mailbox is still open.

Invariants: at most one Manager per Dilator (a second ``dilate()`` raises
``CanOnlyDilateOnceError``); nothing received before ``dilate()`` is lost or reordered;
``stop()`` fires the Terminator's ``stoppedD`` exactly once, after the Manager stopped.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.task import Cooperator
from twisted.logger import Logger
from wormhole._interfaces import IDilator, ISend, ITerminator
from wormhole._status import DilationStatus, WormholeStatus
from zope.interface import implementer

from . import manager as _manager_module
from .errors import CanOnlyDilateOnceError
from .keys import derive_dilation_key
from .manager import DILATION_VERSIONS, DilatedWormhole, Manager, normalize_ping_interval
from .semantics import Semantics, default_semantics

__all__ = ["Dilator"]

_log = Logger(namespace="txdilation.dilator")


@implementer(IDilator)
class Dilator:
    """Built with every wormhole; becomes a Manager when the application calls dilate()."""

    def __init__(
        self,
        reactor: Any,
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

    def wire(self, sender: Any, terminator: Any) -> None:
        self._S = ISend(sender)
        self._T = ITerminator(terminator)
        self._watch_close(terminator)

    def _watch_close(self, terminator: Any) -> None:
        """Hear the application's ``w.close()`` while the mailbox is still open.

        Stock's Boss calls ``Terminator.close(mood)`` and only after the mailbox has closed
        does the Terminator call our ``stop()``: too late to tell the peer. So the close input
        of this wormhole's own Terminator is wrapped (on the instance) to announce the close
        to a txdilation peer first (``Manager.announce_closing``).
        """
        close = getattr(terminator, "close", None)
        if close is None or getattr(close, "_txdilation_announces", False):
            return

        def close_and_announce(*args: Any, **kwargs: Any) -> Any:
            if self._manager is not None:
                try:
                    self._manager.announce_closing()
                except Exception:
                    _log.failure("announcing the close to the peer failed")
            return close(*args, **kwargs)

        close_and_announce._txdilation_announces = True  # type: ignore[attr-defined]
        try:
            terminator.close = close_and_announce
        except AttributeError:  # a terminator that cannot be wrapped: no announcement
            _log.warn("cannot watch {t!r} for close; the peer will not hear of it", t=terminator)

    def dilate(
        self,
        transit_relay_location: str | None = None,
        no_listen: bool = False,
        wormhole_status: WormholeStatus | None = None,
        status_update: Callable[[DilationStatus], object] | None = None,
        ping_interval: float | int | None = None,
        expected_subprotocols: Iterable[str] | None = None,
        semantics: Semantics | None = None,
    ) -> DilatedWormhole:
        """Start dilating (once); returns the DilatedWormhole at once.

        :param semantics: what the application sees where stock's behaviour is a defect;
            default: ``txdilation.install(semantics=)``, else ``TXDILATION_SEMANTICS``, else
            stock's (:data:`txdilation.semantics.STOCK`).
        :raises CanOnlyDilateOnceError: on a second call.
        :raises TypeError, ValueError: for a bad ``ping_interval`` or ``TXDILATION_SEMANTICS``.
        """
        if self._manager is not None:
            raise CanOnlyDilateOnceError()
        interval = normalize_ping_interval(ping_interval)
        if semantics is None:
            semantics = default_semantics(os.environ)
        tor = self._tor()
        m = Manager(
            self._S,
            # looked up at call time where stock has it (wormhole._dilation.manager.make_side),
            # so that code patching stock's name to force a side also works with us
            _manager_module.make_side(),
            transit_relay_location,
            self._reactor,
            self._eventual_queue,
            self._cooperator,
            self._acceptable_versions,
            interval,
            expected_subprotocols,
            no_listen,
            status_update,
            initial_mailbox_status=wormhole_status,
            tor=tor,
            semantics=semantics,
        )
        self._manager = m
        if self._pending_key is not None:
            m.got_dilation_key(self._pending_key)
        if self._pending_versions is not None:
            m.got_wormhole_versions(self._pending_versions)
        while self._pending_messages:
            m.received_dilation_message(self._pending_messages.popleft())
        if self._stop_requested:
            m.stop()
        return m._api

    def _tor(self) -> Any:
        """The wormhole's Tor manager, if it was created with ``tor=`` (stock ignores it)."""
        boss = getattr(getattr(self, "_T", None), "_B", None)
        return getattr(boss, "_tor", None)

    def stop(self) -> None:
        """Called by the Terminator once the mailbox is closed; fires ``T.stoppedD()``."""
        if self._stop_requested:
            return
        self._stop_requested = True
        if self._manager is None:
            self._T.stoppedD()
            return
        self._manager.stop()
        self._manager.when_stopped().addCallback(lambda _: self._T.stoppedD())

    def got_key(self, key: bytes) -> None:
        dilation_key = derive_dilation_key(key)
        if self._manager is not None:
            self._manager.got_dilation_key(dilation_key)
        else:
            self._pending_key = dilation_key

    def got_wormhole_versions(self, their_wormhole_versions: dict[str, Any]) -> None:
        if self._manager is not None:
            self._manager.got_wormhole_versions(their_wormhole_versions)
        else:
            self._pending_versions = their_wormhole_versions

    def received_dilate(self, plaintext: bytes) -> None:
        if self._manager is not None:
            self._manager.received_dilation_message(plaintext)
        else:
            self._pending_messages.append(plaintext)
