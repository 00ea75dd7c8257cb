"""A meeting: one wormhole with the paired peer, dilated; the code meeting or a derived one.

Layer: pairing glue over stock magic-wormhole's public API and ``txdilation.dilate``, plus the
one place that reaches into stock's client machines: :func:`open_derived` opens a derived
meeting's mailbox by id, with the derived password, without claiming a nameplate (it checks
the machines of the pinned magic-wormhole 0.24.x are there, else :class:`StockMismatch`,
before anything is sent). A :class:`Meeting` reports to its :class:`MeetingOwner`: ``met`` or
``refused``, pairing messages, dilation, the link lost or back, the peer leaving, the end.
How: docs/module-notes.md.

Invariants: the owner hears ``met`` or ``refused`` at most once, and nothing but ``ended``
after ``refused``; after :meth:`Meeting.close` the owner hears nothing more; the meeting's
pairing messages are sent only after the peer announced pairing; a ``lost`` failure first ends
its open subchannels with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._status import ConnectedPeer, DilationStatus, ReconnectingPeer, StoppedPeer

from txdilation.errors import PairingFailure
from txdilation.pairing.pairing_messages import (
    ANNOUNCEMENT,
    BadPairingMessage,
    PairingMessage,
    announced,
    build,
    parse,
)

__all__ = [
    "DERIVED_CODE",
    "Meeting",
    "MeetingOwner",
    "StatusCallbacks",
    "StatusGate",
    "StockMismatch",
    "create_wormhole",
    "dilator",
    "open_derived",
]

DERIVED_CODE = "paired"
"""What ``w.get_code()`` of a derived meeting gives (there is no code)."""

_log = Logger()

StatusCallbacks = tuple[Callable[[Any], object], Callable[[Any], object]]
"""``(wormhole on_status_update, dilation on_status_update)`` for one meeting."""


class StatusGate:
    """One meeting's status callbacks, silenced once the meeting is closing (an old
    meeting's mailbox closing is not news about the pairing)."""

    def __init__(self, callbacks: StatusCallbacks | None) -> None:
        self._callbacks = callbacks
        self.open = True

    def wormhole(self, status: Any) -> None:
        if self.open and self._callbacks is not None:
            self._callbacks[0](status)

    def dilation(self, status: Any) -> None:
        if self.open and self._callbacks is not None:
            self._callbacks[1](status)

    @property
    def callbacks(self) -> StatusCallbacks:
        """``(wormhole status, dilation status)``: hand them to the wormhole and the meeting."""
        return (self.wormhole, self.dilation)


class StockMismatch(RuntimeError, PairingFailure):
    """The installed magic-wormhole lacks the client machines a derived meeting drives."""


def create_wormhole(reactor: Any, appid: str, url: str, status: StatusCallbacks | None) -> Any:
    """``wormhole.create(..., dilation=True)`` announcing pairing in its app versions.

    txdilation must be installed first (``txdilation.install()``).
    """
    import wormhole

    return wormhole.create(
        appid,
        url,
        reactor,
        versions=dict(ANNOUNCEMENT),
        dilation=True,
        on_status_update=status[0] if status is not None else None,
    )


def dilator(w: Any, options: Any, relay: tuple[str, ...]) -> Callable[[Any], Any]:
    """What a :class:`Meeting` calls to dilate ``w``: ``txdilation.dilate`` with the
    ``PairingOptions``' settings and ``relay``, and the meeting's own status callback."""
    import txdilation

    def dilate(on_status: Callable[[Any], object]) -> Any:
        return txdilation.dilate(
            w,
            list(relay) or None,
            no_listen=options.no_listen,
            on_status_update=on_status,
            ping_interval=options.ping_interval,
            expected_subprotocols=options.expected_subprotocols,
            semantics=options.semantics,
            settings=options.settings,
        )

    return dilate


def open_derived(w: Any, mailbox_id: str, password: str) -> None:
    """Point a fresh wormhole (from :func:`create_wormhole`) at a derived meeting: mailbox
    ``mailbox_id`` opened directly, ``password`` as the PAKE password, no nameplate.

    :raises StockMismatch: when stock's machines are not the expected ones (nothing sent).
    """
    boss: Any = getattr(w, "_boss", None)
    nameplate, key, mailbox = (getattr(boss, name, None) for name in ("_N", "_K", "_M"))
    if nameplate is None or key is None or mailbox is None or not hasattr(boss, "got_code"):
        raise StockMismatch(
            "this magic-wormhole has no Nameplate/Key/Mailbox machines where 0.24 has them: "
            "pairing needs magic-wormhole 0.24.x"
        )
    if getattr(boss, "_did_start_code", True):
        raise StockMismatch("the wormhole already has a code")
    boss._did_start_code = True  # set_code()/allocate_code() now raise OnlyOneCodeError
    nameplate.close()  # no nameplate: its machine is done, and tells the Terminator so
    boss.got_code(DERIVED_CODE)  # the Boss waits for the key from here on
    key.got_code(password)  # SPAKE2 with the derived password (queues the "pake" message)
    mailbox.got_mailbox(mailbox_id)  # open the derived mailbox once connected


