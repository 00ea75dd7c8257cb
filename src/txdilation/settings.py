"""Operator settings: typed, validated, read once at the edge and passed down.

:class:`Settings` gathers :class:`NetworkSettings`, :class:`Limits`, :class:`ReconnectPolicy`,
:class:`TelemetrySettings` and the :class:`~txdilation.semantics.Semantics`;
:meth:`Settings.from_environ` reads every ``TXDILATION_*`` variable from the mapping it is given
(:meth:`Settings.from_process`: this process's), each value parsed by ``txdilation.values``.
The variables and their defaults: docs/reference/settings.md.

Invariants: only the edges read the environment (the stock-facing Dilator in
``txdilation._stock`` when an application calls ``w.dilate()``, ``txdilation.dilate`` when given
no settings, and the session's process entry point), once per dilated wormhole; the layers
below take the typed objects as parameters and never read the environment or open files named
there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

from txdilation.semantics import STOCK, Semantics, default_semantics
from txdilation.values import BadValue, parse_port, parse_seconds, parse_size, parse_switch
from txdilation.wire.limits import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
    DEFAULT_MAX_PENDING_OPEN_BYTES,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_MAX_UNACKED_BYTES,
    DEFAULT_MAX_UNAUTHENTICATED,
)

_BYTE_LIMITS = (
    "max_unacked_bytes",
    "max_buffered_inbound_bytes",
    "max_pending_open_bytes",
    "max_record_size",
)


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    """Where to listen and what to advertise; ``None`` means the default behaviour."""

    listen_interface: str | None = None
    hint_addresses: tuple[str, ...] | None = None
    listen_port: int = 0
    hint_port: int | None = None
    punch: bool = True
    port_mapping: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"listen_port must be 0 to 65535, not {self.listen_port!r}")
        if self.hint_port is not None and not 0 < self.hint_port <= 65535:
            raise ValueError(f"hint_port must be 1 to 65535, not {self.hint_port!r}")

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> NetworkSettings:
        """Read the six network ``TXDILATION_*`` variables (empty values count as unset).

        :raises ValueError: when a port variable is not a port number, or
            ``TXDILATION_PUNCH`` or ``TXDILATION_PORT_MAPPING`` not a yes or no.
        """
        interface = env.get("TXDILATION_LISTEN_INTERFACE", "").strip() or None
        raw = env.get("TXDILATION_HINT_ADDRESSES", "")
        addresses = tuple(a.strip() for a in raw.split(",") if a.strip())
        listen_port = _read(env, "TXDILATION_LISTEN_PORT", partial(parse_port, zero=True), 0)
        hint_port = _read(env, "TXDILATION_HINT_PORT", parse_port)
        punch = _read(env, "TXDILATION_PUNCH", parse_switch, True)
        mapping = _read(env, "TXDILATION_PORT_MAPPING", parse_switch, True)
        return cls(interface, addresses or None, listen_port, hint_port, punch, mapping)


def _read(
    env: Mapping[str, str], variable: str, parse: Callable[[str], object], default: Any = None
) -> Any:
    """``variable`` parsed by one of ``txdilation.values``'s parsers (unset or empty: ``default``).

    :raises ValueError: naming the variable and what it must be.
    """
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except BadValue as e:
        raise ValueError(e.named(variable)) from None
    except ValueError as e:
        raise ValueError(f"{variable}: {e}") from None


DEFAULT_PEER_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """How long to keep trying to reach a silent peer (see the module docstring)."""

    peer_timeout: float | None = DEFAULT_PEER_TIMEOUT

    def __post_init__(self) -> None:
        t = self.peer_timeout
        if t is not None and not (math.isfinite(t) and t > 0):
            raise ValueError(f"peer_timeout must be positive (or None), not {t!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ReconnectPolicy:
        """Read ``TXDILATION_PEER_TIMEOUT`` (empty: the default; 0: never give up).

        :raises ValueError: when it is not a number of seconds, or negative.
        """
        seconds = _read(environ, "TXDILATION_PEER_TIMEOUT", _seconds_or_0)
        return cls() if seconds is None else cls(seconds or None)


@dataclass(frozen=True, slots=True)
class Limits:
    """Timeouts and memory bounds of one dilated wormhole (see the module docstring)."""

    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES
    max_buffered_inbound_bytes: int = DEFAULT_MAX_BUFFERED_INBOUND_BYTES
    max_pending_open_bytes: int = DEFAULT_MAX_PENDING_OPEN_BYTES
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    max_unauthenticated: int = DEFAULT_MAX_UNAUTHENTICATED

    def __post_init__(self) -> None:
        if not (math.isfinite(self.handshake_timeout) and self.handshake_timeout > 0):
            raise ValueError(f"handshake_timeout must be positive, not {self.handshake_timeout!r}")
        n = self.max_unauthenticated
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"max_unauthenticated must be a positive number, not {n!r}")
        for name in _BYTE_LIMITS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive number of bytes, not {value!r}")

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> Limits:
        """Read the ``TXDILATION_*`` limit variables (empty values count as unset).

        :raises ValueError: when a variable is set to something other than a positive number
            (a misconfiguration is reported, not silently replaced by the default).
        """
        values: dict[str, float | int | None] = {
            "handshake_timeout": _read(env, "TXDILATION_HANDSHAKE_TIMEOUT", parse_seconds),
            **{n: _read(env, f"TXDILATION_{n.upper()}", parse_size) for n in _BYTE_LIMITS},
            "max_unauthenticated": _read(env, "TXDILATION_MAX_UNAUTHENTICATED", _connections),
        }
        given = {name: value for name, value in values.items() if value is not None}
        return cls(**given)  # type: ignore[arg-type]


_seconds_or_0 = partial(parse_seconds, zero=True)


def _connections(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadValue("a number of connections", text) from None


DEFAULT_TRAFFIC_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Where telemetry records go and how often traffic is sampled (see the module docstring)."""

    traffic_interval: float | None = DEFAULT_TRAFFIC_INTERVAL
    """Seconds between periodic ``traffic`` records; None: no periodic records."""

    events_path: str | None = None
    """A file the records are appended to as JSON lines; None: no file."""

    log_records: bool = True
    """Each record is also a debug line on ``twisted.logger``. From the environment only when
    ``TXDILATION_LOG_LEVEL`` is ``debug``: a program whose log keeps every level (a plain
    ``twistd web --listen dilation:...``) is not filled with telemetry it did not ask for."""

    def __post_init__(self) -> None:
        t = self.traffic_interval
        if t is not None and not (math.isfinite(t) and t > 0):
            raise ValueError(f"traffic_interval must be positive (or None), not {t!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TelemetrySettings:
        """Read ``TXDILATION_TRAFFIC_INTERVAL`` (empty: the default; 0: no periodic records),
        ``TXDILATION_EVENTS`` (empty: no file) and ``TXDILATION_LOG_LEVEL`` (``debug``: the
        records are log lines too).

        :raises ValueError: when the interval is not a number of seconds, or negative.
        """
        seconds = _read(environ, "TXDILATION_TRAFFIC_INTERVAL", _seconds_or_0)
        interval = DEFAULT_TRAFFIC_INTERVAL if seconds is None else (seconds or None)
        debug = environ.get(LOG_LEVEL_VARIABLE, "").strip().lower() == "debug"
        return cls(interval, environ.get(EVENTS_VARIABLE, "") or None, debug)


EVENTS_VARIABLE = "TXDILATION_EVENTS"
LOG_LEVEL_VARIABLE = "TXDILATION_LOG_LEVEL"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything one dilated wormhole is configured with (each group documented above)."""

    network: NetworkSettings = field(default_factory=NetworkSettings)
    limits: Limits = field(default_factory=Limits)
    policy: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    semantics: Semantics = STOCK

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read every ``TXDILATION_*`` setting from ``environ`` (the edges pass ``os.environ``).

        :raises ValueError: naming the first variable that is set to something invalid.
        """
        return cls(
            NetworkSettings.from_environ(environ),
            Limits.from_environ(environ),
            ReconnectPolicy.from_environ(environ),
            TelemetrySettings.from_environ(environ),
            default_semantics(environ),
        )

    @classmethod
    def from_process(cls) -> Settings:
        """:meth:`from_environ` of this process's environment: the edges' one reader of it."""
        return cls.from_environ(os.environ)

    def replacing(self, **values: object) -> Settings:
        """These settings with fields of their groups replaced, by field name
        (``settings.replacing(peer_timeout=None, punch=False)``), each group checked again
        (ValueError); TypeError for a name no group has."""
        groups: dict[str, object] = {}
        for group in fields(self):
            value = getattr(self, group.name)
            names = {f.name for f in fields(value)} if group.name != "semantics" else set()
            mine = {name: values.pop(name) for name in names & set(values)}
            if mine:
                groups[group.name] = replace(value, **mine)
        if values:
            raise TypeError(f"no setting named {', '.join(sorted(values))}")
        return replace(self, **groups)  # type: ignore[arg-type]
