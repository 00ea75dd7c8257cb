"""Session settings: the one frozen :class:`SessionConfig`, built from a TOML file and options.

Layer: configuration (pure: no I/O except reading the TOML file in :func:`load_toml`). The
keys are the long option names; :func:`merge` lays the command line over the file; the Dilation
settings (:data:`DILATION_SETTINGS`) are typed values named as ``txdilation.settings``'s fields,
laid over the environment's at the session's edge. The keys and the merge rules:
docs/reference/settings.md.

Invariants (checked by :func:`build_config`): exactly one of ``code``/``allocate_code``, or at
most one with ``pairing``; subprotocol names non-empty, printable, without ``=``, unique per
table; endpoint strings and relay locations parse; timeouts and the ping interval in range; the
mailbox a ``ws://`` or ``wss://`` URL with a host; the log level known; the Dilation settings
parsed by ``txdilation.values`` and accepted by the library's ``Settings``.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from txdilation.selection.hints import HintError
from txdilation.selection.relays import parse_relay_location
from txdilation.session.dilation_keys import DILATION_SETTINGS, DILATION_TYPES, dilation_settings
from txdilation.session.forwarding_specs import ForwardSpec, validate_client, validate_server
from txdilation.session.session_errors import ConfigError
from txdilation.values import (
    BadValue,
    check_code,
    parse_seconds,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

__all__ = [
    "DEFAULT_APPID",
    "DEFAULT_MAILBOX",
    "DILATION_SETTINGS",
    "LOG_LEVELS",
    "MAILBOX_VARIABLE",
    "ConfigError",
    "SessionConfig",
    "build_config",
    "check_raw",
    "load_toml",
    "merge",
]

DEFAULT_MAILBOX: Final = "wss://relay.magic-wormhole.io/v1"
"""The public magic-wormhole mailbox server, over TLS (stock's next default)."""

MAILBOX_VARIABLE: Final = "TXDILATION_MAILBOX"
"""The environment variable naming the mailbox server used when none is given (sessions,
``dilation:`` endpoint strings), e.g. a server of your own in a closed network."""

DEFAULT_APPID: Final = "txdilation.example/session"
"""The application id used when none is given (both peers must use the same one)."""

DEFAULT_DRAIN_TIMEOUT: Final = 30.0
DEFAULT_CLOSE_TIMEOUT: Final = 8.0
"""Longer than the Dilation's own hold on a close (5 s to deliver what the peer has not
acknowledged, reconnecting if need be), so the session never gives up on a close first."""

LOG_LEVELS: Final = ("debug", "info", "warn", "error", "critical")
"""``log-level`` values (see ``txdilation.logs``)."""


_SCALARS: Final[dict[str, tuple[type, ...]]] = {
    "mailbox": (str,),
    "appid": (str,),
    "code": (str,),
    "allocate-code": (bool,),
    "pairing": (str,),
    "relay": (str, list),
    "no-listen": (bool,),
    "ping-interval": (int, float),
    "status": (str,),
    "events": (str,),
    "drain-timeout": (int, float),
    "close-timeout": (int, float),
    "log-level": (str,),
    **{d.key: DILATION_TYPES[d.kind] for d in DILATION_SETTINGS},
}
_TABLES: Final = ("listen", "connect")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Everything one session needs (see the module docstring for the invariants).

    :ivar listen: local server endpoints whose connections become subchannels named ``name``.
    :ivar connect: client endpoints for the subchannels named ``name`` that the peer opens.
    :ivar status: JSON-lines status file, ``"-"`` for stdout, ``None`` for none.
    :ivar events: telemetry JSON-lines file (sets ``TXDILATION_EVENTS``), ``None`` for none.
    :ivar drain_timeout: how long a stop waits for forwarded connections to end by themselves.
    :ivar close_timeout: how long a stop waits for the wormhole to close.
    :ivar pairing: the pairing file (docs/pairing.md), or None for an unpaired session.
    :ivar pair_again: ``--pair-again`` (command line only): pair from a code this side already
        paired from.
    """

    appid: str = DEFAULT_APPID
    mailbox: str = DEFAULT_MAILBOX
    code: str | None = None
    allocate_code: bool = False
    relay: tuple[str, ...] = ()
    no_listen: bool = False
    ping_interval: float | None = None
    listen: tuple[ForwardSpec, ...] = ()
    connect: tuple[ForwardSpec, ...] = ()
    status: str | None = None
    events: str | None = None
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT
    log_level: str | None = None
    dilation: tuple[tuple[str, object], ...] = ()
    """``(field, value)`` of the Dilation settings given: ``txdilation.settings``'s field names
    and typed values (``Settings.replacing``)."""
    pairing: str | None = None
    pair_again: bool = False

    @property
    def connect_names(self) -> tuple[str, ...]:
        """The subprotocol names the peer may open (all others are answered with CLOSE)."""
        return tuple(f.name for f in self.connect)


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML settings file into raw settings (keys as in the module docstring).

    :raises ConfigError: when the file cannot be read or parsed, has unknown keys, or a value
        of the wrong type.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
    return check_raw(data, where=path)


def check_raw(data: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Check the keys and value types of raw settings (from TOML or the command line).

    :returns: a new dict with ``listen``/``connect`` as ``{name: endpoint}`` dicts.
    :raises ConfigError: for an unknown key or a value of the wrong type.
    """
    unknown = sorted(set(data) - set(_SCALARS) - set(_TABLES))
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*_SCALARS, *_TABLES], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}{hint}")
    checked: dict[str, Any] = {}
    for key, value in data.items():
        if key in _TABLES:
            if not isinstance(value, Mapping) or not all(
                isinstance(v, str) for v in value.values()
            ):
                raise ConfigError(f"{where}: [{key}] must map names to endpoint strings")
            checked[key] = dict(value)
            continue
        types = _SCALARS[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            wanted = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}: {key} must be {wanted}, not {type(value).__name__}")
        checked[key] = value
    return checked