class MeetingOwner(Protocol):
    """What a :class:`Meeting` reports to (every call is made at most once per meeting,
    except ``message``, ``link_lost`` and ``link_back``)."""

    def met(self, meeting: Meeting) -> None:
        "The peer's key is confirmed and it announced pairing."

    def refused(self, meeting: Meeting) -> None:
        "The peer's key is confirmed but it did not announce pairing."

    def message(self, meeting: Meeting, message: PairingMessage) -> None:
        "A pairing message from the peer."

    def dilated(self, meeting: Meeting) -> None:
        "The first connection of the meeting's dilation was selected."

    def link_lost(self, meeting: Meeting) -> None:
        "The selected connection was lost (Dilation reconnects)."

    def link_back(self, meeting: Meeting) -> None:
        "A connection was selected again after a loss."

    def peer_left(self, meeting: Meeting) -> None:
        "The peer closed its side (Dilation stopped without our close)."

    def ended(self, meeting: Meeting, failure: Failure) -> None:
        "The wormhole ended by itself (a server error, a wrong password, ...)."


class Meeting:
    """One wormhole with the paired peer (see the module docstring).

    :param w: the wormhole (code set or :func:`open_derived` done, or to be done by the owner).
    :param dilate: called with the dilation status callback; returns the DilatedWormhole.
    :param owner: what hears what happens.
    :param label: names the meeting in logs.
    :param gate: the application's status callbacks for this meeting (the wormhole's were
        given to it when it was made); closing the meeting silences them.
    """

    def __init__(
        self,
        w: Any,
        dilate: Callable[[Callable[[Any], object]], Any],
        owner: MeetingOwner,
        label: str,
        gate: StatusGate | None = None,
    ) -> None:
        self.wormhole = w
        self.label = label
        self._owner = owner
        self._gate = gate
        self.closing = False
        self.is_met = False
        self.is_dilated = False
        self.link_up = False
        self.was_lost = False
        self.dilated = dilate(self._dilation_status)
        w.get_versions().addCallbacks(self._versions, self._failed)
        self._next_message()
        self.dilated.when_dilated().addCallbacks(self._dilated, lambda f: None)

    # --- what the owner does ---

    def send(self, message: PairingMessage) -> None:
        """Send a pairing message (only once the peer announced pairing)."""
        if self.is_met and not self.closing:
            self.wormhole.send_message(build(message))

    def derive(self, purpose: str) -> bytes:
        """32 bytes from the meeting's session key for ``purpose`` (``w.derive_key``)."""
        material: bytes = self.wormhole.derive_key(purpose, 32)
        return material

    @property
    def manager(self) -> Any:
        """The dilation's Manager (for the session's debug aids and the link's RTT)."""
        return getattr(self.dilated, "_manager", None)

    def close(
        self, reason: str, lost: Failure | None = None, *, silence: bool = True
    ) -> Deferred[None]:
        """End the meeting: its open subchannels first (with ``lost``, when given), then the
        wormhole. Fires once the wormhole is closed, whatever its result (idempotent).

        :param silence: stop passing on its status (False: the application is stopping and
            hears this meeting close, as it would any wormhole's).
        """
        first = not self.closing
        self.closing = True
        if self._gate is not None and silence:
            self._gate.open = False
        manager = self.manager
        if first and lost is not None and manager is not None:
            manager.multiplexer.stop(reason, lost)
        d: Deferred[Any] = self.wormhole.close()
        done: Deferred[None] = Deferred()

        def finished(result: object) -> None:
            if isinstance(result, Failure) and not result.check(CancelledError):  # type: ignore[no-untyped-call]
                _log.debug(
                    "meeting {label} closed: {why}", label=self.label, why=result.getErrorMessage()
                )
            if not done.called:
                done.callback(None)

        d.addBoth(finished)
        return done

    # --- from the wormhole ---

    def _versions(self, versions: object) -> None:
        if self.closing:
            return
        if announced(versions):
            self.is_met = True
            self._owner.met(self)
        else:
            self._owner.refused(self)

    def _next_message(self) -> None:
        self.wormhole.get_message().addCallbacks(self._received, self._failed)

    def _received(self, data: bytes) -> None:
        if self.closing:
            return
        self._next_message()
        try:
            message = parse(data)
        except BadPairingMessage as e:
            _log.warn("meeting {label}: {error}", label=self.label, error=str(e))
            return
        if self.is_met:
            self._owner.message(self, message)

    def _failed(self, failure: Failure) -> None:
        if self.closing:
            return
        self.closing = True
        self._owner.ended(self, failure)

    def _dilated(self, _: object) -> None:
        if self.closing or self.is_dilated:
            return
        self.is_dilated = True
        self._owner.dilated(self)

    def _dilation_status(self, status: DilationStatus) -> None:
        if self._gate is not None:
            self._gate.dilation(status)
        if self.closing:
            return
        peer = status.peer_connection
        if isinstance(peer, ConnectedPeer):
            if not self.link_up:
                self.link_up = True
                if self.was_lost:
                    self.was_lost = False
                    self._owner.link_back(self)
        elif isinstance(peer, ReconnectingPeer):
            if self.link_up:
                self.link_up = False
                self.was_lost = True
                self._owner.link_lost(self)
        elif isinstance(peer, StoppedPeer):
            self.closing = True
            self._owner.peer_left(self)
