"""Command-line options of a session, shared by ``twistd dilation`` and ``txdilation run``.

Layer: session configuration (``twisted.python.usage``, no I/O except reading ``--config``).
:class:`SessionOptions` parses the options, reads the ``--config`` TOML file if given, lays the
command line over it (:func:`txdilation.session.config.merge`) and leaves the validated
:class:`~txdilation.session.config.SessionConfig` in ``options.config``. Every problem is a
``usage.UsageError`` naming the option: ``txdilation run`` and ``twistd dilation`` print it as
one line and exit 2 (:class:`StartRefused`, a start this host refuses now: exit 1). The help
is in argparse's format (:mod:`.helptext`). ``--version`` prints the versions of
txdilation, magic-wormhole, Twisted and Python (:func:`version_text`) and exits 0.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import replace
from importlib import metadata
from typing import Any, NoReturn

from twisted.python import usage

from txdilation.errors import UsageMistake
from txdilation.session.config import (
    DEFAULT_APPID,
    DEFAULT_MAILBOX,
    DILATION_SETTINGS,
    LOG_LEVELS,
    MAILBOX_VARIABLE,
    SessionConfig,
    build_config,
    load_toml,
    merge,
)
from txdilation.session.forwarding_specs import parse_forward
from txdilation.session.session_errors import CannotStart, ConfigError
from txdilation.values import BadValue, is_wildcard, parse_seconds

__all__ = ["SessionOptions", "StartRefused", "version_text"]


class StartRefused(usage.UsageError, UsageMistake):
    """The options are right but the session cannot start now (:class:`CannotStart`): the
    command prints the message as its one line and exits with :attr:`exit_status`, 1."""

    exit_status = 1


def version_text() -> str:
    """The versions that matter in a bug report, one per line (imports no ``wormhole``)."""
    import twisted
    import txdilation

    def installed(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"txdilation {txdilation.__version__}\n"
        f"magic-wormhole {installed('magic-wormhole')}\n"
        f"Twisted {twisted.__version__}\n"
        f"Python {platform.python_version()}"
    )


def _seconds(option: str, *, zero: bool = False) -> Any:
    """A coerce function for ``--OPTION SECONDS`` whose error names the option."""

    def coerce(value: str) -> float:
        try:
            return parse_seconds(value, zero=zero)
        except BadValue as e:  # a word: the option's; a number out of range: the setting's
            word = e.expected == "a number of seconds"
            raise ValueError(f"--{option}: {e}" if word else e.named(option)) from None

    coerce.coerceDoc = "(seconds)"  # type: ignore[attr-defined]
    return coerce


class SessionOptions(usage.Options):
    """``[options]``: one dilated session forwarding named services (see docs/plugin.md)."""

    synopsis = "[options]"
    command = "twistd [options] dilation"
    """The command as a person types it, for the help's ``usage:`` line."""
    longdesc = (
        "Hold one dilated magic-wormhole for as long as it runs and forward named services "
        "over it: --listen NAME=SERVER_ENDPOINT carries each local connection to the peer in a "
        "subchannel named NAME; --connect NAME=CLIENT_ENDPOINT connects each subchannel NAME "
        "the peer opens to that endpoint. SIGTERM or SIGINT stops it cleanly (a grace period "
        "for forwarded connections, --drain-timeout; a second one cuts them). Exit status: 0 "
        "after a stop (SIGTERM, SIGINT) or when the peer closed its wormhole, as a service's; "
        "1 after a fatal error; 2 for bad options."
    )
    optFlags = [
        ["allocate-code", None, "Allocate a wormhole code and report it (a 'code' event)."],
        ["no-listen", None, "Advertise no direct hints (use the peer's hints or the relay)."],
        [
            "pair-again",
            None,
            "With --pairing: pair from a code this side already paired from (on purpose).",
        ],
    ]
    optParameters = [
        [
            "mailbox",
            None,
            None,
            f"Mailbox server URL [default: {MAILBOX_VARIABLE}, else {DEFAULT_MAILBOX}].",
        ],
        ["appid", None, None, f"Application id; both peers must agree [default: {DEFAULT_APPID}]."],
        ["code", None, None, "The wormhole code to use."],
        [
            "pairing",
            None,
            None,
            "Pairing file: once dilated with a code, keep a pairing there and meet the peer "
            "again without a code after any restart (docs/pairing.md).",
        ],
        [
            "ping-interval",
            None,
            None,
            "Keepalive interval [default: 30]",
            _seconds("ping-interval"),
        ],
        ["status", None, None, "Write JSON-line status events to this file ('-': stdout)."],
        ["events", None, None, "Write telemetry events to this file (TXDILATION_EVENTS)."],
        ["config", None, None, "Read settings from this TOML file (options override it)."],
        [
            "drain-timeout",
            None,
            None,
            "Grace period: on stop, wait this long for forwarded connections to end, then cut "
            "them (reported on both sides) [default: 30]",
            _seconds("drain-timeout", zero=True),
        ],
        [
            "close-timeout",
            None,
            None,
            "On stop, wait for the close [default: 8]",
            _seconds("close-timeout"),
        ],
        [
            "log-level",
            None,
            None,
            f"Lowest level logged: {', '.join(LOG_LEVELS)} [default: info; TXDILATION_LOG_LEVEL].",
        ],
        *[[d.key, None, None, f"{d.help} ({d.variable})"] for d in DILATION_SETTINGS],
    ]

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.listen: dict[str, str] = {}
        self.connect: dict[str, str] = {}
        self.relays: list[str] = []
        self.config: SessionConfig | None = None

    def opt_listen(self, value: str) -> None:
        """NAME=SERVER_ENDPOINT: carry each local connection accepted there (e.g. web=tcp:8080:interface=127.0.0.1) over a new subchannel NAME. Repeatable."""  # noqa: E501
        _add_forward(self.listen, value, "--listen")

    def opt_connect(self, value: str) -> None:
        """NAME=CLIENT_ENDPOINT: connect each subchannel NAME the peer opens there (e.g. web=tcp:127.0.0.1:80); other names are refused. Repeatable."""  # noqa: E501
        _add_forward(self.connect, value, "--connect")

    def parseArgs(self, *args: str) -> None:
        """No positional arguments: say which word was not expected."""
        if args:
            raise usage.UsageError(
                f"unexpected argument {args[0]!r} (every setting is an option: --name VALUE)"
            )

    def opt_relay(self, value: str) -> None:
        """Transit relay: tcp:HOST:PORT or ws[s]://HOST:PORT/ (one relay's endpoints comma-separated). Repeatable: one per relay, raced."""  # noqa: E501
        self.relays.append(value)

    def opt_version(self) -> NoReturn:
        """Print the versions of txdilation, magic-wormhole, Twisted and Python, and exit."""
        print(version_text())
        sys.exit(0)

    opt_V = opt_version

    def opt_h(self) -> None:
        """Display this help and exit."""
        self.opt_help()  # type: ignore[no-untyped-call]

    def __str__(self) -> str:
        """The help, in argparse's format (:mod:`txdilation.session.helptext`)."""
        from txdilation.session.helptext import help_parser

        return help_parser(self, self.command).format_help().rstrip("\n")

    def postOptions(self) -> None:
        file_settings: dict[str, Any] = {}
        try:
            if self["config"]:
                file_settings = load_toml(self["config"])
            keys = [
                "mailbox",
                "appid",
                "code",
                "pairing",
                "ping-interval",
                "status",
                "events",
                "drain-timeout",
                "close-timeout",
                "log-level",
                *(d.key for d in DILATION_SETTINGS),
            ]
            overrides: dict[str, Any] = {key: self[key] for key in keys}
            for flag in ("allocate-code", "no-listen"):
                overrides[flag] = True if self[flag] else None
            overrides["relay"] = self.relays or None
            if overrides["mailbox"] is None and "mailbox" not in file_settings:
                overrides["mailbox"] = os.environ.get(MAILBOX_VARIABLE) or None
            overrides["listen"] = self.listen
            overrides["connect"] = self.connect
            self.config = build_config(merge(file_settings, overrides))
            if self["pair-again"]:
                self.config = replace(self.config, pair_again=True)
            if self.config.pairing is not None:
                from txdilation.session.paired_session import check_pairing

                check_pairing(self.config, code_given=bool(self["code"] or self["allocate-code"]))
        except ConfigError as e:
            raise usage.UsageError(str(e)) from None
        if self.config.log_level is None:
            from txdilation.logs import current_level

            try:
                current_level()  # TXDILATION_LOG_LEVEL, if set, must name a level
            except ValueError as e:
                raise usage.UsageError(f"TXDILATION_LOG_LEVEL: {e}") from None
        from txdilation.session.library import library_settings

        try:  # a TXDILATION_* variable the library refuses: a usage error now, not later
            library_settings(self.config)
        except ValueError as e:
            raise usage.UsageError(str(e)) from None
        _check_interface(self.config)
        for option, path in (("--status", self.config.status), ("--events", self.config.events)):
            _check_writable(option, path)
        if self.config.pairing is not None:  # last: a usage error is said first
            from txdilation.session.paired_session import check_not_in_use

            try:
                check_not_in_use(self.config)
            except CannotStart as e:
                raise StartRefused(str(e)) from None
            except ConfigError as e:
                raise usage.UsageError(str(e)) from None


def _add_forward(table: dict[str, str], value: str, option: str) -> None:
    try:
        spec = parse_forward(value)
    except ConfigError as e:
        raise usage.UsageError(f"{option}: {e}") from None
    if spec.name in table:
        raise usage.UsageError(
            f"{option} {spec.name} given twice ({table[spec.name]} and {spec.endpoint}): one "
            "endpoint per name"
        )
    table[spec.name] = spec.endpoint


def _check_interface(config: SessionConfig) -> None:
    """A ``--listen-interface`` must be an address of this host: bind a socket to it (port 0,
    closed at once), so that a mistyped one is refused now, not by every generation's
    listener."""
    interface = dict(config.dilation).get("listen_interface")
    if not isinstance(interface, str) or config.no_listen or is_wildcard(interface):
        return
    family = socket.AF_INET6 if ":" in interface else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((interface, 0))
        except OSError as e:
            raise usage.UsageError(
                f"--listen-interface {interface}: not an address of this host ({e.strerror or e})"
            ) from None


def _check_writable(option: str, path: str | None) -> None:
    """A file the session will append to: its directory must exist and be writable."""
    if path is None or path == "-":
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise usage.UsageError(f"{option} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise usage.UsageError(f"{option} {path}: not writable by this user")
