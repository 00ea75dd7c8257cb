"""A session with a pairing file (``--pairing PATH``, TOML ``pairing = "PATH"``).

Layer: session (the application on top of :mod:`txdilation.pairing`). :func:`check_pairing`
refuses, while the options are parsed and before anything is sent, a pairing file that cannot
be used and settings that contradict it (one line each); :func:`check_not_in_use`, last, one
that another process holds. :func:`startup` starts a :class:`StartingSession` with a
:class:`~txdilation.pairing.paired_wormhole.PairedWormhole` in place of the wormhole: the forwards
are served in every meeting, its events become status events, and each meeting feeds a fresh
:class:`~txdilation.session.observe.LinkObserver`. ``TXDILATION_PAIRING_FAULT`` (a test aid, read
here at the session's edge) names a ratchet point where the process kills itself
(``txdilation.pairing.keeper.FAULTS``). The refusals: docs/module-notes.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from typing import Protocol as TypingProtocol

from twisted.python.failure import Failure

from txdilation.pairing.pairing_errors import PairingFileError, PairingInUse
from txdilation.pairing.pairing_options import PairingOptions
from txdilation.pairing.spent import is_spent
from txdilation.pairing.store import PairingStore, check_directory
from txdilation.reporting.status_events import StatusWriter
from txdilation.session.config import SessionConfig
from txdilation.session.library import SEMANTICS, Dilated, library_settings
from txdilation.session.session_errors import CannotStart, ConfigError
from txdilation.settings import Settings

if TYPE_CHECKING:  # pragma: no cover (.observe imports wormhole)
    from txdilation.session.forwarding import Forwarder
    from txdilation.session.observe import LinkObserver

__all__ = [
    "FAULT_VARIABLE",
    "StartingSession",
    "check_not_in_use",
    "check_pairing",
    "kept_server",
    "startup",
]

FAULT_VARIABLE: Final = "TXDILATION_PAIRING_FAULT"

_EVENTS: Final = frozenset(
    {
        "code",
        "peer-connected",
        "paired",
        "waiting",
        "meeting",
        "peer-restarted",
        "reconnected",
        "ratchet",
        "warning",
    }
)


class StartingSession(TypingProtocol):
    """What :func:`startup` uses of the session it starts (``SessionCore`` is one)."""

    config: SessionConfig
    reactor: Any
    writer: StatusWriter
    forwarder: Forwarder
    settings: Settings | None
    observer: LinkObserver
    wormhole: Any
    dilated: Dilated | None

    def rtt(self) -> float | None:
        "The current link's round-trip time, if known."

    def fail(self, f: Failure, where: str) -> None:
        "Report a fatal error (``where``: what failed), unless the stop caused it."

    def startup_failed(self, f: Failure, where: str = "startup") -> None:
        "The start failed (the wormhole closing is not a cause: its close reports one)."


def check_pairing(config: SessionConfig, *, code_given: bool) -> None:
    """Check the pairing file of ``config`` against the settings.

    :param code_given: a code (or ``--allocate-code``) was given on the command line.
    :raises ConfigError: in one line, naming the file (see the module docstring).
    """
    assert config.pairing is not None
    path = config.pairing
    store = PairingStore(path)
    if store.exists():
        try:
            store.load()
        except PairingFileError as e:
            raise ConfigError(str(e)) from None
        if code_given:
            raise ConfigError(
                f"pairing file {path} exists: no code is needed or accepted (to pair again, "
                f"'txdilation pairing forget {path}' first)"
            )
        return
    if config.code is None and not config.allocate_code:
        raise ConfigError(
            f"pairing file {path} does not exist yet: the first meeting needs a wormhole code "
            "(--code or --allocate-code); the file is written once dilated"
        )
    directory = Path(path).resolve().parent
    if not directory.is_dir():
        raise ConfigError(f"pairing file {path}: directory {directory} does not exist")
    try:
        check_directory(Path(path))
        spent = config.code is not None and is_spent(path, config.code)
    except PairingFileError as e:
        raise ConfigError(str(e)) from None
    if spent and not config.pair_again:
        raise ConfigError(
            f"this side already paired from the code {config.code} at {path}: a code pairs once "
            "(get a new code, or give --pair-again to pair again with it on purpose)"
        )


def kept_server(config: SessionConfig) -> tuple[str, str]:
    """The app id and mailbox server the session meets its peer at: those kept in the pairing
    file when it exists (every meeting after the first uses them), else those of ``config``."""
    if config.pairing is not None:
        try:
            record = PairingStore(config.pairing).load()
        except (PairingFileError, OSError):  # (gone or refused since the check: startup says)
            pass
        else:
            return record.appid, record.mailbox
    return config.appid, config.mailbox


def check_not_in_use(config: SessionConfig) -> None:
    """Refuse a pairing file another process holds (its lock), before anything starts: take
    the lock and give it back at once (the session takes it again when it starts). Call it
    once the options are otherwise checked: a usage error is said first.

    :raises CannotStart: in one line, with what to do (never to forget a healthy pairing).
    """
    if config.pairing is None or not PairingStore(config.pairing).exists():
        return
    store = PairingStore(config.pairing)
    try:
        store.lock()
    except PairingInUse as e:
        raise CannotStart(
            f"{e}: stop that process first, or give this one another pairing file; the "
            "pairing itself is fine (keep it)"
        ) from None
    except PairingFileError as e:
        raise ConfigError(str(e)) from None
    finally:
        store.unlock()


async def startup(core: StartingSession) -> None:
    """The session's start with a pairing (see the module docstring)."""
    from txdilation.pairing.paired_wormhole import PairedWormhole
    from txdilation.session.observe import LinkObserver

    config = core.config
    assert config.pairing is not None
    writer = core.writer
    if PairingStore(config.pairing).exists() and (config.code or config.allocate_code):
        writer.emit(
            "warning",
            message=f"pairing file {config.pairing} exists: the code in the settings is not used",
            advice="the peer is met without a code; remove the code from the settings at will",
        )
    options = PairingOptions(
        path=config.pairing,
        appid=config.appid,
        mailbox=config.mailbox,
        code=config.code,
        allocate_code=config.allocate_code,
        relay=config.relay,
        no_listen=config.no_listen,
        ping_interval=config.ping_interval,
        expected_subprotocols=config.connect_names,
        semantics=SEMANTICS,
        settings=core.settings or library_settings(config),
        pair_again=config.pair_again,
        fault=os.environ.get(FAULT_VARIABLE) or None,
    )

    def event(kind: str, fields: dict[str, Any]) -> None:
        if kind in _EVENTS:
            writer.emit(kind, **fields)

    def status() -> tuple[Any, Any]:
        observer = LinkObserver(writer, core.rtt)
        core.observer = observer
        return (observer.wormhole_status, observer.dilation_status)

    def failed(f: Failure) -> None:
        core.fail(f, "pairing")

    paired = PairedWormhole(core.reactor, options, on_event=event, status=status, on_failed=failed)
    core.wormhole = core.dilated = paired
    attached = core.forwarder.attach(paired)
    attached.addErrback(core.startup_failed, "wormhole")
    try:
        await core.forwarder.start_listening()
    except Exception as e:
        core.startup_failed(Failure(e), "listen")  # type: ignore[no-untyped-call]
        return
    paired.start()
    try:
        await paired.when_dilated()
    except Exception:
        return  # a fatal error (``failed`` reported it) or a stop
    link = core.observer.state
    selected = {"generation": link.generation, "path": link.path, "hint": link.hint}
    writer.emit("dilated", **(selected if link.hint is not None else {}))
