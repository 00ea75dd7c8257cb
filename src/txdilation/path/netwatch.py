"""L3: noticing local network changes (addresses or routes appearing or disappearing).

A host that moves leaves its connections on an address it no longer has. :class:`NetworkWatcher`
calls ``on_change()`` soon after the host's addresses or routes change: on Linux through a raw
rtnetlink socket read from the reactor (no thread, no polling), elsewhere by polling every
:data:`POLL_INTERVAL` seconds. :func:`address_is_local` says whether this host still has an
address. More: docs/module-notes.md.

Invariants: a burst of events is reported once, :data:`SETTLE` seconds after the last; one
watcher per process is shared by every dilated wormhole (:func:`subscribe`) and runs while a
subscriber is left; opening it never makes a generation wait.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorFDSet, IReadDescriptor
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from zope.interface import implementer

from txdilation.wire.contracts import IDilationReactor

__all__ = [
    "POLL_INTERVAL",
    "SETTLE",
    "NetworkWatcher",
    "address_is_local",
    "message_types",
    "subscribe",
]

#: seconds between address polls where netlink is not available
POLL_INTERVAL = 2.0
#: seconds after the last event of a burst before it is reported
SETTLE = 0.05

_log = Logger()

# rtnetlink message types that mean "the paths out of this host may have changed"
# (linux/rtnetlink.h: RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR, RTM_DELADDR, RTM_NEWROUTE,
# RTM_DELROUTE)
_EVENTS = frozenset({16, 17, 20, 21, 24, 25})
# the multicast groups they arrive on: RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV4_ROUTE,
# RTMGRP_IPV6_IFADDR, RTMGRP_IPV6_ROUTE
_GROUPS = 0x1 | 0x10 | 0x40 | 0x100 | 0x400
_NETLINK_ROUTE = 0
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr: length, type, flags, seq, pid


def message_types(datagram: bytes) -> list[int]:
    """The ``nlmsg_type`` of each netlink message in one datagram, in order (I/O-free). A
    truncated or malformed tail ends the list: what was read before it is kept."""
    types = []
    offset = 0
    while offset + _HEADER.size <= len(datagram):
        length, kind, _flags, _seq, _pid = _HEADER.unpack_from(datagram, offset)
        if length < _HEADER.size:
            break
        types.append(kind)
        offset += (length + 3) & ~3  # NLMSG_ALIGN
    return types


def address_is_local(host: str) -> bool:
    """True while this host has the address ``host`` (an unparsable one counts as local: we
    cannot tell, so nothing is dropped for it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        probe = socket.socket(family, socket.SOCK_DGRAM)
    except OSError:
        return True
    try:
        probe.bind((host.split("%")[0], 0))
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    finally:
        probe.close()
    return True


@implementer(IReadDescriptor)
class _NetlinkReader:
    """The rtnetlink socket as a reactor read descriptor."""

    def __init__(self, sock: socket.socket, on_event: Callable[[], None]) -> None:
        self._sock = sock
        self._on_event = on_event

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def doRead(self) -> None:
        changed = False
        while True:
            try:
                datagram = self._sock.recv(65536)
            except BlockingIOError:
                break
            except OSError as e:  # ENOBUFS: events were dropped; something changed
                changed = changed or e.errno == errno.ENOBUFS
                if e.errno != errno.ENOBUFS:
                    _log.info("reading rtnetlink: {e}", e=e)
                    break
                continue
            if not datagram:
                break
            changed = changed or any(kind in _EVENTS for kind in message_types(datagram))
        if changed:
            self._on_event()

    def connectionLost(self, reason: object) -> None:
        pass

    def logPrefix(self) -> str:
        return "rtnetlink"


def _open_netlink() -> socket.socket | None:
    """A non-blocking rtnetlink socket bound to the address, route and link groups, or None
    (not Linux, or no netlink here: a sandbox)."""
    family = getattr(socket, "AF_NETLINK", None)
    if family is None or not sys.platform.startswith("linux"):
        return None
    try:
        sock = socket.socket(family, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_ROUTE)
    except OSError as e:
        _log.info("no rtnetlink ({e}): polling addresses instead", e=e)
        return None
    try:
        sock.setblocking(False)
        sock.bind((0, _GROUPS))
    except OSError as e:
        sock.close()
        _log.info("no rtnetlink ({e}): polling addresses instead", e=e)
        return None
    return sock


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(Exception):
        sock.close()


def _addresses() -> frozenset[str]:
    """This host's addresses (for polling; stock's discovery, as the Connector's hints)."""
    from wormhole import ipaddrs

    return frozenset(ipaddrs.find_addresses())


class NetworkWatcher:
    """Calls ``on_change()`` after the host's addresses or routes changed (see the module
    docstring). ``start()``/``stop()`` are idempotent."""

    def __init__(self, reactor: IDilationReactor, on_change: Callable[[], None]) -> None:
        self._reactor = reactor
        self._on_change = on_change
        self._reader: _NetlinkReader | None = None
        self._poll: IDelayedCall | None = None
        self._settle: IDelayedCall | None = None
        self._known: frozenset[str] = frozenset()
        self.running = False

    def start(self) -> None:
        if self.running:
            return
        self.running = True
        if not IReactorFDSet.providedBy(self._reactor):
            return  # a test's Clock: nothing to watch
        sock = _open_netlink()
        if sock is not None:
            self._reader = _NetlinkReader(sock, self._event)
            self._reactor.addReader(self._reader)
        else:
            self._poll = self._reactor.callLater(0, self._poll_once)

    def stop(self) -> None:
        self.running = False
        if self._reader is not None:
            self._reactor.removeReader(self._reader)
            # closed a turn later, as punch_dial's connecting sockets are: a stale event of
            # the batch the reactor is handling must not reach whatever reuses the number
            self._reactor.callLater(0, _close_quietly, self._reader._sock)
            self._reader = None
        for call in (self._poll, self._settle):
            if call is not None and call.active():
                call.cancel()
        self._poll = self._settle = None

    def _poll_once(self) -> None:
        self._poll = None
        d = deferToThreadPool(self._reactor, self._reactor.getThreadPool(), _addresses)
        d.addCallbacks(self._polled, lambda f: _log.failure("polling addresses", f))

    def _polled(self, now: frozenset[str]) -> None:
        if not self.running:
            return
        before, self._known = self._known, now
        if before and now != before:
            self._event()
        self._poll = self._reactor.callLater(POLL_INTERVAL, self._poll_once)

    def _event(self) -> None:
        if self._settle is not None and self._settle.active():
            self._settle.reset(SETTLE)
        else:
            self._settle = self._reactor.callLater(SETTLE, self._report)

    def _report(self) -> None:
        self._settle = None
        _log.info("the local network changed")
        try:
            self._on_change()
        except Exception:
            _log.failure("reacting to a network change")


class _Shared:
    """One reactor's watcher and its subscribers."""

    def __init__(self) -> None:
        self.watcher: NetworkWatcher | None = None
        self.subscribers: list[Callable[[], None]] = []

    def changed(self) -> None:
        for callback in list(self.subscribers):
            try:
                callback()
            except Exception:
                _log.failure("a network-change subscriber raised")


# one watcher per reactor (a process has one; tests also drive Managers on Clocks, and a
# watcher started on one of those must not stand in for the real reactor's)
_watchers: dict[Any, _Shared] = {}


def subscribe(reactor: IDilationReactor, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` on every network change from now on; returns the unsubscribe
    function (idempotent). A reactor's shared watcher starts with its first subscriber and
    stops when the last one leaves."""
    shared = _watchers.get(reactor)
    if shared is None:
        shared = _watchers[reactor] = _Shared()
        shared.watcher = NetworkWatcher(reactor, shared.changed)
        shared.watcher.start()
    shared.subscribers.append(callback)

    def unsubscribe() -> None:
        if callback in shared.subscribers:
            shared.subscribers.remove(callback)
            if not shared.subscribers:
                if shared.watcher is not None:
                    shared.watcher.stop()
                    shared.watcher = None
                if _watchers.get(reactor) is shared:
                    del _watchers[reactor]

    return unsubscribe
