"""The settings of a ``dilation:`` endpoint string, checked and converted.

Layer: application edge (pure: strings in, a frozen :class:`EndpointSettings` out). Keys are
those of docs/endpoints.md; every problem is a ``ValueError`` naming the key, raised when the
string is parsed (``serverFromString``/``clientFromString``), before anything starts.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from txdilation.selection.hints import HintError
from txdilation.selection.relays import parse_relay_location
from txdilation.session.config import DEFAULT_MAILBOX, check_mailbox_url
from txdilation.session.session_errors import ConfigError
from txdilation.values import check_code, parse_seconds, parse_switch

__all__ = ["DEFAULT_APPID", "DEFAULT_CLIENT_TIMEOUT", "EndpointSettings", "parse_settings"]

DEFAULT_APPID: Final = "txdilation.example/endpoints"
"""The application id when none is given (both peers must use the same one)."""

DEFAULT_CLIENT_TIMEOUT: Final = 120.0
"""Seconds a client ``connect()`` waits for the dilated wormhole by default."""

_COMMON: Final = frozenset(
    {"subprotocol", "mailbox", "appid", "code", "code-file", "relay", "no-listen"}
    | {"ping-interval", "status", "exit-on-failure", "pairing"}
)


@dataclass(frozen=True, slots=True)
class EndpointSettings:
    """The settings of one ``dilation:`` endpoint (see :func:`parse_settings`)."""

    subprotocol: str
    mailbox: str = DEFAULT_MAILBOX
    appid: str = DEFAULT_APPID
    code: str | None = None
    code_file: str | None = None
    relay: str | None = None
    no_listen: bool = False
    ping_interval: float | None = None
    status: str | None = None
    timeout: float | None = DEFAULT_CLIENT_TIMEOUT
    exit_on_failure: bool | None = None
    """End the process (exit status 1) when the wormhole fails; None: only in a twistd server."""
    pairing: str | None = None

    @property
    def wormhole_key(self) -> tuple[str, str, str | None, str | None]:
        """What names the wormhole: endpoints with equal keys share one (with ``pairing``:
        endpoints naming the same pairing file)."""
        if self.pairing is not None:
            return (self.mailbox, self.appid, None, f"pairing:{_absolute(self.pairing)}")
        code_file = None if self.code is not None else _absolute(self.code_file)
        return (self.mailbox, self.appid, self.code, code_file)

    @property
    def dilation(self) -> tuple[object, ...]:
        """The settings the endpoints sharing a wormhole must agree on."""
        return (
            self.relay,
            self.no_listen,
            self.ping_interval,
            _absolute(self.status),
            self.exit_on_failure,
        )


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def parse_settings(
    args: tuple[str, ...],
    kwargs: Mapping[str, str],
    *,
    client: bool,
    default_mailbox: str = DEFAULT_MAILBOX,
) -> EndpointSettings:
    """Check and convert an endpoint string's arguments (``key=value`` only).

    :param client: also accept ``timeout`` (seconds, ``0``/``none`` for no timeout).
    :param default_mailbox: the mailbox server when the string names none.
    :raises ValueError: naming the argument, for an unknown or missing key, a positional
        argument, or a bad value.
    """
    kind = "client" if client else "server"
    if args:
        raise ValueError(
            f"dilation: {kind} endpoint arguments are key=value (e.g. subprotocol=http), not "
            f"{args[0]!r} (a colon inside a value is escaped with a backslash, as in "
            "mailbox=ws\\://HOST\\:PORT/v1)"
        )
    known = _COMMON | ({"timeout"} if client else set())
    unknown = sorted(set(kwargs) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"dilation: unknown {kind} endpoint argument(s) {', '.join(unknown)}{hint}; known: "
            f"{', '.join(sorted(known))}"
        )
    subprotocol = kwargs.get("subprotocol", "")
    if not subprotocol or not subprotocol.isprintable():
        raise ValueError("dilation: subprotocol=NAME is required (the subchannel name)")
    mailbox = kwargs.get("mailbox", default_mailbox)
    try:
        check_mailbox_url(mailbox)
    except ConfigError as e:
        raise ValueError(
            f"dilation: {e} (escape its colons: mailbox=ws\\://HOST\\:PORT/v1)"
        ) from None
    relay = kwargs.get("relay") or None
    if relay is not None:
        try:
            parse_relay_location(relay)
        except HintError as e:
            raise ValueError(
                f"dilation: relay: {e} (escape its colons: relay=tcp\\:HOST\\:PORT)"
            ) from None
    timeout: float | None = DEFAULT_CLIENT_TIMEOUT
    if "timeout" in kwargs:
        raw = kwargs["timeout"].strip().lower()
        timeout = None if raw in ("0", "none", "") else _seconds("timeout", raw)
    code = kwargs.get("code") or None
    if code is not None:
        try:
            check_code(code)
        except ValueError as e:
            raise ValueError(f"dilation: code={code}: {e}") from None
    ping = kwargs.get("ping-interval")
    pairing = kwargs.get("pairing") or None
    if pairing is not None:
        _check_pairing(pairing)
    return EndpointSettings(
        subprotocol=subprotocol,
        mailbox=mailbox,
        appid=kwargs.get("appid") or DEFAULT_APPID,
        code=code,
        code_file=kwargs.get("code-file") or None,
        relay=relay,
        no_listen=_flag("no-listen", kwargs.get("no-listen", "no")),
        ping_interval=_seconds("ping-interval", ping) if ping is not None else None,
        status=kwargs.get("status") or None,
        timeout=timeout,
        exit_on_failure=(
            _flag("exit-on-failure", kwargs["exit-on-failure"])
            if "exit-on-failure" in kwargs
            else None
        ),
        pairing=pairing,
    )


def _check_pairing(path: str) -> None:
    """A pairing file that exists must be usable (nothing is sent otherwise); one that does
    not is written once the first wormhole (with a code) is dilated.

    :raises ValueError: in one line, naming the file.
    """
    from txdilation.pairing.pairing_errors import PairingFileError
    from txdilation.pairing.store import PairingStore

    store = PairingStore(path)
    if store.exists():
        try:
            store.load()
        except PairingFileError as e:
            raise ValueError(f"dilation: {e}") from None
    elif not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ValueError(f"dilation: pairing file {path}: its directory does not exist")


def _flag(key: str, value: str) -> bool:
    try:
        return parse_switch(value)
    except ValueError:
        raise ValueError(f"dilation: {key} must be yes or no, not {value!r}") from None


def _seconds(key: str, value: str) -> float:
    try:
        return parse_seconds(value)
    except ValueError:
        problem = f"dilation: {key} must be a positive number of seconds, not {value!r}"
        raise ValueError(problem) from None
