"""L3: what a :class:`~txdilation.selection.connector.Connector` is given and reports to.

:class:`ConnectorSettings` is everything a connector needs besides its collaborators (the
same for every generation but ``public_addresses``); :class:`IConnectorOwner` is what it
reports to (the Manager). Both are re-exported by :mod:`txdilation.selection.connector`, where
callers import them; they live here so that the connector's parts
(:mod:`~txdilation.selection.advertise`, :mod:`~txdilation.selection.dialing`) read the settings
without importing the connector.

Invariants: settings are immutable; the defaults are stock's timing (``RELAY_DELAY``: relay
dials wait that long for direct ones; ``DIRECT_GRACE``: how long the Leader holds a relay
candidate for a direct one).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

from wormhole._status import DilationHint

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.selection.hints import RelayV1Hint
from txdilation.selection.relays import RelayUsed
from txdilation.settings import NetworkSettings
from txdilation.wire.contracts import IRecordSink
from txdilation.wire.limits import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_MAX_UNAUTHENTICATED,
)
from txdilation.wire.roles import Role

__all__ = ["DIRECT_GRACE", "RELAY_DELAY", "ConnectorSettings", "IConnectorOwner", "Purpose"]

RELAY_DELAY = 2.0
DIRECT_GRACE = 0.25


class Purpose(enum.Enum):
    """What a connector is for (the same race machinery, three uses)."""

    RACE = "race"
    """A generation's race for its link (listen, publish, dial everything)."""
    STANDBY = "standby"
    """A second path kept warm beside a direct link (``standby-v1``): relay hints only, no
    listener; the connection it selects goes to ``connector_standby_ready``."""
    UPGRADE = "upgrade"
    """A direct path for a link that moved to its relayed standby: listen, publish, and dial
    the peer's direct hints in the background from the start (as ``upgrading``)."""


class IConnectorOwner(TypingProtocol):
    """What a connector reports to (``mailbox.selection_reports.ConnectorReports``)."""

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        """Publish these hint dicts to the peer in one ``connection-hints`` message."""

    def hint_status(self, hints: list[DilationHint]) -> None:
        """These hints are being tried (for DilationStatus.hints)."""

    def link_for(self, connection: DilatedConnectionProtocol) -> IRecordSink:
        """The record sink (the selected link) for the connection being selected."""

    def connector_connection_made(
        self, link: Any, candidates: int, relay: RelayUsed | None = None
    ) -> None:
        """The generation's connection was selected; ``link`` is what ``link_for`` gave for
        it, ``candidates`` how many connections reached the selectable point, ``relay`` the
        relay endpoint that carries it (None: direct)."""

    def connector_path_upgraded(self, link: Any) -> None:
        """(``path_upgrade``) a direct connection replaces the relayed one selected before:
        ``link`` is what ``link_for`` gave for it."""

    def direct_path_proven(self) -> None:
        """(Leader, a stock peer) a direct path works while the selected link is relayed."""

    def attempting_again(self) -> None:
        """(Follower, ``rekindle``) our hints went to the stock Leader again: a new attempt."""

    def standby_link_for(self, connection: DilatedConnectionProtocol) -> IRecordSink:
        """(``Purpose.STANDBY``) the record sink of the standby connection being selected."""

    def connector_standby_ready(self, link: Any) -> None:
        """(``Purpose.STANDBY``) the standby connection was selected: ``link`` is what
        ``standby_link_for`` gave for it."""


@dataclass(frozen=True, slots=True)
class ConnectorSettings:
    """Everything a connector needs besides its collaborators (``public_addresses``: what the
    mailbox server last told us it sees, ``your-address``; the rest is the same for every
    generation)."""

    role: Role
    dilation_key: bytes
    side: str
    relay_hints: tuple[RelayV1Hint, ...] = ()
    no_listen: bool = False
    tor: Any = None
    network: NetworkSettings = field(default_factory=NetworkSettings)
    relay_delay: float = RELAY_DELAY
    direct_grace: float = DIRECT_GRACE
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_unauthenticated: int = DEFAULT_MAX_UNAUTHENTICATED
    public_addresses: tuple[str, ...] = ()
    #: the peer speaks ``path-upgrade-v1``: a relayed selection is only a start; direct
    #: hints keep being tried and the link moves to the first direct connection that works
    path_upgrade: bool = False
    #: (Leader) hold relay candidates for ``direct_grace`` seconds while a direct one may
    #: still come: the generation after a direct path proved to work with a stock peer
    prefer_direct: bool = False
    #: (Follower, a stock Leader, which never retries within a generation) publish our hints
    #: and dial again while nothing is in its handshake (:mod:`txdilation.selection.rekindle`)
    rekindle: bool = False
    #: what the connector is for (a generation's race, a standby, an upgrade after a move)
    purpose: Purpose = Purpose.RACE
