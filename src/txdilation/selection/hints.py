"""L3: connection hints, the JSON dicts exchanged in ``connection-hints`` messages.

Parsing never raises on peer input: :func:`parse_hints` returns the hints it understood and the
reasons it dropped the others (unknown types, wrong field types, hostnames no endpoint could
use), so a malformed hint costs only itself. Encoding produces exactly stock's dict layout
(``direct-tcp-v1``, ``tor-tcp-v1``, ``relay-v1`` with nested ``hints``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from twisted.internet.address import HostnameAddress, IPv4Address, IPv6Address

from txdilation.errors import ProtocolViolation


@dataclass(frozen=True, slots=True)
class DirectTCPV1Hint:
    """Connect straight to ``hostname:port``."""

    hostname: str
    port: int
    priority: float = 0.0


@dataclass(frozen=True, slots=True)
class TorTCPV1Hint:
    """Connect to ``hostname:port`` through Tor (usually an onion service)."""

    hostname: str
    port: int
    priority: float = 0.0


@dataclass(frozen=True, slots=True)
class WebSocketHint:
    """A transit relay's WebSocket endpoint, ``ws://`` or ``wss://`` (only inside a relay hint)."""

    url: str

    @property
    def secure(self) -> bool:
        return self.url.startswith("wss:")


TCPHint = DirectTCPV1Hint | TorTCPV1Hint
RelayEndpoint = DirectTCPV1Hint | TorTCPV1Hint | WebSocketHint


@dataclass(frozen=True, slots=True)
class RelayV1Hint:
    """Connect to a transit relay reachable at any of ``hints`` (``name``: magic-wormhole.rs's
    human-readable relay name, usually its domain; None for stock's layout)."""

    hints: tuple[RelayEndpoint, ...]
    name: str | None = None


Hint = DirectTCPV1Hint | TorTCPV1Hint | RelayV1Hint


class HintError(ValueError, ProtocolViolation):
    """A hint (from the peer or from the command line) could not be understood."""


def _usable_hostname(hostname: str) -> bool:
    """An IP address, or a name an endpoint can resolve (IDNA-encodable, at most 253 bytes)."""
    try:
        ipaddress.ip_address(hostname)
        return True
    except ValueError:
        pass
    try:
        encoded = hostname.encode("idna")
    except UnicodeError:
        return False
    return 0 < len(encoded) <= 253


