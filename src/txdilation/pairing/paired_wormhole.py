"""``PairedWormhole``: a dilated wormhole that outlives both processes (the library API).

Layer: pairing facade (application-facing; txdilation must be installed). Made with a pairing
file's path: the first time (no file) it needs a wormhole code and writes the file once
dilated; afterwards it meets the peer without a code after any restart of either side, and its
endpoints serve each meeting (an example: docs/pairing.md). Lifecycle: ``paired_machine`` in
:mod:`.paired_lifecycle` (state-diagrams/paired_lifecycle.svg).

Invariants: ``when_dilated()`` fires when a meeting is dilated (at once while one is), and
fails with the fatal error or once closed; a fatal error is reported once (``on_failed``);
``close()`` may be called any number of times and each Deferred fires once everything is
closed; a meeting that ends because the peer restarted ends its open subchannels with
:class:`~txdilation.pairing.pairing_errors.PeerRestarted`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from txdilation.pairing.conduct import Conductor
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.meeting import StatusCallbacks
from txdilation.pairing.paired_endpoints import PairedConnectorEndpoint, PairedListenerEndpoint
from txdilation.pairing.paired_lifecycle import PairedCore, PairedEvents, paired_machine
from txdilation.pairing.pairing_options import PairingOptions
from txdilation.pairing.record import PairingRecord
from txdilation.pairing.store import PairingStore

__all__ = ["PairedWormhole"]


class PairedWormhole:
    """See the module docstring.

    :param reactor: the reactor.
    :param options: the pairing file, mailbox, code (first time) and dilation settings.
    :param on_event: called with ``(kind, fields)`` for what happens: ``code``,
        ``peer-connected``, ``paired``, ``waiting``, ``meeting``, ``peer-restarted``,
        ``reconnected``, ``ratchet``, ``warning`` (docs/status-events.md has the fields).
    :param status: called once per meeting; returns that meeting's ``(wormhole status,
        dilation status)`` callbacks (or None).
    :param on_failed: called once with a fatal error's failure.
    """

    def __init__(
        self,
        reactor: Any,
        options: PairingOptions,
        *,
        on_event: Callable[[str, dict[str, Any]], object] | None = None,
        status: Callable[[], StatusCallbacks | None] | None = None,
        on_failed: Callable[[Failure], object] | None = None,
    ) -> None:
        import txdilation

        txdilation.install()  # every meeting's wormhole dilates through txdilation
        self.store = PairingStore(options.path)
        self._conductor = Conductor(
            reactor,
            RecordKeeper(self.store, reactor, options.fault),
            options,
            on_event if on_event is not None else lambda kind, fields: None,
            status if status is not None else lambda: None,
        )
        self._core = PairedCore(self._conductor, on_failed)
        self._machine: PairedEvents = paired_machine(self._core)

    @property
    def record(self) -> PairingRecord | None:
        """The pairing as last written (None before the code meeting wrote it)."""
        return self._conductor.record

    @property
    def peer(self) -> str:
        """The paired peer's name (``?`` until known)."""
        return self._conductor.peer_name()

    @property
    def _manager(self) -> Any:
        """The current meeting's Manager, or None (the session's debug aids read it, as they
        read a ``DilatedWormhole``'s)."""
        meeting = self._conductor.meeting
        return meeting.manager if meeting is not None else None

    @property
    def last_rtt(self) -> float | None:
        """The current meeting's last round-trip time (None between meetings or before the
        first PONG), as a ``DilatedWormhole``'s."""
        manager = self._manager
        return manager.last_rtt if manager is not None else None  # type: ignore[no-any-return]

    @property
    def connected(self) -> bool:
        """Whether the current meeting has a connection selected now."""
        manager = self._manager
        return manager is not None and manager.connection is not None

    def abort_connection(self) -> None:
        """Abort the current meeting's selected connection, if any (a test and debugging aid,
        as a ``DilatedWormhole``'s: Dilation then reconnects)."""
        manager = self._manager
        connection = manager.connection if manager is not None else None
        if connection is not None:
            connection.abort()

    def start(self) -> None:
        """Start: the code meeting when the file does not exist, else meet the peer."""
        if self.store.exists():
            self._machine.start_paired()
        else:
            self._machine.start_pairing()

    def when_dilated(self) -> Deferred[None]:
        """Fires once a meeting is dilated (at once while one is); fails with the fatal error,
        or once closed."""
        core = self._core
        if core.failure is not None:
            return fail(core.failure)
        meeting = self._conductor.meeting
        if meeting is not None and meeting.is_dilated and self.record is not None:
            return succeed(None)
        return core.dilated_waiters.wait()

    def listener_for(self, subprotocol: str) -> PairedListenerEndpoint:
        """An endpoint whose ``listen(factory)`` serves subchannels ``subprotocol`` in every
        meeting (see :mod:`.paired_endpoints`)."""
        return PairedListenerEndpoint(self._conductor.board, subprotocol, self.peer)

    def connector_for(self, subprotocol: str) -> PairedConnectorEndpoint:
        """An endpoint whose ``connect(factory)`` opens a subchannel in the current meeting
        (or the next).

        :raises ValueError: for an empty name.
        """
        return PairedConnectorEndpoint(self._conductor.board, subprotocol)

    def close(self) -> Deferred[None]:
        """Close the meetings and leave the lobbies (without closing them: the next process
        of this side comes back to them); fires once done."""
        d = self._core.close_waiters.wait()
        self._machine.close()
        return d