def merge(file_settings: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Lay ``overrides`` (the command line) over ``file_settings`` (see the module docstring).

    ``None`` values in ``overrides`` mean "not given" and are skipped.
    """
    merged = {k: v for k, v in file_settings.items() if k not in _TABLES}
    given = {k: v for k, v in overrides.items() if v is not None}
    if "code" in given or given.get("allocate-code"):
        merged.pop("code", None)
        merged.pop("allocate-code", None)
    for key in _TABLES:
        table = dict(file_settings.get(key, {}))
        table.update(given.pop(key, {}))
        merged[key] = table
    merged.update(given)
    return merged


def _relays(value: object) -> tuple[str, ...]:
    """The relay locations of a ``relay`` setting: one string or a list of them (none: ``()``)."""
    if value is None or value == "":
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ConfigError(f"relay: a string or a list of strings, not {value!r:.80}")
    relays = tuple(v.strip() for v in items if v.strip())
    try:
        parse_relay_location(relays)
    except HintError as e:
        raise ConfigError(f"relay: {e}") from None
    return relays


def build_config(raw: Mapping[str, Any]) -> SessionConfig:
    """Validate merged raw settings and build the :class:`SessionConfig`.

    :raises ConfigError: when an invariant of the module docstring does not hold.
    """
    raw = check_raw(raw, where="settings")
    code = raw.get("code") or None
    allocate = bool(raw.get("allocate-code", False))
    pairing = raw.get("pairing") or None
    if code is not None and allocate:
        raise ConfigError("give either a code or allocate-code, not both")
    if code is None and not allocate and pairing is None:
        raise ConfigError("give a wormhole code (--code) or ask for one (--allocate-code)")
    if code is not None:
        try:
            check_code(code)
        except ValueError as e:
            raise ConfigError(f"code: {e}") from None
    listen = tuple(
        validate_server(ForwardSpec.make(n, e)) for n, e in raw.get("listen", {}).items()
    )
    connect = tuple(
        validate_client(ForwardSpec.make(n, e)) for n, e in raw.get("connect", {}).items()
    )
    ping_interval = raw.get("ping-interval")
    if ping_interval is not None:
        ping_interval = _seconds("ping-interval", ping_interval)
    relay = _relays(raw.get("relay"))
    for key in ("mailbox", "appid"):
        if key in raw and not raw[key]:
            raise ConfigError(f"{key} must not be empty")
    mailbox = raw.get("mailbox", DEFAULT_MAILBOX)
    check_mailbox_url(mailbox)
    log_level = raw.get("log-level")
    if log_level is not None:
        log_level = log_level.strip().lower()
        log_level = "warn" if log_level == "warning" else log_level
        if log_level not in LOG_LEVELS:
            raise ConfigError(
                f"log-level must be one of {', '.join(LOG_LEVELS)}, not {raw['log-level']!r}"
            )
    return SessionConfig(
        appid=raw.get("appid", DEFAULT_APPID),
        mailbox=mailbox,
        code=code,
        allocate_code=allocate,
        relay=relay,
        no_listen=bool(raw.get("no-listen", False)),
        ping_interval=ping_interval,
        listen=listen,
        connect=connect,
        status=raw.get("status") or None,
        events=raw.get("events") or None,
        drain_timeout=_seconds(
            "drain-timeout", raw.get("drain-timeout", DEFAULT_DRAIN_TIMEOUT), zero_ok=True
        ),
        close_timeout=_seconds("close-timeout", raw.get("close-timeout", DEFAULT_CLOSE_TIMEOUT)),
        log_level=log_level,
        dilation=dilation_settings(raw),
        pairing=pairing,
    )


def check_mailbox_url(url: str) -> None:
    """Check that ``url`` is a mailbox server URL: ``ws://HOST[:PORT]/...`` or ``wss://...``.

    :raises ConfigError: naming what is wrong, with an example.
    """
    example = "e.g. ws://relay.magic-wormhole.io:4000/v1"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"mailbox {url!r} is not a URL ({e}); {example}") from None
    if parts.scheme not in ("ws", "wss"):
        scheme = f"'{parts.scheme}://'" if parts.scheme else "no scheme"
        raise ConfigError(
            f"mailbox {url!r} has {scheme}: a mailbox server URL starts with ws:// or wss://; "
            f"{example}"
        )
    if not parts.hostname:
        raise ConfigError(f"mailbox {url!r} has no host; {example}")
    if port == 0:
        raise ConfigError(f"mailbox {url!r}: port 0 is not a port; {example}")


def _seconds(key: str, value: float, *, zero_ok: bool = False) -> float:
    try:
        return parse_seconds(value, zero=zero_ok)
    except BadValue as e:
        raise ConfigError(e.named(key)) from None
