"""Forwarding specs: ``NAME=ENDPOINT`` strings, checked and turned into Twisted endpoints.

Layer: configuration glue. ``--listen web=tcp:8080:interface=127.0.0.1`` names a *server*
endpoint string (``twisted.internet.endpoints.serverFromString``); ``--connect
web=tcp:127.0.0.1:80`` a *client* one (``clientFromString``). Validation parses the string with
a ``MemoryReactor`` (nothing listens or connects); the real endpoint is built later with the
reactor the session runs on.

Invariant: a :class:`ForwardSpec` name is a non-empty printable string without ``=`` and at most
:data:`MAX_NAME_LENGTH` characters (it travels in every OPEN record).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from twisted.internet.endpoints import clientFromString, serverFromString
from twisted.internet.interfaces import IAddress, IStreamClientEndpoint, IStreamServerEndpoint
from twisted.internet.testing import MemoryReactor

from txdilation.session.session_errors import ConfigError

__all__ = [
    "MAX_NAME_LENGTH",
    "ForwardSpec",
    "client_endpoint",
    "describe_address",
    "parse_forward",
    "server_endpoint",
    "validate_client",
    "validate_server",
]

MAX_NAME_LENGTH: Final = 200


@dataclass(frozen=True, slots=True)
class ForwardSpec:
    """One forwarded service: a subprotocol name and a Twisted endpoint string."""

    name: str
    endpoint: str

    @classmethod
    def make(cls, name: str, endpoint: str) -> ForwardSpec:
        """Check ``name`` (see the module invariant) and that ``endpoint`` is not empty.

        :raises ConfigError: when either is wrong.
        """
        if not name or not name.isprintable() or "=" in name or len(name) > MAX_NAME_LENGTH:
            raise ConfigError(
                f"subprotocol name {name!r} must be 1 to {MAX_NAME_LENGTH} printable "
                "characters without '='"
            )
        if not endpoint.strip():
            raise ConfigError(f"{name}: the endpoint string is empty")
        return cls(name, endpoint.strip())


def parse_forward(text: str) -> ForwardSpec:
    """Split ``NAME=ENDPOINT`` (the endpoint may itself contain ``=``).

    :raises ConfigError: when there is no ``=`` or a part is empty or invalid.
    """
    name, sep, endpoint = text.partition("=")
    if not sep:
        raise ConfigError(f"{text!r}: expected NAME=ENDPOINT, e.g. web=tcp:8080")
    return ForwardSpec.make(name.strip(), endpoint)


def validate_server(spec: ForwardSpec) -> ForwardSpec:
    """Check that ``spec.endpoint`` is a server endpoint string; returns ``spec``.

    :raises ConfigError: when ``serverFromString`` rejects it.
    """
    return _check(serverFromString, "--listen", "server", spec)


def validate_client(spec: ForwardSpec) -> ForwardSpec:
    """Check that ``spec.endpoint`` is a client endpoint string; returns ``spec``.

    :raises ConfigError: when ``clientFromString`` rejects it.
    """
    return _check(clientFromString, "--connect", "client", spec)


def _check(parse: Any, option: str, kind: str, spec: ForwardSpec) -> ForwardSpec:
    try:
        endpoint = parse(MemoryReactor(), spec.endpoint)  # type: ignore[no-untyped-call]
    except IndexError:
        # systemd:...:index=N names a socket systemd did not pass
        message = (
            f"{option} {spec.name}: {spec.endpoint!r}: systemd passed no such socket (is the "
            "service started by its .socket unit, with that many ListenStream= lines?)"
        )
        raise ConfigError(message) from None
    except TypeError as e:  # Twisted's words name its own classes: say what is missing
        missing = _MISSING.search(str(e))
        wanted = f"its {missing.group(1)} is missing" if missing else str(e)
        message = (
            f"{option} {spec.name}: bad {kind} endpoint {spec.endpoint!r}: {wanted} (e.g. "
            f"{_EXAMPLES[kind]})"
        )
        raise ConfigError(message) from None
    except OSError as e:  # a certificate or key file named in the string
        shown = f": {e.filename}" if e.filename else ""
        message = (
            f"{option} {spec.name}: bad {kind} endpoint {spec.endpoint!r}: a file it names "
            f"cannot be read ({e.strerror or e}{shown})"
        )
        raise ConfigError(message) from None
    except (ValueError, KeyError) as e:
        number = _NOT_A_NUMBER.fullmatch(str(e))  # (Python's words for int("http"))
        why = f"{number.group(1)} is not a number (a port is one)" if number else str(e)
        message = f"{option} {spec.name}: bad {kind} endpoint {spec.endpoint!r}: {why}"
        raise ConfigError(message) from None
    wrong = _wrong_address(endpoint, lowest_port=0 if kind == "server" else 1)
    if wrong:
        raise ConfigError(f"{option} {spec.name}: bad {kind} endpoint {spec.endpoint!r}: {wrong}")
    return spec


def _wrong_address(endpoint: object, lowest_port: int) -> str:
    """What is wrong with a parsed endpoint's port or socket path ("" when nothing): Twisted's
    parsers take any integer and an empty path, and only the bind or connect fails."""
    port = getattr(endpoint, "_port", None)  # (TCP, TLS, host name endpoints keep it there)
    if isinstance(port, int) and not lowest_port <= port <= 65535:
        return f"port {port} is not a port number ({lowest_port} to 65535)"
    path = getattr(endpoint, "_address", getattr(endpoint, "_path", None))  # (UNIX endpoints)
    if isinstance(path, str | bytes) and not path:
        return "the socket path is empty (e.g. unix:/run/app.sock)"
    return ""


_MISSING: Final = re.compile(
    r"missing \d+ required (?:positional |keyword-only )?arguments?: '(\w+)'"
)
_NOT_A_NUMBER: Final = re.compile(r"invalid literal for int\(\) with base \d+: (.*)")
_EXAMPLES: Final = {"server": "tcp:8080:interface=127.0.0.1", "client": "tcp:127.0.0.1:80"}


def server_endpoint(reactor: Any, spec: ForwardSpec) -> IStreamServerEndpoint:
    """The real server endpoint for ``spec`` on ``reactor``."""
    endpoint: IStreamServerEndpoint = serverFromString(reactor, spec.endpoint)  # type: ignore[no-untyped-call]
    return endpoint


def client_endpoint(reactor: Any, spec: ForwardSpec) -> IStreamClientEndpoint:
    """The real client endpoint for ``spec`` on ``reactor``."""
    endpoint: IStreamClientEndpoint = clientFromString(reactor, spec.endpoint)  # type: ignore[no-untyped-call]
    return endpoint


def describe_address(address: IAddress | object) -> str:
    """A short, endpoint-like text for a listening or peer address (``tcp:127.0.0.1:8080``)."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is not None and port is not None:
        kind = str(getattr(address, "type", "TCP")).lower().rstrip("46") or "tcp"
        return f"{kind}:[{host}]:{port}" if ":" in str(host) else f"{kind}:{host}:{port}"
    name = getattr(address, "name", None)
    if name is not None:
        return f"unix:{name.decode() if isinstance(name, bytes) else name}"
    return repr(address)
