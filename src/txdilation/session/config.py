"""Session settings: the one frozen :class:`SessionConfig`, built from a TOML file and options.

Layer: configuration (pure: no I/O except reading the TOML file in :func:`load_toml`).

The same settings come from the command line (``twistd dilation``, ``txdilation run``) and from
a TOML file (``--config FILE``). Keys are the long option names: ``mailbox``, ``appid``,
``code``, ``allocate-code``, ``relay``, ``no-listen``, ``ping-interval``, ``status``, ``events``,
``drain-timeout``, ``close-timeout``, and the tables ``[listen]`` / ``[connect]`` mapping a
subprotocol name to a Twisted endpoint string. :func:`merge` lays command-line values over the
file's: scalars given on the command line win; ``listen``/``connect`` entries are merged by name
(the command line's endpoint wins for a name present in both); a ``--code`` or
``--allocate-code`` on the command line replaces both code settings of the file.

Invariants of a :class:`SessionConfig` (checked by :func:`build_config`): exactly one of
``code``/``allocate_code``; subprotocol names non-empty, printable, without ``=``, unique per
table; every endpoint string parses; the relay is ``tcp:HOST:PORT``; the ping interval and the
close timeout are positive, the drain timeout is not negative.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..hints import HintError, parse_hint_argv
from .endpoints import ForwardSpec, validate_client, validate_server
from .errors import ConfigError

__all__ = [
    "DEFAULT_APPID",
    "DEFAULT_MAILBOX",
    "ConfigError",
    "SessionConfig",
    "build_config",
    "check_raw",
    "load_toml",
    "merge",
]

DEFAULT_MAILBOX: Final = "ws://relay.magic-wormhole.io:4000/v1"
"""The public magic-wormhole mailbox server (stock's default)."""

DEFAULT_APPID: Final = "txdilation.example/session"
"""The application id used when none is given (both peers must use the same one)."""

DEFAULT_DRAIN_TIMEOUT: Final = 5.0
DEFAULT_CLOSE_TIMEOUT: Final = 3.0

_SCALARS: Final[dict[str, tuple[type, ...]]] = {
    "mailbox": (str,),
    "appid": (str,),
    "code": (str,),
    "allocate-code": (bool,),
    "relay": (str,),
    "no-listen": (bool,),
    "ping-interval": (int, float),
    "status": (str,),
    "events": (str,),
    "drain-timeout": (int, float),
    "close-timeout": (int, float),
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
    """

    appid: str = DEFAULT_APPID
    mailbox: str = DEFAULT_MAILBOX
    code: str | None = None
    allocate_code: bool = False
    relay: str | None = None
    no_listen: bool = False
    ping_interval: float | None = None
    listen: tuple[ForwardSpec, ...] = ()
    connect: tuple[ForwardSpec, ...] = ()
    status: str | None = None
    events: str | None = None
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT

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
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}")
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


def build_config(raw: Mapping[str, Any]) -> SessionConfig:
    """Validate merged raw settings and build the :class:`SessionConfig`.

    :raises ConfigError: when an invariant of the module docstring does not hold.
    """
    raw = check_raw(raw, where="settings")
    code = raw.get("code") or None
    allocate = bool(raw.get("allocate-code", False))
    if code is not None and allocate:
        raise ConfigError("give either a code or allocate-code, not both")
    if code is None and not allocate:
        raise ConfigError("give a wormhole code (--code) or ask for one (--allocate-code)")
    listen = tuple(
        validate_server(ForwardSpec.make(n, e)) for n, e in raw.get("listen", {}).items()
    )
    connect = tuple(
        validate_client(ForwardSpec.make(n, e)) for n, e in raw.get("connect", {}).items()
    )
    ping_interval = raw.get("ping-interval")
    if ping_interval is not None:
        ping_interval = _seconds("ping-interval", ping_interval)
    relay = raw.get("relay") or None
    if relay is not None:
        try:
            parse_hint_argv(relay)
        except HintError as e:
            raise ConfigError(f"relay: {e}") from None
    for key in ("mailbox", "appid"):
        if key in raw and not raw[key]:
            raise ConfigError(f"{key} must not be empty")
    return SessionConfig(
        appid=raw.get("appid", DEFAULT_APPID),
        mailbox=raw.get("mailbox", DEFAULT_MAILBOX),
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
    )


def _seconds(key: str, value: float, *, zero_ok: bool = False) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise ConfigError(f"{key} must be {kind} number of seconds, not {value!r}")
    return float(value)
