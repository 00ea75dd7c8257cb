"""L1: the peer's DILATE-n messages, checked against our role and fed to the Manager's machine.

:class:`PeerMessages` is the ``MessageHandlers`` that ``mailbox.dilate_messages.dispatch`` calls for
each message the Manager receives. txdilation's extensions, sent only to a peer whose
``please`` listed them (docs/reliability.md): ``closing`` (the peer's application closed its
wormhole: no reconnection) and ``link-lost`` (a Follower's report that a generation's link is
gone, so a Leader that has not noticed starts a new one at once).

Invariants: a message the peer may not send in our role (``reconnect`` to a Leader,
``reconnecting`` or ``link-lost`` to a Follower) is logged and ignored; a ``please`` with a
version we do not speak fails the dilation; nothing here raises into the reactor.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.mailbox.dilate_messages import ConnectionHints, Please
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.manager_core import ManagerCore, ManagerEvents
from txdilation.wire.dilation_errors import OldPeerCannotDilateError
from txdilation.wire.roles import FOLLOWER, LEADER

__all__ = ["PeerMessages"]

_log = Logger()


class PeerMessages:
    """One Manager's ``MessageHandlers`` (see the module docstring); ``speaks(version)``:
    whether we speak that dilation version."""

    def __init__(
        self,
        core: ManagerCore,
        events: ManagerEvents,
        losses: LossRecorder,
        speaks: Callable[[str], bool],
    ) -> None:
        self._core = core
        self._events = events
        self._losses = losses
        self._speaks = speaks

    def please(self, message: Please) -> None:
        c = self._core
        if message.use_version is not None and not self._speaks(message.use_version):
            _log.warn("peer wants dilation version {v!r} we do not speak", v=message.use_version)
            self._core.mux.fail_dilation(Failure(OldPeerCannotDilateError()))  # type: ignore[no-untyped-call]
            return
        if message.side == c.my_side:
            _log.error("peer chose the same dilation side as ours; cannot pick a Leader")
            self._events.stop()
            return
        c.peer_extensions = c.peer_extensions or message.extensions
        if not c.peer_extensions:
            self._core.mux.peer_is_stock()
        self._core.telemetry.please_received()
        self._core.telemetry.set_pair(c.my_side, message.side)
        self._events.rx_please(message.side)

    def hints(self, message: ConnectionHints) -> None:
        for problem in message.problems:
            _log.warn("ignoring hint: {problem}", problem=problem)
        self._core.telemetry.hints_received(message.type_counts)
        self._events.rx_hints(message.hints)

    def reconnect(self) -> None:
        if self._core.role is not FOLLOWER:
            _log.warn("ignoring 'reconnect': only a Leader may send it to a Follower")
            return
        self._losses.leader_asked_to_leave(self._core.link)
        self._events.rx_reconnect()

    def reconnecting(self) -> None:
        if self._core.role is not LEADER:
            _log.warn("ignoring 'reconnecting': only a Follower may send it to a Leader")
            return
        self._core.reconnectings += 1
        self._events.rx_reconnecting()

    def closing(self) -> None:
        _log.info("the peer is closing its wormhole")
        self._events.rx_closing()

    def peer_lost_link(self, generation: int) -> None:
        if self._core.role is not LEADER:
            _log.warn("ignoring 'link-lost': only a Follower may send it to a Leader")
            return
        self._events.rx_link_lost(generation)
