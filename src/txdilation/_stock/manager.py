"""``wormhole._dilation.manager``: stock's Boss builds ``Dilator`` from here, ``wormhole.create()``
reads ``DILATION_VERSIONS``, fowl imports ``DilatedWormhole``; and the hooks stock code and
magic-wormhole's tests reach (each what stock's own module offers, nothing the core depends on):
``make_side``, looked up here at each ``dilate()`` so that tests may patch it;
``Dilator.dilate()``, the edge that reads the ``TXDILATION_*`` settings from ``os.environ`` and
passes on the wormhole's Tor manager (``Terminator._B._tor``); ``Dilator.wire()``, which
watches the Terminator (the peer hears of ``w.close()`` while our mailbox is open) and the
Boss's ``rx_welcome`` (``your-address`` for hole punching, as ``got_welcome``);
``Manager._debug_stall_connector``, ``Manager._wormhole_status(status)`` and
``Manager._connection`` (the selected L2 connection, which the tests disconnect).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from wormhole._status import DilationStatus, WormholeStatus

from txdilation.mailbox import dilator as _core_dilator
from txdilation.mailbox import manager as _core_manager
from txdilation.mailbox.dilate_messages import (
    CLOSING,
    EXTENSIONS,
    LINK_LOST,
    MalformedDilationMessage,
    choose_version,
    make_side,
)
from txdilation.mailbox.dilated import DilatedWormhole
from txdilation.mailbox.manager import DILATION_VERSIONS
from txdilation.mailbox.manager_lifecycle import CLOSE_TIMEOUT
from txdilation.path.netwatch import address_is_local
from txdilation.selection.connector import Connector
from txdilation.selection.relays import RelayLocation
from txdilation.semantics import Semantics
from txdilation.settings import Settings
from txdilation.wire.dilation_errors import (
    CanOnlyDilateOnceError,
    OldPeerCannotDilateError,
    RecordError,
    UnexpectedKCM,
)

#: stock's names for the errors txdilation raises (and logs) for the same events: a DILATE-n
#: message of an unknown ``type``, and a record of an unknown kind
UnknownDilationMessageType = MalformedDilationMessage
UnknownMessageType = RecordError

__all__ = [
    "CLOSING",
    "DILATION_VERSIONS",
    "EXTENSIONS",
    "LINK_LOST",
    "CanOnlyDilateOnceError",
    "DilatedWormhole",
    "Dilator",
    "Manager",
    "OldPeerCannotDilateError",
    "UnexpectedKCM",
    "UnknownDilationMessageType",
    "UnknownMessageType",
    "choose_version",
    "make_side",
]

_log = Logger()


class Manager(_core_manager.Manager):
    """The Manager with the attributes stock's Boss and magic-wormhole's tests use."""

    _debug_stall_connector: Callable[[Connector], object] | bool = False

    def _launch_connector(self, connector: Connector) -> None:
        stall = self._debug_stall_connector
        if callable(stall):
            stall(connector)
        else:
            super()._launch_connector(connector)

    def _wormhole_status(self, status: WormholeStatus) -> None:
        """stock's Boss reports each change of our mailbox status, often while it handles a
        mailbox message: a fault of ours is contained (``mailbox.dilator.contain_fault``)."""
        _core_dilator.contain_fault("the mailbox status", self.mailbox_status, status)

    @property
    def _connection(self) -> Any:
        return self.connection

    #: stock's RendezvousConnector of this wormhole (set by the Dilator), for network changes
    _rendezvous: Any = None

    def _network_changed_edge(self) -> None:
        """Our host's addresses changed: a mailbox WebSocket bound to an address we no longer
        have would hang until magic-wormhole's keepalive gives up (60-90 s). Abort it, so
        stock's ClientService reconnects (from the new address), and make its retry immediate
        rather than after its back-off (stock's mailbox machines then re-send what is queued)."""
        rc = self._rendezvous
        transport = getattr(getattr(rc, "_ws", None), "transport", None)
        try:
            host = transport.getHost().host  # type: ignore[union-attr]
        except Exception:
            return
        if not isinstance(host, str) or address_is_local(host):
            return
        _log.info("the mailbox connection's address {host} is gone: reconnecting it", host=host)
        transport.abortConnection()  # type: ignore[union-attr]
        self._reactor.callLater(0.05, _retry_now, getattr(rc, "_connector", None), self._reactor)


def _retry_now(service: Any, reactor: IReactorTime) -> None:
    """Make ``service``'s (a ClientService's) pending retry happen now."""
    machine = getattr(service, "_machine", None)
    for call in getattr(reactor, "getDelayedCalls", list)():
        if getattr(call.func, "__self__", None) is machine and call.active():
            call.reset(0)


class Dilator(_core_dilator.Dilator):
    """The Dilator stock's Boss builds (see the module docstring for what it adds)."""

    manager_type = Manager

    def wire(self, sender: Any, terminator: Any) -> None:
        super().wire(sender, terminator)
        self._watch_close(terminator)
        self._watch_welcome(getattr(terminator, "_B", None))
        self._hold_close(getattr(terminator, "_B", None))

    def _hold_close(self, boss: Any) -> None:
        """Stock's Boss closes the mailbox before it stops the Dilation, and drops the peer's
        DILATE-n messages from then on: a link down at that moment could not be made again,
        and what the peer had not acknowledged would be lost. So the Boss's ``close`` (what
        ``w.close()`` calls) is wrapped (on the instance) to wait first, at most
        ``CLOSE_TIMEOUT`` seconds, for the peer to acknowledge it (``when_flushed``)."""
        close = getattr(boss, "close", None)
        if close is None or getattr(close, "_txdilation_holds", False):
            return

        def close_when_flushed(*args: Any, **kwargs: Any) -> Any:
            try:
                flushed = self.when_flushed(CLOSE_TIMEOUT)
            except Exception:
                _log.failure("waiting for the peer's acknowledgements failed")
                flushed = None
            if flushed is None:
                return close(*args, **kwargs)
            flushed.addBoth(lambda _: close(*args, **kwargs))
            return None

        close_when_flushed._txdilation_holds = True  # type: ignore[attr-defined]
        try:
            boss.close = close_when_flushed
        except AttributeError:  # a Boss that cannot be wrapped: stock's close
            _log.warn("cannot hold {b!r}'s close for the last records", b=boss)

    def _watch_welcome(self, boss: Any) -> None:
        """Stock's Boss hands each mailbox ``welcome`` to the application only; its
        ``rx_welcome`` is wrapped (on the instance) to show us the welcome first."""
        rx_welcome = getattr(boss, "rx_welcome", None)
        if rx_welcome is None or getattr(rx_welcome, "_txdilation_sees", False):
            return

        def see_welcome(welcome: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(welcome, dict):
                _core_dilator.contain_fault("the mailbox welcome", self.got_welcome, welcome)
            return rx_welcome(welcome, *args, **kwargs)

        see_welcome._txdilation_sees = True  # type: ignore[attr-defined]
        try:
            boss.rx_welcome = see_welcome
        except AttributeError:  # a Boss that cannot be wrapped: no punched hints
            _log.warn("cannot watch {b!r} for the welcome; no hole punching", b=boss)

    def _watch_close(self, terminator: Any) -> None:
        """Stock's Boss calls ``Terminator.close(mood)``, and the Terminator calls our
        ``stop()`` only after the mailbox closed: too late to tell the peer. So this wormhole's
        own Terminator's close is wrapped (on the instance) to announce the close first."""
        close = getattr(terminator, "close", None)
        if close is None or getattr(close, "_txdilation_announces", False):
            return

        def close_and_announce(*args: Any, **kwargs: Any) -> Any:
            try:
                self.announce_closing()
            except Exception:
                _log.failure("announcing the close to the peer failed")
            return close(*args, **kwargs)

        close_and_announce._txdilation_announces = True  # type: ignore[attr-defined]
        try:
            terminator.close = close_and_announce
        except AttributeError:  # a terminator that cannot be wrapped: no announcement
            _log.warn("cannot watch {t!r} for close; the peer will not hear of it", t=terminator)

    def dilate(  # type: ignore[override]
        self,
        transit_relay_location: RelayLocation = None,
        no_listen: bool = False,
        wormhole_status: WormholeStatus | None = None,
        status_update: Callable[[DilationStatus], object] | None = None,
        ping_interval: float | int | None = None,
        expected_subprotocols: Iterable[str] | None = None,
        semantics: Semantics | None = None,
        settings: Settings | None = None,
    ) -> DilatedWormhole:
        """Stock's ``dilate()``, plus txdilation's ``settings`` (default: read from
        ``os.environ`` now) and ``semantics`` (replacing the settings' one when given).

        :raises CanOnlyDilateOnceError: on a second call.
        :raises TypeError, ValueError: for a bad ``ping_interval`` or ``TXDILATION_*`` variable.
        """
        if self._manager is not None:
            raise CanOnlyDilateOnceError()
        if settings is None:
            settings = Settings.from_process()
        if semantics is not None:
            settings = dataclasses.replace(settings, semantics=semantics)
        api = super().dilate(
            transit_relay_location,
            no_listen,
            wormhole_status,
            status_update,
            ping_interval,
            expected_subprotocols,
            settings=settings,
            side=make_side(),  # this module's name, looked up now (tests patch it)
            tor=self._tor(),
        )
        if isinstance(self._manager, Manager):
            boss = getattr(getattr(self, "_T", None), "_B", None)
            self._manager._rendezvous = getattr(boss, "_RC", None)
        return api

    def _tor(self) -> Any:
        """The wormhole's Tor manager, if it was created with ``tor=`` (stock ignores it)."""
        boss = getattr(getattr(self, "_T", None), "_B", None)
        return getattr(boss, "_tor", None)
