"""``txdilation.dilate(w, ...)``: stock's ``w.dilate(...)`` plus txdilation's own options.

Layer: the application-facing edge (like the Dilator). Only for wormholes made by stock
``wormhole.create(..., dilation=True)`` while txdilation is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from txdilation.selection.relays import RelayLocation
from txdilation.semantics import Semantics, semantics_named
from txdilation.settings import Settings


def dilate(
    wormhole: Any,
    transit_relay_location: RelayLocation = None,
    *,
    no_listen: bool = False,
    on_status_update: Callable[[Any], object] | None = None,
    ping_interval: float | None = None,
    expected_subprotocols: Iterable[str] | None = None,
    semantics: Semantics | str | None = None,
    settings: Settings | None = None,
) -> Any:
    """``wormhole.dilate(...)`` with the application semantics chosen for this wormhole.

    :param transit_relay_location: None, a relay location string (``tcp:HOST:PORT``,
        ``ws[s]://HOST[:PORT]/``, several endpoints of one relay comma-separated) or a list of
        them, one per relay (see :mod:`txdilation.selection.relays`).
    :param semantics: ``"stock"``, ``"twisted"`` or a :class:`~txdilation.semantics.Semantics`
        (see that module); None: the default (``txdilation.install(semantics=)``, else
        ``TXDILATION_SEMANTICS``, else stock's); given, it replaces ``settings.semantics``.
    :param settings: the limits, network and telemetry settings (and semantics); None: read
        from the ``TXDILATION_*`` environment variables now (``Settings.from_environ``).
    :returns: the ``DilatedWormhole``, as ``w.dilate()`` returns it.
    :raises TypeError: when ``wormhole`` does not dilate through txdilation (not made by
        ``wormhole.create(..., dilation=True)`` with txdilation installed).
    """
    from txdilation._stock.manager import Dilator

    boss = getattr(wormhole, "_boss", None)
    dilator = getattr(boss, "_D", None)
    if not isinstance(dilator, Dilator):
        raise TypeError(
            "txdilation.dilate() needs a wormhole made by wormhole.create(..., dilation=True) "
            "after txdilation.install()"
        )
    chosen = semantics_named(semantics) if isinstance(semantics, str) else semantics
    return dilator.dilate(
        transit_relay_location,
        no_listen=no_listen,
        wormhole_status=getattr(boss, "_current_wormhole_status", None),
        status_update=on_status_update,
        ping_interval=ping_interval,
        expected_subprotocols=expected_subprotocols,
        semantics=chosen,
        settings=settings,
    )
