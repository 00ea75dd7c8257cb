"""L3: one dial to a hint of the peer's (its :class:`Dial` record) and what each of its tries
connects through: the route (a WebSocket relay, Tor, TCP from the listening port, a punched
dial, plain TCP or a hostname), the punched try's first-SYN TTL, the try's protocol factory and
its telemetry hint type.

The :class:`~txdilation.selection.dialing.Dialer` keeps the dials; this module says how one
try reaches its hint (:mod:`txdilation.selection.punch` for dials from the listening port,
:mod:`txdilation.selection.punch_schedule` for a punched hint's plan).

Invariants: a Tor dial is never punched nor bound to the listening port; a direct dial to an IP
literal starts from the listening port when there is one; a punched try whose TTL depends on
the expiry probe waits for its verdict; telemetry names hint types, never addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
)
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint
from twisted.internet.protocol import ClientFactory
from twisted.internet.tcp import makeBinding

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.selection import punch
from txdilation.selection.attempts import Attempt
from txdilation.selection.hints import (
    RelayEndpoint,
    TCPHint,
    TorTCPV1Hint,
    WebSocketHint,
    websocket_address,
)
from txdilation.selection.punch_dial import ExpiryProbe, punched_endpoint
from txdilation.selection.punch_schedule import PunchPlan, Verdict

__all__ = [
    "BuildProtocol",
    "Dial",
    "OutboundFactory",
    "TryRoute",
    "hint_type",
    "punched_connect",
    "route_for",
    "tcp_client_endpoint",
]


@dataclass(eq=False, slots=True)
class Dial:
    """One outbound dial to one hint of the peer's, from its first try to its end (a punch
    retry is the same dial, tried again)."""

    hint: RelayEndpoint
    via_relay: bool
    description: str
    relay_line: bytes | None  # what we say to the relay first (None: not through a relay)
    started: float  # the first try (the punch window counts from it)
    attempt: Attempt | None = None  # the current try's telemetry attempt
    connecting: Deferred[Any] | None = None  # the current try's connect(), while in progress
    punching: bool = False  # the current try dials a punched hint from our listening port
    plan: PunchPlan | None = None  # a punched hint's: its tries' TTLs and retries
    retry: IDelayedCall | None = None  # the next try, while one is due
    over: bool = False  # a direct dial that failed for good, or whose connection closed

    @property
    def relay(self) -> RelayEndpoint | None:
        """The relay this dial goes through (None for a direct or Tor dial)."""
        return self.hint if self.via_relay else None


#: ``build(dial)``: the Connector's L2 protocol for the TCP connection a dial made
BuildProtocol = Callable[[Dial], DilatedConnectionProtocol]


@dataclass(frozen=True, slots=True)
class TryRoute:
    """How one try reaches its hint."""

    #: what the try connects with; None: a punched hint, connected by :func:`punched_connect`
    endpoint: IStreamClientEndpoint | None
    #: the address the try is dialled from (hole punching's listening port), if any
    local: tuple[str, int] | None = None
    #: the hint as a TCP hint, when it may be dialled from the listening port
    punchable: TCPHint | None = None
    #: whether the hint is one of the peer's punched hints (dialled through its plan)
    punched: bool = False


def route_for(
    reactor: Any,
    hint: RelayEndpoint,
    *,
    via_relay: bool,
    listen_port: int | None,
    listen_interface: str | None,
    tor: Any,
    timeout: float,
) -> TryRoute:
    """The route of one try to ``hint`` (see the module docstring)."""
    local: tuple[str, int] | None = None
    punchable: TCPHint | None = None
    if not via_relay and listen_port and not isinstance(hint, WebSocketHint):
        punchable = hint
        local = punch.dial_address(hint, listen_port, listen_interface)
    punched = local is not None and punchable is not None and punch.is_punched(punchable)
    if isinstance(hint, WebSocketHint):
        host, port, path = websocket_address(hint)
        endpoint: IStreamClientEndpoint = WebSocketClientEndpoint(
            reactor, host, port, path, secure=hint.secure, timeout=timeout
        )
        return TryRoute(endpoint, local, punchable, punched)
    if tor is not None:
        return TryRoute(tor.stream_via(hint.hostname, hint.port), local, punchable, False)
    if local is not None and not punched:
        endpoint = TCP4ClientEndpoint(  # IP literals of either family; see selection.punch
            reactor,
            hint.hostname,
            hint.port,
            timeout=timeout,
            bindAddress=makeBinding(*local, reuseAddress=True, reusePort=True),
        )
        return TryRoute(endpoint, local, punchable, punched)
    if local is None:
        return TryRoute(tcp_client_endpoint(reactor, hint, timeout), local, punchable, punched)
    return TryRoute(None, local, punchable, punched)


def punched_connect(
    reactor: Any,
    expiry: ExpiryProbe,
    plan: PunchPlan,
    hint: TCPHint,
    local: tuple[str, int],
    timeout: float,
    factory: ClientFactory,
) -> Deferred[Any]:
    """A try of a punched hint from ``local``, its first SYN's TTL as ``plan`` says: one
    that would have a low TTL if such a connect survives here waits for the expiry probe
    to know; the others start the probe (for the tries after a refusal) and dial at
    once."""
    known = expiry.known(hint.hostname)
    if known is not None and plan.verdict is None:
        plan.probed(known)
    waiting: Deferred[Any]
    if plan.wants_verdict:
        waiting = expiry.verdict(hint.hostname, hint.port, local[0])
    else:
        expiry.start(hint.hostname, hint.port, local[0])
        waiting = succeed(None)

    def dial(verdict: Verdict | None) -> Deferred[Any]:
        if verdict is not None:
            plan.probed(verdict)
        ttl = plan.dial(reactor.seconds())
        endpoint = punched_endpoint(
            reactor, hint.hostname, hint.port, local, ttl=ttl, timeout=timeout
        )
        return endpoint.connect(factory)

    return waiting.addCallback(dial)


def tcp_client_endpoint(reactor: Any, hint: TCPHint, timeout: float) -> IStreamClientEndpoint:
    """A plain TCP endpoint for ``hint``: an IP literal of either family, or a hostname."""
    try:
        address = ipaddress.ip_address(hint.hostname)
    except ValueError:
        return HostnameEndpoint(reactor, hint.hostname.encode("idna"), hint.port, timeout=timeout)
    endpoint_class: Any = TCP6ClientEndpoint if address.version == 6 else TCP4ClientEndpoint
    endpoint: IStreamClientEndpoint = endpoint_class(
        reactor, hint.hostname, hint.port, timeout=timeout
    )
    return endpoint


def hint_type(hint: RelayEndpoint, via_relay: bool) -> str:
    """The telemetry hint type of an outbound attempt (never its address)."""
    if via_relay:
        return "relay-v1"
    return "tor-tcp-v1" if isinstance(hint, TorTCPV1Hint) else "direct-tcp-v1"


class OutboundFactory(ClientFactory):
    """One try's factory: its protocol is ``build(dial)``, the Connector's L2 protocol."""

    noisy = False  # one factory per try: no "Starting/Stopping factory" log lines

    def __init__(self, build: BuildProtocol, dial: Dial) -> None:
        self.build = build
        self.dial = dial

    def buildProtocol(self, addr: object) -> DilatedConnectionProtocol:
        p = self.build(self.dial)
        p.factory = self
        return p