def _parse_tcp(d: Any) -> TCPHint:
    if not isinstance(d, dict):
        raise HintError(f"hint is not an object: {d!r:.80}")
    kind = d.get("type")
    hostname = d.get("hostname")
    port = d.get("port")
    priority = d.get("priority", 0.0)
    if not isinstance(hostname, str) or not _usable_hostname(hostname):
        raise HintError(f"bad hostname in {kind} hint: {hostname!r:.80}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise HintError(f"bad port in {kind} hint: {port!r:.80}")
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise HintError(f"bad priority in {kind} hint: {priority!r:.80}")
    return _tcp_of_kind(kind, hostname, port, float(priority))


def _tcp_of_kind(kind: object, hostname: str, port: int, priority: float) -> TCPHint:
    if kind == "direct-tcp-v1":
        return DirectTCPV1Hint(hostname, port, priority)
    if kind == "tor-tcp-v1":
        return TorTCPV1Hint(hostname, port, priority)
    raise HintError(f"unknown hint type {kind!r:.80}")


def parse_hint(d: Any) -> Hint:
    """Parse one hint dict.

    :raises HintError: for an unknown type or fields of the wrong type.
    """
    if isinstance(d, dict) and d.get("type") == "relay-v1":
        inner = d.get("hints")
        if not isinstance(inner, list) or not inner:
            raise HintError("relay-v1 hint without a list of hints")
        parsed: list[RelayEndpoint] = []
        for h in inner:
            try:
                parsed.append(_parse_relay_endpoint(h))
            except HintError:
                continue
        if not parsed:
            raise HintError("relay-v1 hint with no usable hints")
        name = d.get("name")
        return RelayV1Hint(tuple(parsed), name if isinstance(name, str) and name else None)
    return _parse_tcp(d)


def _parse_relay_endpoint(d: Any) -> RelayEndpoint:
    if isinstance(d, dict) and d.get("type") == "websocket":
        return parse_websocket_url(d.get("url"))
    return _parse_tcp(d)


_WS_URL = re.compile(
    r"^wss?://(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:/\[\]?#@\s]+))(?::(?P<port>\d+))?"
    r"(?P<path>/[^\s#]*)?$"
)


def parse_websocket_url(url: Any) -> WebSocketHint:
    """A ``ws://HOST[:PORT][/PATH]`` or ``wss://...`` relay URL.

    :raises HintError: for anything else (no userinfo, fragment or whitespace; a usable host).
    """
    if not isinstance(url, str) or len(url) > 2048:
        raise HintError(f"bad websocket relay url: {url!r:.80}")
    m = _WS_URL.match(url)
    if not m:
        raise HintError(f"bad websocket relay url {url!r:.80}: expected ws[s]://HOST[:PORT]/")
    host = m.group("v6") or m.group("host")
    if not _usable_hostname(host):
        raise HintError(f"bad hostname in websocket relay url {url!r:.80}")
    if m.group("v6"):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise HintError(f"bad IPv6 address in websocket relay url {url!r:.80}") from None
    port = m.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise HintError(f"bad port in websocket relay url {url!r:.80}")
    return WebSocketHint(url)


def websocket_address(hint: WebSocketHint) -> tuple[str, int, str]:
    """``(host, port, path)`` of a parsed WebSocket relay URL (port defaults: 80, 443)."""
    m = _WS_URL.match(hint.url)
    assert m is not None, hint.url  # WebSocketHints are made by parse_websocket_url
    host = m.group("v6") or m.group("host")
    port = int(m.group("port")) if m.group("port") else (443 if hint.secure else 80)
    return host, port, m.group("path") or "/"


def parse_hints(items: Any) -> tuple[list[Hint], list[str]]:
    """Parse a ``connection-hints`` list: (hints understood, reasons for those dropped)."""
    if not isinstance(items, list):
        return [], [f"'hints' is not a list: {items!r:.80}"]
    hints: list[Hint] = []
    problems: list[str] = []
    for item in items:
        try:
            hints.append(parse_hint(item))
        except HintError as e:
            problems.append(str(e))
    return hints, problems


def encode_hint(hint: Hint | WebSocketHint) -> dict[str, Any]:
    """Return the JSON-able dict for ``hint``, in stock's layout."""
    match hint:
        case DirectTCPV1Hint(hostname, port, priority):
            return {
                "type": "direct-tcp-v1",
                "priority": priority,
                "hostname": hostname,
                "port": port,
            }
        case TorTCPV1Hint(hostname, port, priority):
            return {"type": "tor-tcp-v1", "priority": priority, "hostname": hostname, "port": port}
        case WebSocketHint(url):
            return {"type": "websocket", "url": url}
        case RelayV1Hint(inner, name):
            encoded: dict[str, Any] = {"type": "relay-v1"}
            if name is not None or any(isinstance(h, WebSocketHint) for h in inner):
                encoded["name"] = name  # magic-wormhole.rs's form (null when unnamed)
            encoded["hints"] = [encode_hint(h) for h in inner]
            return encoded
    raise TypeError(f"not a hint: {hint!r}")


_ARGV = re.compile(
    r"^tcp:(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d+)"
    r"(?P<opts>(?::[a-z]+=[^:]*)*)$"
)


def parse_hint_argv(text: str) -> DirectTCPV1Hint:
    """Parse a relay location like ``tcp:HOST:PORT[:priority=F]`` or ``tcp:[v6]:PORT``.

    :raises HintError: when ``text`` is not of that form.
    """
    m = _ARGV.match(text)
    if not m:
        raise HintError(f"unparseable hint {text!r}: expected tcp:HOST:PORT")
    host = m.group("v6") or m.group("host")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise HintError(f"bad port in hint {text!r}")
    priority = 0.0
    for opt in filter(None, m.group("opts").split(":")):
        key, _, value = opt.partition("=")
        if key != "priority":
            raise HintError(f"unknown option {key!r} in hint {text!r}")
        try:
            priority = float(value)
        except ValueError:
            raise HintError(f"bad priority in hint {text!r}") from None
    return DirectTCPV1Hint(host, port, priority)


def _hostport(hostname: str, port: int) -> str:
    return f"[{hostname}]:{port}" if ":" in hostname else f"{hostname}:{port}"


def describe_outbound(hint: RelayEndpoint, *, via_relay: bool, tor: bool = False) -> str:
    """Describe an outbound attempt as stock does: ``->tcp:H:P`` or ``->relay:tcp:H:P``
    (a WebSocket relay: ``->relay:ws://H:P/``)."""
    prefix = ("tor->" if tor else "->") + ("relay:" if via_relay else "")
    if isinstance(hint, WebSocketHint):
        return prefix + hint.url
    scheme = "tor:" if isinstance(hint, TorTCPV1Hint) else "tcp:"
    return f"{prefix}{scheme}{_hostport(hint.hostname, hint.port)}"


def describe_inbound(addr: object) -> str:
    """Describe an accepted connection as stock does: ``<-tcp:IP:PORT``."""
    if isinstance(addr, HostnameAddress):
        return f"<-tcp:{_hostport(addr.hostname.decode('ascii', 'replace'), addr.port)}"
    if isinstance(addr, IPv4Address | IPv6Address):
        return f"<-tcp:{_hostport(_unmapped(addr.host), addr.port)}"
    return f"<-{addr!r}"


def _unmapped(host: str) -> str:
    """An IPv4 client of a dual-stack listener, ``::ffff:192.0.2.1``, as ``192.0.2.1``."""
    if host.startswith("::ffff:"):
        try:
            mapped = ipaddress.IPv6Address(host).ipv4_mapped
        except ValueError:
            return host
        if mapped is not None:
            return str(mapped)
    return host


def hint_url(hint: RelayEndpoint) -> str:
    """``host:port`` as used by ``wormhole._status.DilationHint.url`` (a WebSocket relay: its
    URL)."""
    if isinstance(hint, WebSocketHint):
        return hint.url
    return f"{hint.hostname}:{hint.port}"
