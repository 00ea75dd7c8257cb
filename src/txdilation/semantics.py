"""What an application sees where stock's behaviour is a defect whose fix could break it.

txdilation behaves exactly as stock towards application code, except where stock's behaviour
is a defect; a fix that cannot break an application written for stock is always on
(docs/stock-defects.md). The fixes that could (fowl tests ``isinstance(reason, ConnectionDone)``
in ``connectionLost``, for example) are grouped in :class:`Semantics`: all off in :data:`STOCK`,
the drop-in's default; all on in :data:`TWISTED` (subchannels like Twisted's own TCP
transports). Choose with ``txdilation.install(semantics=...)``,
``TXDILATION_SEMANTICS=stock|twisted``, or per wormhole with
``txdilation.dilate(w, semantics=...)``.

Layer: application-facing policy, no I/O, imported by L5 (subchannels, multiplexer) and read
once at the edge (the Dilator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENV_VAR = "TXDILATION_SEMANTICS"


@dataclass(frozen=True, slots=True)
class Semantics:
    """One switch per application-visible fix of a stock defect (all False is stock)."""

    name: str
    """``"stock"``, ``"twisted"``, or a name of your own for a mixture."""

    reason_is_failure: bool
    """``connectionLost`` gets a ``Failure`` (``Failure(ConnectionDone())`` for a clean
    close), as from every Twisted transport; stock passes a bare ``ConnectionDone()``."""

    close_delivers_connection_lost: bool
    """``w.close()``, and the peer closing its wormhole, deliver ``connectionLost`` to every
    subchannel protocol still open; stock delivers nothing (the protocols never hear)."""

    close_fails_waiters: bool
    """``w.close()`` errbacks pending ``when_dilated()``/``connect()``/``listen()`` Deferreds
    with ``WormholeClosedError``; stock never fires them."""

    idempotent_close: bool
    """A repeated ``loseConnection()``/``loseWriteConnection()`` is a no-op, and so is
    ``loseConnection()`` on a half-closeable protocol whose write side is closed; stock
    raises ``AlreadyClosedError`` / ``NormalCloseUsedOnHalfCloseable``."""

    half_close_ends_with_connection_lost: bool
    """A half-closeable protocol gets ``connectionLost`` once both directions are closed;
    stock never calls it."""

    stop_producing_closes: bool
    """``transport.stopProducing()`` drops what is held for the protocol and closes our side
    (as a TCP transport does); stock only un-pauses the subchannel."""

    empty_write_sends_nothing: bool
    """``write(b"")`` sends nothing; stock sends an empty DATA record, which the peer
    delivers as ``dataReceived(b"")``."""

    producer_stopped_on_close: bool
    """The producer registered on a subchannel gets ``stopProducing()`` when the subchannel
    closes (if it has that method), and one registered on a closed subchannel at once, as from
    a TCP transport; stock only unregisters it (and ignores one registered after the close)."""

    factory_start_stop: bool
    """A listening factory gets ``doStart()`` on ``listen()`` and ``doStop()`` on
    ``stopListening()`` (as from a TCP port); stock calls neither."""

    stop_listening_stops: bool
    """``port.stopListening()`` unregisters the factory: later subchannels of that name are
    held as if nobody had listened (and ``listen()`` may be called again); stock's does
    nothing, so later subchannels still reach the factory."""


STOCK = Semantics(
    name="stock",
    reason_is_failure=False,
    close_delivers_connection_lost=False,
    close_fails_waiters=False,
    idempotent_close=False,
    half_close_ends_with_connection_lost=False,
    stop_producing_closes=False,
    empty_write_sends_nothing=False,
    producer_stopped_on_close=False,
    factory_start_stop=False,
    stop_listening_stops=False,
)
"""Exactly what stock shows an application (the drop-in's default)."""

TWISTED = Semantics(
    name="twisted",
    reason_is_failure=True,
    close_delivers_connection_lost=True,
    close_fails_waiters=True,
    idempotent_close=True,
    half_close_ends_with_connection_lost=True,
    stop_producing_closes=True,
    empty_write_sends_nothing=True,
    producer_stopped_on_close=True,
    factory_start_stop=True,
    stop_listening_stops=True,
)
"""Every fix on: subchannels behave like Twisted's TCP transports, closing tells everyone."""

PRESETS = {STOCK.name: STOCK, TWISTED.name: TWISTED}


def semantics_named(name: str) -> Semantics:
    """The preset called ``name``.

    :raises ValueError: for any other name.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown semantics {name!r}: choose one of {', '.join(sorted(PRESETS))}"
        ) from None


def semantics_from_environ(environ: Mapping[str, str], default: Semantics = STOCK) -> Semantics:
    """``TXDILATION_SEMANTICS`` from ``environ`` (unset or empty: ``default``).

    :raises ValueError: for a value that names no preset.
    """
    value = environ.get(ENV_VAR, "").strip()
    return semantics_named(value) if value else default


_chosen: list[Semantics] = []


def set_default(semantics: Semantics | None) -> None:
    """The semantics of wormholes dilated from now on (``txdilation.install(semantics=)``);
    None goes back to ``TXDILATION_SEMANTICS`` or stock's."""
    _chosen[:] = [] if semantics is None else [semantics]


def default_semantics(environ: Mapping[str, str]) -> Semantics:
    """What ``dilate()`` uses when not told: the one given to ``install(semantics=)``, else
    ``TXDILATION_SEMANTICS`` in ``environ``, else stock's.

    :raises ValueError: for a ``TXDILATION_SEMANTICS`` that names no preset.
    """
    return _chosen[0] if _chosen else semantics_from_environ(environ)


__all__ = [
    "ENV_VAR",
    "PRESETS",
    "STOCK",
    "TWISTED",
    "Semantics",
    "default_semantics",
    "semantics_from_environ",
    "semantics_named",
    "set_default",
]
