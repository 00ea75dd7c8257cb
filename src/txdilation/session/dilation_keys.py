"""Session settings: the library's Dilation settings a session can set, and their parsing.

Layer: configuration (pure). Each :class:`DilationSetting` is a key of the TOML file and a long
option, named as a ``txdilation.settings.Settings`` field and also a ``TXDILATION_*`` variable.

Invariants: :func:`dilation_settings` parses each given value with ``txdilation.values`` and has
the library's own ``Settings`` accept it, so a value the library would refuse is refused (a
:class:`~txdilation.session.session_errors.ConfigError` naming the key) before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from txdilation.session.session_errors import ConfigError
from txdilation.settings import Settings
from txdilation.values import (
    BadValue,
    listen_address,
    parse_port,
    parse_seconds,
    parse_size,
    parse_switch,
)

__all__ = ["DILATION_SETTINGS", "DILATION_TYPES", "DilationSetting", "dilation_settings"]


@dataclass(frozen=True, slots=True)
class DilationSetting:
    """One library setting a session can set: its key, variable, kind and meaning."""

    key: str
    kind: str  # "seconds", "seconds-or-0", "bytes", "port", "port-or-0", "address", "addresses",
    # "switch"
    help: str

    @property
    def variable(self) -> str:
        return f"TXDILATION_{self.key.upper().replace('-', '_')}"


DILATION_SETTINGS: Final = (
    DilationSetting(
        "listen-interface",
        "address",
        "Interface the direct-hint listener binds [default: all].",
    ),
    DilationSetting(
        "listen-port",
        "port-or-0",
        "TCP port the direct-hint listener binds [default: 0, a new one each generation].",
    ),
    DilationSetting(
        "hint-addresses",
        "addresses",
        "Comma-separated addresses advertised in direct hints [default: discovered].",
    ),
    DilationSetting(
        "hint-port",
        "port",
        "Port advertised in direct hints (a port forward) [default: the listener's].",
    ),
    DilationSetting(
        "punch",
        "switch",
        "TCP hole punching through NATs, on or off [default: on].",
    ),
    DilationSetting(
        "port-mapping",
        "switch",
        "Ask the home router for a port forward (PCP, NAT-PMP, UPnP), on or off [default: on].",
    ),
    DilationSetting(
        "handshake-timeout",
        "seconds",
        "Seconds a connection may take from TCP connect to selection [default: 30].",
    ),
    DilationSetting(
        "peer-timeout",
        "seconds-or-0",
        "Seconds without a sign of the peer before it is presumed gone; 0: never [default: 600].",
    ),
    DilationSetting(
        "max-unacked-bytes",
        "bytes",
        "Unacknowledged outbound bytes above which senders are paused [default: 64MiB].",
    ),
    DilationSetting(
        "max-buffered-inbound-bytes",
        "bytes",
        "Bytes paused subchannels may hold before reading stops [default: 4MiB].",
    ),
    DilationSetting(
        "max-pending-open-bytes",
        "bytes",
        "Bytes held for subchannels nobody listens on yet [default: 4MiB].",
    ),
    DilationSetting(
        "max-record-size",
        "bytes",
        "Largest record accepted from the peer [default: 64MiB].",
    ),
    DilationSetting(
        "traffic-interval",
        "seconds-or-0",
        "Seconds between periodic traffic telemetry records; 0: none [default: 60].",
    ),
)
"""The library settings a session can set, each also a ``TXDILATION_*`` variable (docs/api.md)."""

DILATION_TYPES: Final[dict[str, tuple[type, ...]]] = {  # str: as given on the command line
    "address": (str,),
    "addresses": (str, list),
    "switch": (bool, str),
    "port": (int, str),
    "port-or-0": (int, str),
    "seconds": (int, float, str),
    "seconds-or-0": (int, float, str),
    "bytes": (int, str),
}


def dilation_settings(raw: Mapping[str, Any]) -> tuple[tuple[str, object], ...]:
    """The Dilation settings given in ``raw`` as ``(field, typed value)``, checked by the
    library's own ``Settings`` (so a value it would refuse is refused before anything
    starts)."""
    given: list[tuple[str, object]] = []
    for setting in (s for s in DILATION_SETTINGS if s.key in raw):
        field = setting.key.replace("-", "_")  # the name of its Settings field
        try:
            value = _typed(setting.kind, raw[setting.key])
            Settings().replacing(**{field: value})
        except ValueError as e:
            raise ConfigError(f"{setting.key}: {e}") from None
        given.append((field, value))
    return tuple(given)


def _typed(kind: str, value: Any) -> object:
    """``value`` (from TOML or an option) as the library setting's typed value."""
    if kind == "address":
        return listen_address(str(value))
    if kind == "switch":
        return parse_switch(value)
    if kind == "addresses":
        items = value if isinstance(value, list) else str(value).split(",")
        if not all(isinstance(a, str) for a in items):
            raise ValueError("expected addresses (strings)")
        addresses = tuple(a.strip() for a in items if a.strip())
        if not addresses or any("," in a for a in addresses):
            raise ValueError("expected one or more addresses, comma-separated (or a list)")
        return addresses
    if kind in ("port", "port-or-0"):
        return parse_port(value, zero=kind == "port-or-0")
    if kind in ("seconds", "seconds-or-0"):
        return parse_seconds(value, zero=kind == "seconds-or-0") or None  # 0: never, none
    size = parse_size(value)
    if size <= 0:
        raise BadValue("a positive number of bytes", value)
    return size
