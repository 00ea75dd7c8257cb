"""Subchannel endpoints that outlive meetings: named services come back by themselves.

Layer: pairing glue (Twisted endpoint interfaces over each meeting's ``DilatedWormhole``). A
paired wormhole has one meeting at a time, and a new one after each restart of either side.
:class:`PairedListenerEndpoint` registers its factory with every meeting, the current one and
each later one, until its port stops listening; :class:`PairedConnectorEndpoint` opens each
subchannel in the current meeting (waiting for one when there is none).

Invariants: one ``listen()`` gives one port that serves every meeting; a factory listens at most
once per meeting; ``stopListening()`` stops it in the current meeting and keeps it out of later
ones; a ``connect()`` made while no meeting runs waits for the next and can be cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.wire.waiting import Waiters, fire_unless_called

__all__ = [
    "MeetingBoard",
    "MeetingSource",
    "PairedAddress",
    "PairedConnectorEndpoint",
    "PairedListenerEndpoint",
    "PairedListeningPort",
]


class MeetingSource(Protocol):
    """What the endpoints need from the paired wormhole."""

    def current_dilated(self) -> Any | None:
        "The current meeting's DilatedWormhole, or None between meetings."

    def next_dilated(self) -> Deferred[Any]:
        "Fires with the next meeting's DilatedWormhole (cancellable)."

    def add_port(self, port: PairedListeningPort) -> None:
        "Attach ``port`` to the current meeting and every later one."

    def remove_port(self, port: PairedListeningPort) -> None:
        "Stop attaching ``port``."


class MeetingBoard:
    """The :class:`MeetingSource` of a paired wormhole: which meeting is current, the ports
    to attach to each new one, and the ``connect()`` calls waiting for one."""

    def __init__(self) -> None:
        self._current: Any | None = None
        self._ports: list[PairedListeningPort] = []
        self._waiters: Waiters[Any] = Waiters()

    def publish(self, dilated: Any) -> None:
        """A new meeting: attach every port, hand it to every waiting ``connect()``."""
        self._current = dilated
        for port in list(self._ports):
            port.attach(dilated)
        self._waiters.fire(dilated)

    def withdraw(self, dilated: Any) -> None:
        """That meeting is over (no effect if another one is current)."""
        if self._current is dilated:
            self._current = None

    def close(self, reason: Exception) -> None:
        """No meeting will come: fail every waiting ``connect()`` with ``reason``."""
        self._current = None
        self._waiters.fire(Failure(reason))  # type: ignore[no-untyped-call]

    # --- MeetingSource ---

    def current_dilated(self) -> Any | None:
        return self._current

    def next_dilated(self) -> Deferred[Any]:
        return self._waiters.wait()

    def add_port(self, port: PairedListeningPort) -> None:
        self._ports.append(port)
        if self._current is not None:
            port.attach(self._current)

    def remove_port(self, port: PairedListeningPort) -> None:
        if port in self._ports:
            self._ports.remove(port)


@implementer(IAddress)
@dataclass(frozen=True, slots=True)
class PairedAddress:
    """Where a paired port listens: a subprotocol of the pairing with ``peer``."""

    subprotocol: str
    peer: str


@implementer(IListeningPort)
class PairedListeningPort:
    """Serves the subchannels named ``name`` in every meeting (see the module docstring)."""

    def __init__(
        self, source: MeetingSource, name: str, factory: IProtocolFactory, peer: str
    ) -> None:
        self._source = source
        self.name = name
        self.factory = factory
        self._peer = peer
        self._current: tuple[Any, Deferred[Any]] | None = None
        self.stopped = False

    def attach(self, dilated: Any) -> None:
        """Listen in one meeting (once per meeting)."""
        if self.stopped or (self._current is not None and self._current[0] is dilated):
            return
        d: Deferred[Any] = dilated.listener_for(self.name).listen(self.factory)
        d.addErrback(lambda f: None)  # the meeting ended (its own close says why)
        self._current = (dilated, d)  # the previous meeting's port ended with that meeting

    def startListening(self) -> None:
        """Already listening (``listen()`` started it)."""

    def stopListening(self) -> Deferred[None]:
        """Stop serving (this meeting and later ones)."""
        if not self.stopped:
            self.stopped = True
            self._source.remove_port(self)
            current, self._current = self._current, None
            if current is not None:
                d = current[1]
                d.addCallback(lambda port: port.stopListening() if port is not None else None)
                d.addErrback(lambda f: None)
        return succeed(None)

    def getHost(self) -> PairedAddress:
        """The subprotocol and the paired peer."""
        return PairedAddress(self.name, self._peer)


@implementer(IStreamServerEndpoint)
class PairedListenerEndpoint:
    """``listen(factory)``: serve subchannels ``name`` in every meeting."""

    def __init__(self, source: MeetingSource, name: str, peer: str) -> None:
        self._source = source
        self._name = name
        self._peer = peer

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        """Returns at once with the port (it serves once a meeting is dilated)."""
        port = PairedListeningPort(self._source, self._name, protocolFactory, self._peer)
        self._source.add_port(port)
        return succeed(port)


@implementer(IStreamClientEndpoint)
class PairedConnectorEndpoint:
    """``connect(factory)``: a subchannel ``name`` in the current (or next) meeting."""

    def __init__(self, source: MeetingSource, name: str) -> None:
        if not name:
            raise ValueError("a subchannel needs a name")
        self._source = source
        self._name = name

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Open the subchannel; fires with the protocol once the peer has it, or fails when
        the meeting ends first."""
        dilated = self._source.current_dilated()
        if dilated is not None:
            connected: Deferred[IProtocol] = dilated.connector_for(self._name).connect(
                protocolFactory
            )
            return connected
        waiting = self._source.next_dilated()
        result: Deferred[IProtocol] = Deferred(lambda d: waiting.cancel())

        def meeting(dilated: Any) -> None:
            inner = dilated.connector_for(self._name).connect(protocolFactory)
            inner.addBoth(partial(fire_unless_called, result))

        waiting.addCallbacks(meeting, partial(fire_unless_called, result))
        return result
