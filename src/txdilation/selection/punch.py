"""L3: TCP hole punching and dual-stack sockets for direct hints.

We advertise the address the mailbox saw (``welcome["your-address"]``, :func:`public_addresses`)
with our *listening* port as a ``direct-tcp-v1`` hint at :data:`PUNCH_PRIORITY`
(:func:`punched_hints`), and dial from that port (:func:`dial_binding`, ``SO_REUSEPORT``), so
the two SYNs open both NATs (a TCP simultaneous open; the Noise role still comes from
Leader/Follower). NATs that refuse with a RST: :mod:`txdilation.selection.punch_schedule`. The
listener binds ``::`` (or ``0.0.0.0`` without IPv6). The wire is unchanged. How and why:
docs/connectivity.md, "Hole punching".

Invariants: the functions that build hints are pure; socket options are only asked of a real
POSIX reactor (:func:`sockets_reusable`: elsewhere, e.g. a ``MemoryReactor``, the connector
keeps its plain listener and dials); a hint whose host is a name (not an IP literal) is never
dialled from the listening port (its family is unknown before resolution).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from twisted.internet import tcp
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import ServerFactory
from twisted.internet.tcp import makeBinding

from txdilation.selection.hints import DirectTCPV1Hint, TCPHint

__all__ = [
    "PUNCH_PRIORITY",
    "PUNCH_RETRY_DELAY",
    "PUNCH_WINDOW",
    "dial_address",
    "dial_binding",
    "is_punched",
    "listen",
    "public_addresses",
    "punched_hints",
    "sockets_reusable",
]

PUNCH_PRIORITY = -1.0
"""The priority of a punched hint: below the ordinary direct hints (0.0), dialled last."""

PUNCH_WINDOW = 5.0
"""Seconds after its first dial during which a failed dial from the listening port is retried
(the peer's SYN may not have opened its NAT yet)."""

PUNCH_RETRY_DELAY = 0.5
"""Seconds between such retries."""


def is_punched(hint: TCPHint) -> bool:
    """Whether a peer's hint is a punched one (a punching peer advertises its public address
    below the ordinary priority; stock advertises every direct hint at 0.0)."""
    return isinstance(hint, DirectTCPV1Hint) and hint.priority <= PUNCH_PRIORITY


def public_addresses(welcome: Mapping[str, Any]) -> tuple[str, ...]:
    """The public addresses in a mailbox ``welcome`` (``your-address``), normalised.

    Loopback, link-local, unspecified and multicast addresses are left out (a mailbox server on
    the same host or link says nothing our own discovered addresses do not), and so is
    anything that is not an IP address. Never raises on what a server sent.
    """
    you = welcome.get("your-address") if isinstance(welcome, Mapping) else None
    if not isinstance(you, Mapping):
        return ()
    found: list[str] = []
    for key in ("ipv4", "ipv6"):
        raw = you.get(key)
        if not isinstance(raw, str):
            continue
        try:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
        except ValueError:
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack server's view of an IPv4 client
        if (
            address.is_loopback
            or address.is_link_local
            or address.is_unspecified
            or address.is_multicast
        ):
            continue
        text = str(address)
        if text not in found:
            found.append(text)
    return tuple(found)


def punched_hints(
    public: Iterable[str], port: int, advertised: Iterable[str]
) -> list[DirectTCPV1Hint]:
    """The punched hints to advertise: each public address not already ``advertised``, with
    our listening (or hint) ``port``, at :data:`PUNCH_PRIORITY`."""
    known = {_normal(a) for a in advertised}
    hints = []
    for address in public:
        if _normal(address) in known:
            continue
        known.add(_normal(address))
        hints.append(DirectTCPV1Hint(address, port, PUNCH_PRIORITY))
    return hints


def _normal(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def sockets_reusable(reactor: Any) -> bool:
    """Whether this reactor makes real sockets whose ``SO_REUSEPORT`` we can set."""
    from twisted.internet.posixbase import PosixReactorBase

    return hasattr(socket, "SO_REUSEPORT") and isinstance(reactor, PosixReactorBase)


class _FreshTurnPort(tcp.Port):
    """A listening port that watches for connections from the reactor's next turn on.

    A generation's listener is often opened while the reactor hands out one poll's events (the
    previous link's loss, say). A socket closed earlier in that batch frees its descriptor
    number with one of its events still to come; the new listener may get the number, and the
    stale event would reach it (a write event: ``doWrite called on a Port``, the listener
    lost). Registered a turn later, after the batch, it never sees an event that was not its
    own. Bound and listening at once all the same: connections wait in the accept queue.
    """

    _watching = False

    def startReading(self) -> None:
        if self._watching:
            super().startReading()  # type: ignore[no-untyped-call]
            return
        self._watching = True
        reactor: Any = self.reactor
        reactor.callLater(0, self._watch)

    def _watch(self) -> None:
        if self.connected and not self.disconnecting:
            super().startReading()  # type: ignore[no-untyped-call]

    def doWrite(self) -> None:
        """A listening socket never asks to write: the event was meant for an earlier owner
        of the descriptor number. Ignored."""


def listen(
    reactor: Any,
    factory: ServerFactory,
    port: int,
    interface: str | None,
    *,
    reuse_port: bool,
    backlog: int = 50,
) -> IListeningPort:
    """Listen on ``interface`` (default: every IPv6 and IPv4 address) and ``port``, with
    ``SO_REUSEADDR`` and, for punching, ``SO_REUSEPORT``; ``backlog`` as ``listenTCP``'s.

    :raises CannotListenError: as ``listenTCP`` does.
    """
    every = ["::", "0.0.0.0"] if socket.has_ipv6 else ["0.0.0.0"]
    candidates = [interface] if interface else every
    last: CannotListenError | None = None
    for address in candidates:
        binding = makeBinding(address, port, reuseAddress=True, reusePort=reuse_port)
        try:
            listening = _FreshTurnPort(binding, factory, backlog, address, reactor)  # type: ignore[arg-type]
            listening.startListening()
            return listening
        except CannotListenError as e:
            last = e
            no_ipv6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)
            if address != "::" or getattr(e.socketError, "errno", None) not in no_ipv6:
                raise
    assert last is not None
    raise last


def dial_address(hint: TCPHint, listen_port: int, interface: str | None) -> tuple[str, int] | None:
    """The local address a direct dial to ``hint`` starts from, our listening port, or
    ``None`` when that hint cannot be dialled from it (a host name; another family than a
    configured listen interface)."""
    try:
        target = ipaddress.ip_address(hint.hostname)
    except ValueError:
        return None
    if interface:
        try:
            if ipaddress.ip_address(interface).version != target.version:
                return None
        except ValueError:
            return None
        return interface, listen_port
    return ("::" if target.version == 6 else "0.0.0.0"), listen_port


def dial_binding(hint: TCPHint, listen_port: int, interface: str | None) -> Any:
    """The local binding (``SO_REUSEADDR`` and ``SO_REUSEPORT``) for a direct dial to
    ``hint`` from our listening port (:func:`dial_address`), or ``None``."""
    local = dial_address(hint, listen_port, interface)
    if local is None:
        return None
    return makeBinding(*local, reuseAddress=True, reusePort=True)
